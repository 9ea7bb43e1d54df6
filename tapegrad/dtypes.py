"""Dtype rules, stated once: which dtypes may carry a gradient, and PyTorch's
type promotion for ops that mix operands.

Promotion (``result_type``) follows ``torch.result_type``: operands are ranked
in three tiers -- tensors with dimensions, 0-d tensors (and 0-d arrays), and
plain numbers (Python and NumPy scalars) -- and a lower tier changes the
result only when its *category* (bool < integer < floating < complex) is
higher. So ``x32 * np.float64(0.5)``, ``x32 + tensor(1.0, dtype=float64)``
and ``x16 + 1.5`` keep the tensor's dtype, ``int_tensor * 0.5`` becomes the
default float dtype, and two dimensioned float tensors promote as NumPy does
(float32 with float64 gives float64). Ops that contract dimensions (matmul,
linear, conv) do not promote: they raise a :class:`DTypeError` naming both
dtypes, as PyTorch does (:func:`check_same_float`).

Integer and bool inputs (:func:`int_dtype`): each op declares what it computes
them in (``Function.int_inputs``, one of :data:`INT_RULES`): a floating op
(``exp``, ``tanh``, ``logsumexp``, true division) computes in and returns the
default float dtype, as PyTorch does, never NumPy's float16/float64; ``sum``,
``prod`` and ``cumsum`` accumulate in int64; where PyTorch refuses integer input
(``softmax``, ``mean``, ``var``, ``norm``) a :class:`DTypeError` says so.
Dtype names are parsed by :func:`as_dtype` (``"bfloat16"`` gets a named error).
"""

from __future__ import annotations

import numbers

import numpy as np

from .errors import DTypeError, describe

_default_dtype = np.dtype(np.float32)


def set_default_dtype(dtype) -> None:
    """The dtype Python floats (and lists of them) become: float32 unless changed."""
    global _default_dtype
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise DTypeError(f"set_default_dtype: expected a floating dtype, got {dt}")
    _default_dtype = dt


def get_default_dtype():
    return _default_dtype

__all__ = ["check_differentiable", "result_type", "check_same_float", "as_dtype", "int_dtype",
           "int_input", "INT_RULES", "acc_dtype", "upcast", "downcast"]

_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def check_differentiable(who: str, dtype, detail: str = "") -> None:
    """Raise the one error for a dtype that cannot carry a gradient; ``detail``
    (e.g. ``"(2,) int64"``) says which tensor."""
    if dtype.kind == "f":
        return
    if dtype.kind == "c":
        raise DTypeError(
            f"{who}: complex tensors ({detail or dtype}) do not support autograd in tapegrad: "
            "PyTorch's conjugate-Wirtinger gradients are not implemented, and a real-valued "
            "rule would give silently wrong gradients. Differentiate with respect to the real "
            "and imaginary parts as separate float tensors instead."
        )
    raise DTypeError(
        f"{who}: only floating-point tensors can require grad, got {detail or dtype}; convert "
        "first, e.g. x.astype('float32')"
    )


def _promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """PyTorch's promotion of two dtypes: within a category NumPy's rule, across
    categories the higher one (integer with float16 gives float16, not float64)."""
    ca, cb = _CATEGORY[a.kind], _CATEGORY[b.kind]
    if ca == cb or {ca, cb} == {2, 3}:
        return np.promote_types(a, b)
    return a if ca > cb else b


def _number_dtype(v) -> np.dtype:
    """The dtype a plain number stands for: the default float dtype for floats."""
    if isinstance(v, (bool, np.bool_)):
        return np.dtype(bool)
    if isinstance(v, numbers.Integral):
        return np.dtype(np.int64)
    if isinstance(v, numbers.Real):
        return get_default_dtype()
    if isinstance(v, numbers.Complex):
        return np.result_type(get_default_dtype(), np.complex64)
    raise DTypeError(f"cannot use a {type(v).__name__} as an operand")


def result_type(*operands) -> np.dtype:
    """The dtype of an elementwise op over ``operands`` (Tensors, arrays, 0-d
    arrays or numbers; ``None`` is skipped), by PyTorch's rule. A NumPy scalar
    counts as a number, a Tensor holding one as a 0-d tensor."""
    tiers: list = [None, None, None]  # dimensioned, 0-d, numbers
    for v in operands:
        if v is None:
            continue
        dt = getattr(v, "dtype", None)
        if dt is None or isinstance(v, np.generic):
            tier, dt = 2, _number_dtype(v)
        else:
            tier = 0 if v.ndim else 1
        old = tiers[tier]
        tiers[tier] = dt if old is None else _promote(old, dt)
    return _combine(tiers[0], _combine(tiers[1], tiers[2]))


def _combine(higher, lower):
    """A higher tier's dtype, changed by a lower tier only when the lower one's
    category is higher (PyTorch's ``combine_categories``)."""
    if higher is None or lower is None:
        return lower if higher is None else higher
    if higher.kind == "c":
        return higher
    if lower.kind == "c":
        return np.result_type(higher, np.complex64) if higher.kind == "f" else lower
    if higher.kind == "f":
        return higher
    if higher.kind == "b" or lower.kind == "f":
        return _promote(higher, lower)
    return higher


def check_same_float(op: str, *arrays) -> None:
    """Matmul, linear and conv take one floating dtype: PyTorch raises on a mix,
    and so do we (no silent upcast of a float32 model to float64)."""
    present = [a for a in arrays if a is not None]
    dts = {a.dtype for a in present}
    if len(dts) > 1 and any(dt.kind == "f" for dt in dts):
        raise DTypeError(
            f"{op}: operands must share one floating dtype, got {describe(*present)}. "
            "Cast one of them first (e.g. x.float() or x.astype(w.dtype)); tapegrad does not "
            "promote inside matmul/linear/conv, as PyTorch does not."
        )


def as_dtype(dtype, who: str = "dtype") -> np.dtype:
    """``np.dtype(dtype)``, with a named :class:`DTypeError` for what NumPy cannot
    hold (``"bfloat16"``, ``torch.bfloat16``) instead of NumPy's TypeError."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    # ml_dtypes (which onnx and jax import) registers a NumPy bfloat16 that no op
    # here supports, so the name is refused whether or not NumPy knows it
    if dt is None or dt.name == "bfloat16":
        if "bfloat16" in str(dtype) or (dt is not None and dt.name == "bfloat16"):
            raise DTypeError(
                f"{who}: bfloat16 is not supported: tapegrad's arrays are NumPy/CuPy ones, "
                "which have no bfloat16. Use float16 (half precision, ops accumulate in "
                "float32) or float32 (the default)")
        raise DTypeError(f"{who}: {dtype!r} is not a dtype tapegrad understands; use e.g. "
                         "'float32', 'float64', 'int64' or 'bool'")
    return dt


# ------------------------------------------------- integer and bool inputs
# What an op given integer or bool input computes in: PyTorch's rule, stated here
# once. Every op declares one rule (``Function.int_inputs``, default KEEP); the ops
# that promote several operands (Div) apply it in tape._promote, the others in their
# public function through int_input().
KEEP = "keep"  # the input's own dtype: shape ops, max/min, add, matmul
KEEP_NOT_BOOL = "keep, not bool"  # ... but bool refused: x - y, abs, relu, x ** y
FLOAT = "float"  # the default float dtype: exp, log, sin, tanh, sigmoid, logsumexp, x / y
FLOAT_NOT_BOOL = "float, not bool"  # ... but bool refused (softsign, tanhshrink: abs/sub)
INT64 = "int64"  # sum, prod, cumsum: integers accumulate in (and return) int64
REFUSE = "refuse"  # PyTorch raises: softmax, mean, var, norm, leaky_relu
INT_RULES = (KEEP, KEEP_NOT_BOOL, FLOAT, FLOAT_NOT_BOOL, INT64, REFUSE)
_INT64 = np.dtype(np.int64)


def int_dtype(fn, dt: np.dtype, detail: str = "") -> np.dtype:
    """The dtype op ``fn`` (a Function class) computes in for the integer or bool
    dtype ``dt``, by ``fn.int_inputs``; a DTypeError where PyTorch refuses.
    ``detail`` (e.g. ``"(3,) uint8"``) says which input."""
    rule = fn.int_inputs
    if rule == KEEP or (rule == KEEP_NOT_BOOL and dt.kind != "b"):
        return dt
    if rule == INT64:
        return _INT64
    if rule == FLOAT or (rule == FLOAT_NOT_BOOL and dt.kind != "b"):
            return get_default_dtype()
    kind = "bool" if dt.kind == "b" else "integer"
    name = getattr(fn, "op_name", fn.__name__)  # a declared unary op's public name
    raise DTypeError(
        f"{name}: {kind} input ({detail or dt}) is not supported, as in PyTorch (which "
        "raises for it too); cast it to a floating dtype first, e.g. x.float() or "
        "x.astype('float32')")


def fit_number(op: str, value, dtype, torch: str = "PyTorch refuses it too"):
    """``value`` when it is no number or fits the integer ``dtype`` it is written
    into or bounds (masked_fill, fill_, setitem, clamp); else a DTypeError, as
    PyTorch's "value cannot be converted to type uint8_t without overflow" (NumPy
    would raise an OverflowError or wrap -2.5 to 254)."""
    dt = np.dtype(dtype)
    if (dt.kind not in "iu" or isinstance(value, (bool, np.bool_))
            or not isinstance(value, numbers.Real)):
        return value
    info = np.iinfo(dt)
    v = int(value) if isinstance(value, numbers.Integral) else float(value)
    if not info.min <= v <= info.max:  # NaN too
        raise DTypeError(f"{op}: the value {value!r} does not fit {dt.name} (from {info.min} "
                         f"to {info.max}); {torch}; cast the tensor first, "
                         "e.g. x.float() or x.long()")
    return value


def int_input(fn, x):
    """``x`` (Tensor or array) as op ``fn`` takes it: itself when floating (or not an
    array), else cast by :func:`int_dtype` (a recorded cast for a Tensor).

    >>> int_input(Exp, tapegrad.tensor([1, 2])).dtype   # float32, as torch.exp
    """
    dt = getattr(x, "dtype", None)
    if dt is None or dt.kind not in "biu":
        return x
    target = int_dtype(fn, dt, describe(x))
    return x if target == dt else x.astype(target)


_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)


# ------------------------------------------------------------ float16 rule
# float16 math accumulates in float32 and returns float16, as PyTorch's does; other
# dtypes are untouched and not copied. Every op family uses these three.

def acc_dtype(dtype):
    """The ``dtype=`` a reduction of ``dtype`` accumulates in: float32 for
    float16 (PyTorch's accumulation type: a float16 sum of 4096 values of
    1000 would overflow), ``None`` (the array's own rule) for anything else."""
    return _F32 if dtype == _F16 else None


def upcast(a):
    """``a`` (array or Tensor) in its accumulation dtype: a float32 copy of
    float16, ``a`` itself otherwise (float32/float64 are not copied)."""
    return a.astype(_F32) if a.dtype == _F16 else a


def downcast(a, dtype):
    """A result computed on :func:`upcast` inputs, back in the input ``dtype``."""
    return a.astype(_F16) if dtype == _F16 else a
