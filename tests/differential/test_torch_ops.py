"""tapegrad against PyTorch, op by op: every name both share (tapegrad.<fn>, Tensor
methods, nn.functional) in float64, float32, float16, int64, int32, uint8 and bool,
on contiguous, transposed and strided inputs: values, result dtypes, gradients and
second derivatives (the rules: tests/differential/torchdiff.py).

KNOWN lists the discrepancies found, each a strict xfail keyed by op and dtype: a
fix turns its XPASS into a failure, and the entry is then deleted.
"""

import pytest

torch = pytest.importorskip("torch")

import numpy as np  # noqa: E402
import torchdiff as D  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from optable import CASES, ELSEWHERE, SKIP, spec, variants  # noqa: E402

import tapegrad as tg  # noqa: E402
import tapegrad.nn.functional as TF  # noqa: E402

# (where, name, variant, dtype) -> reason; variant "tensor" is the tensor-tensor form of
# an operator whose main entry takes a Python number. dtype "*" is every dtype.
KNOWN: dict = {}
_ZERO = "std/var/norm at zero: second derivative at a zero vector: torch nan, tapegrad "
for _k, _r in {("fn", "norm", "", "float64"): _ZERO + "0",
               ("method", "norm", "", "float64"): _ZERO + "0",
               ("F", "normalize", "", "float64"): _ZERO + "0",
               ("F", "cosine_similarity", "", "float64"): _ZERO + "~5e15"}.items():
    KNOWN[_k] = _r
KNOWN[("F", "pdist", "", "float64")] = KNOWN[("F", "pdist", "", "float32")] = (
    "F.pdist is MatConvNet's vl_nnpdist(x, x0), not torch's pdist(input, p): TypeError")
for _d in ("int32", "uint8"):
    KNOWN[("F", "one_hot", "", _d)] = ("one_hot of a non-int64 tensor: torch refuses, "
                                       "tapegrad answers")


def _params():
    out = []
    for key in CASES:
        for variant in variants(key):
            for dtype in D.DTYPES:
                reason = KNOWN.get((*key, variant, dtype)) or KNOWN.get((*key, variant, "*"))
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                ident = f"{key[0]}.{key[1]}{'[tt]' if variant else ''}-{dtype}"
                out.append(pytest.param(key, variant, dtype, marks=marks, id=ident))
    return out


@pytest.mark.parametrize("key, variant, dtype", _params())
@settings(settings.get_profile("differential"))
@given(data=st.data())
def test_matches_torch(key, variant, dtype, data):
    where, name = key
    case = spec(key, variant).draw(data, dtype)
    layout = data.draw(st.sampled_from(D.LAYOUTS))
    D.run(f"{where}.{name}{'[tt]' if variant else ''}", dtype, case, layout)


def _shared():
    fn = {n for n in dir(tg) if not n.startswith("_") and hasattr(torch, n)
          and callable(getattr(tg, n)) and not isinstance(getattr(tg, n), (type(tg), np.dtype))}
    methods = set(dir(torch.Tensor)) & set(dir(tg.Tensor))
    functional = {n for n in set(dir(torch.nn.functional)) & set(dir(TF))
                  if not n.startswith("_") and callable(getattr(TF, n))}
    return ({("fn", n) for n in fn} | {("method", n) for n in methods}
            | {("F", n) for n in functional})


def test_the_table_covers_every_shared_name():
    """A name tapegrad shares with torch gets a row in optable.OPS, in
    test_torch_inplace.py (ELSEWHERE), or a reason in optable.SKIP."""
    shared = _shared()
    missing = sorted(shared - set(CASES) - ELSEWHERE - set(SKIP))
    assert not missing, f"add these to tests/differential/optable.py (OPS or SKIP): {missing}"
    stale = sorted((set(CASES) | set(SKIP)) - shared)
    assert not stale, f"no longer shared by tapegrad and torch, drop them: {stale}"
    known = sorted({k[:2] for k in KNOWN} - set(CASES))
    assert not known, f"KNOWN entries without a case: {known}"
