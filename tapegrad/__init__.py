"""tapegrad: tape-based reverse-mode automatic differentiation on NumPy and CuPy.

>>> import tapegrad as tg
>>> x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> loss = (x * x).sum()
>>> loss.backward()
>>> x.grad                       # tensor([2., 4., 6.])
"""

import warnings as _warnings

import numpy as _np

from . import (
    errors,
    ops,
    sparse,
    tensor_methods,  # noqa: F401  (Tensor's methods that record ops join it there)
)
from .creation import (
    BoolTensor,
    ByteTensor,
    CharTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
    ShortTensor,
    arange,
    as_tensor,
    bernoulli,
    empty,
    eye,
    from_numpy,
    full,
    full_like,
    is_tensor,
    linspace,
    multinomial,
    normal,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    randperm,
    zeros,
    zeros_like,
)
from .device import Device, cupy_available, get_array_module, get_device
from .device.host_memory import tune_malloc
from .device.threads import get_num_threads, set_num_threads
from .engine import backward, grad
from .memory_formats import (
    channels_last,
    channels_last_3d,
    contiguous_format,
    memory_format,
    preserve_format,
)
from .printing import set_printoptions
from .random import Generator, manual_seed
from .sparse import sparse_coo_tensor, spmm
from .tape import Function, enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .tensor import Tensor, get_default_dtype, set_default_dtype, tensor
from .torch_functions import (  # torch.max, torch.var, ... with PyTorch's meaning
    acos,
    add,
    addcdiv,
    addcmul,
    addmm,
    allclose,
    argmax,
    argmin,
    argsort,
    asin,
    atan,
    atan2,
    baddbmm,
    bmm,
    ceil,
    chunk,
    cosh,
    count_nonzero,
    cumprod,
    diag,
    diag_embed,
    diagonal,
    div,
    divide,
    dot,
    equal,
    expm1,
    flip,
    floor,
    floor_divide,
    fmod,
    frac,
    gather,
    ger,
    index_add,
    index_copy,
    index_select,
    inference_mode,
    isfinite,
    isinf,
    isnan,
    lerp,
    log2,
    log10,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    logsumexp,
    masked_select,
    max,  # noqa: A004
    median,
    min,  # noqa: A004
    mm,
    moveaxis,
    movedim,
    mul,
    multiply,
    mv,
    nan_to_num,
    narrow,
    neg,
    negative,
    nonzero,
    norm,
    numel,
    outer,
    permute,
    pow,  # noqa: A004
    reciprocal,
    remainder,
    repeat_interleave,
    roll,
    round,  # noqa: A004
    rsqrt,
    scatter,
    scatter_add,
    select,
    sign,
    sinh,
    split,
    square,
    squeeze,
    std,
    sub,
    subtract,
    tile,
    trace,
    transpose,
    true_divide,
    trunc,
    unbind,
    unsqueeze,
    var,
)

# torch.device: the Device class, whose missing attributes are the tapegrad.device
# package's (tapegrad.device.get_device, .cpu, .threads keep working)
device = Device

__version__ = "0.1.0"

# PyTorch's top-level functions where tapegrad.ops means exactly the same (torch.max,
# torch.var, ... differ from ops.max, ops.var: they come from torch_functions, above)
cat = concatenate = ops.concatenate
stack = ops.stack
where = ops.where
flatten, reshape, matmul = ops.flatten, ops.reshape, ops.matmul
exp, log, log1p, sqrt, abs = ops.exp, ops.log, ops.log1p, ops.sqrt, ops.abs  # noqa: A001
sigmoid, tanh, relu = ops.sigmoid, ops.tanh, ops.relu
softmax, log_softmax = ops.softmax, ops.log_softmax
sum, mean = ops.sum, ops.mean  # noqa: A001
clamp, maximum, minimum = ops.clip, ops.maximum, ops.minimum
sin, cos, erf, cumsum, prod = ops.sin, ops.cos, ops.erf, ops.cumsum, ops.prod
tril, triu, sort, topk = ops.tril, ops.triu, ops.sort, ops.topk

# PyTorch's dtype names (NumPy dtypes: ``x.dtype == tg.float32`` and ``x.to(tg.long)``)
float16 = half = _np.dtype("float16")
float32 = float = _np.dtype("float32")  # noqa: A001  (torch.float, as in PyTorch)
float64 = double = _np.dtype("float64")
int8 = _np.dtype("int8")
uint8 = _np.dtype("uint8")
int16 = short = _np.dtype("int16")
int32 = int = _np.dtype("int32")  # noqa: A001
int64 = long = _np.dtype("int64")
bool = _np.dtype("bool")  # noqa: A001
complex64 = _np.dtype("complex64")
complex128 = _np.dtype("complex128")

# NumPy's floating-point warnings from inside tapegrad's ops (log(0), 0/0, exp
# overflow) are silenced, as PyTorch's ops are silent with the same inf and nan; a
# user's own NumPy code still warns (the filter matches the module the op runs in)
_warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"tapegrad\.")

tune_malloc()  # large temporaries reuse heap memory instead of page-faulting (see its doc)

_SUBMODULES = {"nn", "optim", "data", "testing", "distributed", "utils", "autograd", "onnx",
               "compat", "cuda", "accelerator", "backends", "hub",
               "serialization"}  # tg.serialization.add_safe_globals, as torch.serialization
_LAZY = {"save": "serialization", "load": "serialization", "memory_report": "memory"}


def __getattr__(name):
    """Heavier submodules load on first use: ``tapegrad.nn``, ``tapegrad.save``..."""
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'tapegrad' has no attribute {name!r}")

__all__ = [
    "Tensor", "tensor", "Function", "backward", "grad", "no_grad", "enable_grad",
    "set_grad_enabled", "is_grad_enabled", "set_default_dtype", "get_default_dtype",
    "Device", "device", "get_device", "get_array_module", "cupy_available", "manual_seed",
    "Generator", "set_printoptions",
    "zeros", "ones", "full", "empty", "eye", "arange", "linspace", "randn", "rand", "randint",
    "zeros_like", "ones_like", "full_like", "randn_like", "rand_like", "from_numpy",
    "as_tensor", "is_tensor", "cat", "concatenate", "stack", "where", "flatten", "reshape",
    "matmul", "exp", "log", "log1p", "sqrt", "abs", "sigmoid", "tanh", "relu", "softmax",
    "log_softmax", "sum", "mean", "clamp", "maximum", "minimum",
    "sin", "cos", "erf", "cumsum", "prod", "tril", "triu", "sort", "topk",
    "max", "min", "argmax", "argmin", "var", "std", "squeeze", "unsqueeze", "transpose",
    "permute", "chunk", "split", "gather", "norm", "logsumexp", "numel", "mm", "bmm", "dot",
    "outer", "isnan", "isfinite", "isinf", "allclose", "equal", "sign", "pow", "inference_mode",
    "float16", "half", "float32", "float", "float64", "double", "int8", "uint8", "int16",
    "short", "int32", "int", "int64", "long", "bool", "complex64", "complex128",
    "ops", "errors", "nn", "optim", "data", "testing", "distributed", "save", "load",
    "utils", "memory_report", "autograd", "onnx", "compat", "get_num_threads",
    "set_num_threads", "cuda", "accelerator", "backends", "hub",
    "addmm", "baddbmm", "diag", "diag_embed", "flip", "roll", "index_select", "narrow",
    "nonzero", "argsort", "lerp", "median", "randperm", "multinomial", "bernoulli", "normal",
    "FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor", "ShortTensor",
    "CharTensor", "ByteTensor", "BoolTensor",
    "sparse", "sparse_coo_tensor", "spmm",
    "memory_format", "contiguous_format", "preserve_format", "channels_last",
    "channels_last_3d",
]
__all__ += [  # the script census's names (tapegrad/tensor_methods_more.py)
    "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide",
    "floor_divide", "remainder", "fmod", "atan2", "logical_and", "logical_or", "logical_xor",
    "neg", "negative", "reciprocal", "square", "rsqrt", "floor", "ceil", "trunc", "frac",
    "round", "expm1", "log2", "log10", "sinh", "cosh", "asin", "acos", "atan", "logical_not",
    "nan_to_num", "masked_select", "scatter", "scatter_add", "index_add", "index_copy",
    "cumprod", "unbind", "select", "movedim", "moveaxis", "tile", "ger", "mv", "addcmul",
    "addcdiv", "diagonal", "trace", "repeat_interleave", "count_nonzero",
]


def __dir__():
    """``dir(tapegrad)`` and tab completion list the lazily loaded names too."""
    return sorted(set(globals()) | _SUBMODULES | set(_LAZY))
