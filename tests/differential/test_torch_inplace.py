"""In-place ops on fresh non-leaf tensors and on views of them, against PyTorch.

Each case: ``base = x * 1`` (x a leaf), ``v = VIEW(base)``, ``OP(v, b)`` (b a leaf
operand where the op takes one), then a loss that reads base AND v; base's and v's
values and the gradients of x and b (float64 also twice) must be torch's, or
tapegrad must refuse by name where torch refuses (a write into an expand()ed view).
Runner: torchdiff.py; KNOWN as in test_torch_ops.py.
"""

import pytest

torch = pytest.importorskip("torch")

import numpy as np  # noqa: E402
import torchdiff as D  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SHAPE = (3, 4)
# the views of base (a (3, 4) tensor), written the same in NumPy, torch and tapegrad;
# torch's narrow/diagonal/select have no tapegrad method: base[:, 1:3] and base[1]
# are the narrow and the select
VIEWS = {
    "whole": lambda t: t,
    "slice": lambda t: t[1:],
    "narrow": lambda t: t[:, 1:3],
    "step": lambda t: t[:, ::2],
    "T": lambda t: t.T,
    "T_slice": lambda t: t.T[1:],
    "reshape": lambda t: t.reshape(-1),
    "unsqueeze": lambda t: t.unsqueeze(0),
    "select": lambda t: t[1],
    "expand": lambda t: t[0:1].expand(3, 4),  # torch refuses writes into it
}


def _np_view(view):
    base = np.zeros(SHAPE)
    if view == "expand":
        return np.broadcast_to(base[0:1], SHAPE)
    if view == "unsqueeze":
        return base[None]
    return VIEWS[view](base)


# op -> (operand shape from the view's shape and data, the write)
def _same(vshape, data):
    return vshape


def _last(vshape, data):  # broadcast along the leading axes
    return vshape[-1:]


def _first_index(vshape, data):
    return vshape[1:]


def _mask_values(vshape, data):
    return ()


def _rows(vshape, data):  # one source row per entry of cs[0] (the rows index)
    return (2 if vshape[0] > 1 else 1,) + tuple(vshape[1:])


def _one_row(vshape, data):
    return (1,) + tuple(vshape[1:])


def _to_rows(L, v, k, row):  # a scatter index of v's axes: k rows, all pointing at ``row``
    return L.const(np.full((k,) + tuple(v.shape[1:]), row, np.int64))


OPS = {
    "add_": (_same, lambda L, v, b, cs: v.add_(b)),
    "add_alpha": (_last, lambda L, v, b, cs: v.add_(b, alpha=2.0)),
    "sub_": (_last, lambda L, v, b, cs: v.sub_(b)),
    "mul_": (_same, lambda L, v, b, cs: v.mul_(b)),
    "div_": (_same, lambda L, v, b, cs: v.div_(b)),
    "mul_number": (None, lambda L, v, b, cs: v.mul_(2.5)),
    "__iadd__": (_last, lambda L, v, b, cs: v.__iadd__(b)),
    "__isub__": (_same, lambda L, v, b, cs: v.__isub__(b)),
    "__imul__": (_last, lambda L, v, b, cs: v.__imul__(b)),
    "__itruediv__": (_same, lambda L, v, b, cs: v.__itruediv__(b)),
    "clamp_": (None, lambda L, v, b, cs: v.clamp_(-0.5, 0.5)),
    "copy_": (_same, lambda L, v, b, cs: v.copy_(b)),
    "copy_broadcast": (_last, lambda L, v, b, cs: v.copy_(b)),
    "fill_": (None, lambda L, v, b, cs: v.fill_(2.5)),
    "fill_tensor": ((lambda s, d: ()), lambda L, v, b, cs: v.fill_(b)),
    "zero_": (None, lambda L, v, b, cs: v.zero_()),
    "setitem_basic": (_first_index, lambda L, v, b, cs: v.__setitem__(0, b)),
    "setitem_slice_number": (None, lambda L, v, b, cs: v.__setitem__(slice(1, None), -1.5)),
    "setitem_advanced": (_first_index, lambda L, v, b, cs: v.__setitem__(cs[0], b)),
    "setitem_bool": (_mask_values, lambda L, v, b, cs: v.__setitem__(cs[1], b)),
    "masked_fill_": (None, lambda L, v, b, cs: v.masked_fill_(cs[1], 1.5)),
    "index_fill_": (None, lambda L, v, b, cs: v.index_fill_(0, cs[0], 1.5)),
    "lerp_": (_same, lambda L, v, b, cs: v.lerp_(b, 0.3)),
    "pow_": (None, lambda L, v, b, cs: v.pow_(2)),
    "div_floor": (_same, lambda L, v, b, cs: v.div_(b, rounding_mode="floor")),
    "addcmul_": (_same, lambda L, v, b, cs: v.addcmul_(b, b * 3, value=0.5)),
    "addcdiv_": (_same, lambda L, v, b, cs: v.addcdiv_(b * 2, b * b, value=0.5)),
    "scatter_": (_one_row, lambda L, v, b, cs: v.scatter_(0, _to_rows(L, v, 1, v.shape[0] - 1),
                                                          b)),
    "scatter_value": (None, lambda L, v, b, cs: v.scatter_(0, _to_rows(L, v, 1, 0), 1.5)),
    "scatter_add_": (_rows, lambda L, v, b, cs: v.scatter_add_(0, _to_rows(L, v, len(cs[0]), 0),
                                                               b)),
    "index_add_": (_rows, lambda L, v, b, cs: v.index_add_(0, cs[0], b, alpha=2)),
    "index_copy_": (_rows, lambda L, v, b, cs: v.index_copy_(0, cs[0], b)),
    **{name: (None, lambda L, v, b, cs, name=name, args=args: getattr(v, name)(*args))
       for name, args in (("abs_", ()), ("sqrt_", ()), ("exp_", ()), ("log_", ()),
                          ("relu_", ()), ("sigmoid_", ()), ("tanh_", ()), ("neg_", ()),
                          ("clamp_min_", (0.5,)), ("clamp_max_", (-0.5,)), ("floor_", ()),
                          ("ceil_", ()), ("trunc_", ()), ("round_", ()))},
}
DTYPES = ("float64", "float32", "int64")

# (op, view, dtype) -> reason; view/dtype "*" is every one
KNOWN: dict = {}


def _params():
    out = []
    for op in OPS:
        for view in VIEWS:
            for dtype in DTYPES:
                reason = next((KNOWN[k] for k in ((op, view, dtype), (op, "*", dtype),
                                                  (op, view, "*"), (op, "*", "*"))
                               if k in KNOWN), None)
                marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                out.append(pytest.param(op, view, dtype, marks=marks,
                                        id=f"{op}-{view}-{dtype}"))
    return out


@pytest.mark.parametrize("op, view, dtype", _params())
@settings(settings.get_profile("differential"))
@given(data=st.data())
def test_inplace_matches_torch(op, view, dtype, data):
    operand, write = OPS[op]
    vshape = _np_view(view).shape
    lo, hi = (0.5, 2.0) if op in ("div_", "__itruediv__", "div_floor", "addcdiv_") else (
        -3.0, 3.0)
    x = D.array(data, dtype, SHAPE, kinks=(-0.5, 0.5))
    leaves = [x]
    if operand is not None:
        leaves.append(D.array(data, dtype, operand(vshape, data), lo, hi))
    rows = np.array([0, vshape[0] - 1]) if len(vshape) and vshape[0] > 1 else np.array([0])
    mask = D.array(data, "bool", vshape)
    if op == "setitem_advanced":
        leaves[1] = D.array(data, dtype, (len(rows),) + vshape[1:])

    def call(L, xs, cs):
        base = xs[0] * 1
        v = VIEWS[view](base)
        write(L, v, xs[1] if len(xs) > 1 else None, cs)
        return base, v

    D.run(f"inplace.{op}", dtype, (leaves, [rows, mask], call), view)
