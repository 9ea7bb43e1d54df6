"""How to call each PyTorch name that tapegrad shares, for tests/differential.

``OPS[(where, name)]`` is a :class:`Spec` whose ``draw(data, dtype)`` returns a
case for :func:`torchdiff.run`; ``where`` is ``"fn"`` (``tapegrad.<name>`` vs
``torch.<name>``), ``"method"`` (``x.<name>`` on both) or ``"F"`` (the functional
namespaces). The kinds (:func:`unary`, :func:`binary`, :func:`reduce`, ...) draw
shapes and values; the rest are small custom draws. ``SKIP`` names what is not an
op to compare, with the reason; ``ELSEWHERE`` the in-place names that
test_torch_inplace.py covers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from torchdiff import array, dtype_name, shapes


@dataclass(frozen=True)
class Spec:
    draw: Callable  # (data, dtype) -> (leaves, consts, call)


def _dt(L, name):
    import torch

    import tapegrad as tg
    return getattr(torch, name) if L.is_torch else getattr(tg, name)


def meta(r):
    """Shape and dtype only (random or uninitialised values)."""
    return tuple(r.shape), dtype_name(r)


def _opts(data, opts):
    return data.draw(st.sampled_from(opts)) if opts else ((), {})


def unary(where, name, lo=-3.0, hi=3.0, kinks=(), unique=False, opts=(), shape=None):
    """``f(x, *args, **kw)``, (args, kw) drawn from ``opts``."""
    def draw(data, dtype):
        shp = data.draw(shape if shape is not None else shapes())
        x = array(data, dtype, shp, lo, hi, kinks, unique)
        args, kw = _opts(data, opts)
        return [x], [], lambda L, xs, cs: L.call(where, name, xs[0], *args, **kw)
    return Spec(draw)


def _apart(x, y, dtype):
    """x on odd multiples of 1/4 and y on multiples of 1/2 (ints: even and odd):
    never equal, so maximum/minimum have no ties."""
    if dtype == "bool":
        return x, y
    if np.dtype(dtype).kind == "f":
        return (np.round(x * 2) / 2 + 0.25).astype(dtype), (np.round(y * 2) / 2).astype(dtype)
    return (x // 2 * 2).astype(dtype), (y // 2 * 2 + 1).astype(dtype)


def binary(where, name, lo=-3.0, hi=3.0, lo2=None, hi2=None, kinks=(), kinks2=(),
           apart=False, same_shape=False):
    """``f(x, y)`` on broadcastable shapes (or one shape)."""
    def draw(data, dtype):
        if same_shape:
            s1 = s2 = data.draw(shapes())
        else:
            s1, s2 = data.draw(hnp.mutually_broadcastable_shapes(
                num_shapes=2, max_dims=3, max_side=4)).input_shapes
        x = array(data, dtype, s1, lo, hi, kinks)
        y = array(data, dtype, s2, lo if lo2 is None else lo2, hi if hi2 is None else hi2,
                  kinks2)
        if apart:
            x, y = _apart(x, y, dtype)
        return [x, y], [], lambda L, xs, cs: L.call(where, name, xs[0], xs[1])
    return Spec(draw)


def scalar(where, name, numbers=(2, 2.5, -1.5, True), lo=-3.0, hi=3.0):
    """``f(x, number)``: a Python number as the other operand."""
    def draw(data, dtype):
        x = array(data, dtype, data.draw(shapes()), lo, hi)
        s = data.draw(st.sampled_from(numbers))
        return [x], [], lambda L, xs, cs: L.call(where, name, xs[0], s)
    return Spec(draw)


def reduce(where, name, lo=-3.0, hi=3.0, kinks=(), unique=False, keepdim=True,
           required=False, tuple_dim=False, opts=(), min_dims=0):
    """``f(x)``, ``f(x, dim=d)``, ``f(x, dim=d, keepdim=k)`` (+ options)."""
    def draw(data, dtype):
        shp = data.draw(shapes(min_dims=min_dims))
        x = array(data, dtype, shp, lo, hi, kinks, unique)
        nd = len(shp)
        dims = ([] if required else [None]) + list(range(-max(nd, 1), max(nd, 1)))
        if tuple_dim and nd >= 2:
            dims.append((0, nd - 1))
        d = data.draw(st.sampled_from(dims))
        args, kw = _opts(data, opts)
        kw = dict(kw)
        if d is not None:
            kw["dim"] = d
            if keepdim and data.draw(st.booleans()):
                kw["keepdim"] = True
        return [x], [], lambda L, xs, cs: L.call(where, name, xs[0], *args, **kw)
    return Spec(draw)


def custom(fn):
    """``fn(data, dtype) -> case``, for everything the kinds do not fit."""
    return Spec(fn)


OPS: dict = {}


def _words(text):
    return text.split()


def add(names, factory, *args, wheres=("fn", "method"), **kw):
    for name in names.split():
        for where in wheres:
            OPS[(where, name)] = factory(where, name, *args, **kw)


def method(names, factory, *args, **kw):
    add(names, factory, *args, wheres=("method",), **kw)


def functional(names, factory, *args, **kw):
    add(names, factory, *args, wheres=("F",), **kw)


# ------------------------------------------------------------------- elementwise
add("cos erf exp sin tanh sigmoid", unary)
add("abs relu sign", unary, kinks=(0,))
add("log sqrt", unary, lo=0.1, hi=4.0)
add("log1p", unary, lo=-0.9, hi=3.0)
method("__neg__ __pos__ float double half long int bool clone contiguous detach", unary)
method("__abs__", unary, kinks=(0,))
add("clamp", unary, kinks=(-1, 0.5, 1), opts=(((), {"min": -1.0}), ((), {"max": 1}),
                                              ((), {"min": -1, "max": 0.5}), ((-1, 1), {})))
method("clip", unary, kinks=(-1, 1), opts=(((-1, 1), {}), ((), {"max": 1.0})))
add("maximum minimum", binary, apart=True)
add("pow", binary, lo=0.5, hi=2.0, lo2=-2.0, hi2=2.0)
method("__add__ __sub__ __mul__ __radd__ __rsub__ __rmul__ eq ne lt le gt ge "
       "__eq__ __ne__ __lt__ __le__ __gt__ __ge__", binary)
method("__truediv__", binary, kinks2=(0,))
method("__rtruediv__", binary, kinks=(0,))
method("__floordiv__ __mod__", binary, lo=0.0, lo2=0.5, hi2=3.0, kinks2=(0,))
# x is the divisor here (y // x, y % x): kept off 0, where the gradient of % with respect
# to it, -floor(y / x), is infinite (tapegrad's is 0 where the value is still finite)
method("__rfloordiv__ __rmod__", binary, lo=0.0, lo2=0.5, hi2=3.0, kinks=(0,), kinks2=(0,))
method("__pow__ __rpow__", binary, lo=0.5, hi=2.0, lo2=0.5, hi2=2.0)
method("__and__ __or__ __xor__ __rand__ __ror__ __rxor__", binary, lo=0, hi=7)
method("__invert__", unary, lo=0, hi=7)
method("__add__ __mul__ __sub__ __truediv__ __rsub__ __rtruediv__ __radd__ __rmul__",
       scalar)  # overrides the tensor-tensor form for these: see OPS_TT below
# x / 0 is a kink (x.__rtruediv__(y) is y / x): inf - inf is nan where torch's broadcast
# reduction of [-inf, inf] happens to give inf
OPS_TT = {("method", n): binary("method", n, kinks=(0,) if n == "__rtruediv__" else (),
                                kinks2=(0,))
          for n in ["__add__", "__mul__", "__sub__", "__truediv__", "__rsub__", "__rtruediv__",
                    "__radd__", "__rmul__"]}
method("__pow__ __rpow__", scalar, numbers=(2, 0.5, 3, -1), lo=0.5, hi=2.0)
OPS_TT.update({("method", n): binary("method", n, lo=0.5, hi=2.0, lo2=0.5, hi2=2.0)
               for n in ("__pow__", "__rpow__")})


def _special(data, dtype):  # isnan & co. see inf and nan too
    x = array(data, dtype, data.draw(shapes(min_dims=1)))
    if x.dtype.kind == "f":
        flat = x.reshape(-1)
        for i, v in enumerate(data.draw(st.lists(st.sampled_from([np.inf, -np.inf, np.nan]),
                                                 max_size=flat.size))):
            flat[i] = v
    return x


for _name in ("isfinite", "isinf", "isnan"):
    OPS[("fn", _name)] = custom(lambda data, dtype, n=_name: (
        [_special(data, dtype)], [], lambda L, xs, cs: getattr(L.mod, n)(xs[0])))


def _where(data, dtype):
    s = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=4))
    c, sx, sy = s.input_shapes
    cond = array(data, "bool", c)
    return ([array(data, dtype, sx), array(data, dtype, sy)], [cond],
            lambda L, xs, cs: L.mod.where(cs[0], xs[0], xs[1]))


OPS[("fn", "where")] = custom(_where)


def _masked_fill(data, dtype):
    sx = data.draw(shapes(min_dims=1))
    mask = array(data, "bool", sx[data.draw(st.integers(0, len(sx))):])
    v = data.draw(st.sampled_from([0.0, -2.5, 3, True]))
    return [array(data, dtype, sx)], [mask], lambda L, xs, cs: xs[0].masked_fill(cs[0], v)


OPS[("method", "masked_fill")] = custom(_masked_fill)

# -------------------------------------------------------------------- reductions
add("sum mean amax amin", reduce, tuple_dim=True)
for _n in ("amax", "amin"):
    OPS.pop(("fn", _n))
OPS[("method", "amax")] = reduce("method", "amax", unique=True, tuple_dim=True)
OPS[("method", "amin")] = reduce("method", "amin", unique=True, tuple_dim=True)
add("prod", reduce, lo=-2.0, hi=2.0)
add("max min argmax argmin", reduce, unique=True)
add("std var", reduce, tuple_dim=True,
    opts=(((), {}), ((), {"unbiased": False}), ((), {"correction": 0}), ((), {"correction": 2})))
add("norm", reduce, tuple_dim=True, opts=(((), {}), ((), {"p": 1}), ((), {"p": 3}),
                                          ((), {"p": "fro"})))
add("logsumexp", reduce, required=True, tuple_dim=True)
method("all any", reduce, lo=0, hi=1)
add("softmax log_softmax cumsum", reduce, required=True, keepdim=False)
functional("softmax log_softmax", reduce, required=True, keepdim=False)
add("sort", reduce, unique=True, required=True, keepdim=False,
    opts=(((), {}), ((), {"descending": True})))


def _topk(where):
    def draw(data, dtype):
        shp = data.draw(shapes(min_dims=1))
        d = data.draw(st.integers(-len(shp), len(shp) - 1))
        k = data.draw(st.integers(1, shp[d]))
        largest = data.draw(st.booleans())
        x = array(data, dtype, shp, unique=True)
        return [x], [], lambda L, xs, cs: L.call(where, "topk", xs[0], k, dim=d,
                                                 largest=largest)
    return custom(draw)


OPS[("fn", "topk")], OPS[("method", "topk")] = _topk("fn"), _topk("method")


def _numel(where):
    return custom(lambda data, dtype: ([array(data, dtype, data.draw(shapes()))], [],
                                       lambda L, xs, cs: L.call(where, "numel", xs[0])))


OPS[("fn", "numel")], OPS[("method", "numel")] = _numel("fn"), _numel("method")


def _compare2(name):
    def draw(data, dtype):
        shp = data.draw(shapes())
        x = array(data, dtype, shp)
        y = x.copy() if data.draw(st.booleans()) else array(data, dtype, shp)
        return [x, y], [], lambda L, xs, cs: getattr(L.mod, name)(xs[0], xs[1])
    return custom(draw)


OPS[("fn", "allclose")], OPS[("fn", "equal")] = _compare2("allclose"), _compare2("equal")

# ------------------------------------------------------------------ linear algebra


def _matmul(where, name):
    forms = {"matmul": [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 2)), ((2, 3), (3, 4)),
                        ((2, 2, 3), (3, 4)), ((2, 1, 2, 3), (3, 3, 2))],
             "mm": [((2, 3), (3, 4)), ((2, 3), (2, 3))], "bmm": [((2, 2, 3), (2, 3, 4))],
             "dot": [((3,), (3,)), ((3,), (2,))], "outer": [((3,), (2,))],
             "__matmul__": [((2, 3), (3, 4)), ((3,), (3, 2))],
             "__rmatmul__": [((3, 4), (2, 3))]}[name]

    def draw(data, dtype):
        s1, s2 = data.draw(st.sampled_from(forms))
        a, b = array(data, dtype, s1), array(data, dtype, s2)
        return [a, b], [], lambda L, xs, cs: L.call(where, name, xs[0], xs[1])
    return custom(draw)


for _n in ("matmul", "mm", "bmm", "dot", "outer"):
    OPS[("fn", _n)] = _matmul("fn", _n)
for _n in ("matmul", "__matmul__", "__rmatmul__"):
    OPS[("method", _n)] = _matmul("method", _n)
OPS[("F", "linear")] = custom(lambda data, dtype: (
    [array(data, dtype, data.draw(st.sampled_from([(3,), (2, 3), (2, 2, 3)]))),
     array(data, dtype, (4, 3)), array(data, dtype, (4,))], [],
    lambda L, xs, cs: L.F.linear(*xs)))

# ------------------------------------------------------------------ shape and views


def shaped(where, name, make, min_dims=0, **array_kw):
    """``f(x, *make(shape, data))``: arguments that depend on x's shape."""
    def draw(data, dtype):
        shp = data.draw(shapes(min_dims=min_dims))
        x = array(data, dtype, shp, **array_kw)
        args = make(shp, data)
        return [x], [], lambda L, xs, cs: L.call(where, name, xs[0], *args)
    return custom(draw)


def _axis(shp, data):
    return data.draw(st.integers(-max(len(shp), 1), max(len(shp), 1) - 1))


def _perm(shp, data):
    return tuple(data.draw(st.permutations(range(len(shp)))))


def _reshape(shp, data):
    n = int(np.prod(shp))
    return (data.draw(st.sampled_from([(-1,), (n,), (1, n), (n, 1, -1), ()] if n == 1
                                      else [(-1,), (n,), (1, n), (n, 1, -1)])),)


for _w in ("fn", "method"):
    OPS[(_w, "flatten")] = shaped(_w, "flatten", lambda s, d: (
        (d.draw(st.integers(0, max(len(s) - 1, 0))),) if s else ()))
    OPS[(_w, "reshape")] = shaped(_w, "reshape", _reshape)
    OPS[(_w, "squeeze")] = shaped(_w, "squeeze", lambda s, d: (
        () if d.draw(st.booleans()) else (_axis(s, d),)))
    OPS[(_w, "unsqueeze")] = shaped(_w, "unsqueeze", lambda s, d: (
        d.draw(st.integers(-len(s) - 1, len(s))),))
    OPS[(_w, "transpose")] = shaped(_w, "transpose", lambda s, d: (_axis(s, d), _axis(s, d)))
    OPS[(_w, "tril")] = shaped(_w, "tril", lambda s, d: (d.draw(st.integers(-1, 1)),), 2)
    OPS[(_w, "triu")] = shaped(_w, "triu", lambda s, d: (d.draw(st.integers(-1, 1)),), 2)
    OPS[(_w, "chunk")] = shaped(_w, "chunk", lambda s, d: (d.draw(st.integers(1, 4)),
                                                         _axis(s, d)), 1)
    OPS[(_w, "split")] = shaped(_w, "split", lambda s, d: (d.draw(st.integers(1, 4)),
                                                         _axis(s, d)), 1)
OPS[("fn", "permute")] = shaped("fn", "permute", lambda s, d: (_perm(s, d),), 1)
OPS[("method", "permute")] = shaped("method", "permute", _perm, 1)
OPS[("method", "swapaxes")] = shaped("method", "swapaxes",
                                     lambda s, d: (_axis(s, d), _axis(s, d)))
OPS[("method", "view")] = shaped("method", "view", _reshape)


def _unfold(shp, data):
    """(dimension, size, step): windows that fit, overlapping or not."""
    d = _axis(shp, data)
    n = shp[d] if shp else 1
    return d, data.draw(st.integers(0, n)), data.draw(st.integers(1, n + 1))


OPS[("method", "unfold")] = shaped("method", "unfold", _unfold)
OPS[("method", "t")] = shaped("method", "t", lambda s, d: ())
OPS[("method", "repeat")] = shaped("method", "repeat", lambda s, d: tuple(
    d.draw(st.integers(1, 3)) for _ in range(len(s) + d.draw(st.integers(0, 1)))), 1)
OPS[("method", "expand")] = shaped("method", "expand", lambda s, d: (2,) + tuple(
    d.draw(st.sampled_from([n, -1] if n > 1 else [1, 3, -1])) for n in s))
OPS[("method", "broadcast_to")] = shaped("method", "broadcast_to",
                                         lambda s, d: ((2,) + tuple(s),))
OPS[("method", "size")] = shaped("method", "size", lambda s, d: (
    () if d.draw(st.booleans()) or not s else (_axis(s, d),)))
OPS[("method", "dim")] = shaped("method", "dim", lambda s, d: ())
OPS[("method", "T")] = custom(lambda data, dtype: (
    [array(data, dtype, data.draw(shapes(min_dims=2, max_dims=2)))], [],
    lambda L, xs, cs: xs[0].T))
OPS[("method", "split")] = shaped("method", "split", lambda s, d: (
    d.draw(st.sampled_from([1, 2, [s[0]], [1, s[0] - 1]])),), 1)


def _like(name):  # x.view_as(y), x.expand_as(y), ...
    def draw(data, dtype):
        shp = data.draw(shapes(min_dims=1))
        other = {"view_as": (-1,), "reshape_as": (-1,), "expand_as": (2,) + shp,
                 "type_as": shp}[name]
        if other == (-1,):
            other = (int(np.prod(shp)),)
        y = array(data, data.draw(st.sampled_from(["float64", "int32", "bool"])), other)
        return [array(data, dtype, shp)], [y], lambda L, xs, cs: getattr(xs[0], name)(cs[0])
    return custom(draw)


for _n in ("view_as", "reshape_as", "expand_as", "type_as"):
    OPS[("method", _n)] = _like(_n)


def _getitem(data, dtype):
    shp = data.draw(shapes(min_dims=1))
    n = shp[0]
    index = data.draw(st.sampled_from([
        0, -1, slice(None, None, 2), slice(1, None), (Ellipsis, 0), (None, 0),
        np.array([0, n - 1, 0]), np.arange(n) % 2 == 0, (slice(None), None)]))
    consts = [index] if isinstance(index, np.ndarray) else []
    return [array(data, dtype, shp)], consts, lambda L, xs, cs: xs[0][cs[0] if cs else index]


OPS[("method", "__getitem__")] = custom(_getitem)


def _joined(name):
    def draw(data, dtype):
        shp = data.draw(shapes(min_dims=1))
        d = _axis(shp, data)
        k = data.draw(st.integers(1, 3))
        xs = []
        for _ in range(k):
            s = list(shp)
            if name != "stack":
                s[d] = data.draw(st.integers(1, 3))
            xs.append(array(data, dtype, s))
        if name == "stack":
            d = data.draw(st.integers(-len(shp) - 1, len(shp)))
        return xs, [], lambda L, xs_, cs: getattr(L.mod, name)(list(xs_), d)
    return custom(draw)


for _n in ("cat", "concatenate", "stack"):
    OPS[("fn", _n)] = _joined(_n)


def _gather(where, name):
    def draw(data, dtype):
        shp = data.draw(shapes(min_dims=1))
        d = _axis(shp, data)
        ishape = tuple(data.draw(st.integers(1, n)) for n in shp)
        index = data.draw(hnp.arrays(np.int64, ishape, elements=st.integers(0, shp[d] - 1)))
        leaves = [array(data, dtype, shp)]
        if name == "scatter_add":
            leaves.append(array(data, dtype, ishape))
        return leaves, [index], lambda L, xs, cs: L.call(where, name, xs[0], d, cs[0], *xs[1:])
    return custom(draw)


OPS[("fn", "gather")], OPS[("method", "gather")] = _gather("fn", "gather"), _gather(
    "method", "gather")
OPS[("method", "scatter_add")] = _gather("method", "scatter_add")

# ---------------------------------------------------------------- conversions
OPS[("method", "to")] = custom(lambda data, dtype: (
    [array(data, dtype, data.draw(shapes()))], [],
    (lambda n: lambda L, xs, cs: xs[0].to(_dt(L, n)))(
        data.draw(st.sampled_from(["float64", "float16", "int32", "bool", "uint8"])))))
OPS[("method", "type")] = custom(lambda data, dtype: (
    [array(data, dtype, data.draw(shapes()))], [],
    (lambda n: lambda L, xs, cs: xs[0].type(_dt(L, n)))(
        data.draw(st.sampled_from(["float32", "int64", "bool"])))))
for _n in ("tolist", "item", "__float__", "__int__", "__bool__", "__len__"):
    OPS[("method", _n)] = custom(lambda data, dtype, n=_n: (
        [array(data, dtype, data.draw({"tolist": shapes(max_dims=2), "__len__": shapes(
            min_dims=1)}.get(n, shapes(max_dims=0))))], [],
        lambda L, xs, cs: getattr(xs[0], n)()))
OPS[("method", "__iter__")] = custom(lambda data, dtype: (
    [array(data, dtype, data.draw(shapes(min_dims=1)))], [],
    lambda L, xs, cs: list(iter(xs[0]))))
OPS[("method", "numpy")] = custom(lambda data, dtype: (
    [array(data, dtype, data.draw(shapes()))], [], lambda L, xs, cs: xs[0].detach().numpy()))

# ------------------------------------------------------------------- creation


def _creation(name):
    def draw(data, dtype):
        shp = tuple(data.draw(shapes(min_dims=1, max_dims=2)))  # no-size calls: LENIENT
        x = array(data, dtype, shp)
        fill = data.draw(st.sampled_from([7, 2.5, True]))
        typed = data.draw(st.booleans())

        def call(L, xs, cs):
            kw = {"dtype": _dt(L, dtype)} if typed else {}
            m = L.mod
            return {
                "zeros": lambda: m.zeros(*shp, **kw), "ones": lambda: m.ones(shp, **kw),
                "full": lambda: m.full(shp, fill, **kw), "eye": lambda: m.eye(3, **kw),
                "arange": lambda: m.arange(*{7: (5,), 2.5: (0.5, 3, 0.5),
                                             True: (1, 7, 2)}[fill], **kw),
                "linspace": lambda: m.linspace(0, 1, 5, **kw),
                "zeros_like": lambda: m.zeros_like(xs[0], **kw),
                "ones_like": lambda: m.ones_like(xs[0], **kw),
                "full_like": lambda: m.full_like(xs[0], fill, **kw),
                "tensor": lambda: m.tensor(x.tolist(), **kw),
                "as_tensor": lambda: m.as_tensor(x, **kw),
                "from_numpy": lambda: m.from_numpy(x.copy()),
                "empty": lambda: meta(m.empty(*shp, **kw)),
                "rand": lambda: meta(m.rand(*shp)), "randn": lambda: meta(m.randn(*shp)),
                "rand_like": lambda: meta(m.rand_like(xs[0], **kw)),
                "randn_like": lambda: meta(m.randn_like(xs[0], **kw)),
                "randint": lambda: meta(m.randint(0, 5, shp, **kw)),
            }[name]()
        return [x], [], call
    return custom(draw)


for _n in _words(
        "zeros ones full eye arange linspace zeros_like ones_like full_like tensor as_tensor "
        "from_numpy empty rand randn rand_like randn_like randint"):
    OPS[("fn", _n)] = _creation(_n)


def _new(name):
    def draw(data, dtype):
        x = array(data, dtype, data.draw(shapes()))
        size = tuple(data.draw(shapes(min_dims=1, max_dims=2)))
        args = {"new_zeros": size, "new_ones": size, "new_empty": size,
                "new_full": (size, 2.5), "new_tensor": ([1, 2],)}[name]
        if name == "new_empty":
            return [x], [], lambda L, xs, cs: meta(xs[0].new_empty(*args))
        return [x], [], lambda L, xs, cs: getattr(xs[0], name)(*args)
    return custom(draw)


for _n in ("new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"):
    OPS[("method", _n)] = _new(_n)

# ---------------------------------------------------------------- nn.functional
functional("relu sigmoid tanh softsign tanhshrink logsigmoid mish silu gelu softplus selu "
           "elu", unary, lo=-5.0, hi=5.0, kinks=(0,))
functional("hardtanh relu6 hardsigmoid hardswish", unary, lo=-7.0, hi=7.0,
           kinks=(-3, -1, 0, 1, 3, 6))
functional("leaky_relu", unary, kinks=(0,), opts=(((), {}), ((0.2,), {})))
OPS[("F", "elu")] = unary("F", "elu", lo=-5.0, hi=5.0, kinks=(0,),
                          opts=(((), {}), ((), {"alpha": 0.5})))
OPS[("F", "gelu")] = unary("F", "gelu", lo=-5.0, hi=5.0,
                           opts=(((), {}), ((), {"approximate": "tanh"})))
OPS[("F", "softplus")] = unary("F", "softplus", lo=-5.0, hi=5.0,
                               opts=(((), {}), ((), {"beta": 2.0, "threshold": 3.0})))
OPS[("F", "glu")] = unary("F", "glu", shape=st.sampled_from([(4,), (2, 4), (3, 2, 2)]))
OPS[("F", "dropout")] = unary("F", "dropout", opts=(((), {"p": 0.0}),
                                                    ((), {"p": 0.5, "training": False})))
OPS[("F", "dropout2d")] = unary("F", "dropout2d", shape=st.just((2, 3, 2, 2)),
                                opts=(((), {"p": 0.0}), ((), {"p": 0.5, "training": False})))
OPS[("F", "pixel_shuffle")] = unary("F", "pixel_shuffle", shape=st.just((1, 8, 2, 3)),
                                    opts=(((2,), {}),))
OPS[("F", "pixel_unshuffle")] = unary("F", "pixel_unshuffle", shape=st.just((1, 2, 4, 6)),
                                      opts=(((2,), {}),))
OPS[("F", "normalize")] = unary("F", "normalize", shape=st.sampled_from([(2, 3), (2, 3, 2)]),
                                opts=(((), {}), ((), {"p": 1.0, "dim": 0})))
OPS[("F", "pad")] = unary("F", "pad", shape=st.just((1, 2, 3, 3)), opts=(
    (((1, 1),), {}), (((1, 0, 0, 2),), {"value": 2.5}), (((1, 1, 2, 1),), {"mode": "reflect"}),
    (((1, 2),), {"mode": "replicate"}), (((1, 1, 1, 1),), {"mode": "circular"}),
    (((-1, 1),), {})))
OPS[("F", "avg_pool2d")] = unary("F", "avg_pool2d", shape=st.just((1, 2, 5, 4)), opts=(
    ((2,), {}), ((3,), {"stride": 1, "padding": 1}),
    ((3,), {"stride": 2, "padding": 1, "count_include_pad": False}),
    ((2,), {"ceil_mode": True})))
OPS[("F", "max_pool2d")] = unary("F", "max_pool2d", shape=st.just((1, 2, 5, 4)), unique=True,
                                 opts=(((2,), {}), ((3,), {"stride": 1, "padding": 1}),
                                       ((2,), {"ceil_mode": True})))
OPS[("F", "adaptive_avg_pool2d")] = unary("F", "adaptive_avg_pool2d",
                                          shape=st.just((1, 2, 5, 4)),
                                          opts=(((2,), {}), (((3, 2),), {})))
OPS[("F", "adaptive_max_pool2d")] = unary("F", "adaptive_max_pool2d",
                                          shape=st.just((1, 2, 5, 4)), unique=True,
                                          opts=(((2,), {}), (((3, 1),), {})))
OPS[("F", "local_response_norm")] = unary("F", "local_response_norm",
                                          shape=st.just((2, 5, 3, 2)), opts=(((3,), {}),))
OPS[("F", "interpolate")] = unary("F", "interpolate", shape=st.just((1, 2, 3, 4)), opts=(
    ((), {"scale_factor": 2}), ((), {"size": (5, 6)}),
    ((), {"size": (5, 7), "mode": "bilinear", "align_corners": False}),
    ((), {"scale_factor": 2, "mode": "bilinear", "align_corners": True})))
OPS[("F", "group_norm")] = unary("F", "group_norm", shape=st.just((2, 4, 3)),
                                 opts=(((2,), {}),))
OPS[("F", "layer_norm")] = unary("F", "layer_norm", shape=st.just((2, 3, 4)),
                                 opts=((((4,),), {}), (((3, 4),), {})))


def fcall(name, shapes_, consts=(), kw_opts=({},), lo=-3.0, hi=3.0, kinks=()):
    """``F.name(*leaves, *consts, **kw)``: leaves of fixed ``shapes_``; ``consts``
    is a list of ``(data, dtype) -> array`` (targets, labels, indices)."""
    def draw(data, dtype):
        leaves = [array(data, dtype, s, lo, hi, kinks) for s in shapes_]
        cs = [c(data, dtype) for c in consts]
        kw = data.draw(st.sampled_from(kw_opts))
        return leaves, cs, lambda L, xs, cs_: getattr(L.F, name)(*xs, *cs_, **kw)
    return custom(draw)


def labels(shape, n, dtype="int64"):
    return lambda data, _: data.draw(hnp.arrays(dtype, shape, elements=st.integers(0, n - 1)))


def same(shape, lo=-3.0, hi=3.0):
    return lambda data, dtype: array(data, dtype, shape, lo, hi)


def signs(shape):
    return lambda data, dtype: np.where(array(data, "bool", shape), 1, -1).astype(dtype)


RED = ({}, {"reduction": "sum"}, {"reduction": "none"})
OPS[("F", "mse_loss")] = fcall("mse_loss", [(3, 4)], [same((3, 4))], RED)
OPS[("F", "l1_loss")] = fcall("l1_loss", [(3, 4)], [same((3, 4))], RED)
OPS[("F", "huber_loss")] = fcall("huber_loss", [(3, 4)], [same((3, 4))],
                                 RED + ({"delta": 0.5},))
OPS[("F", "smooth_l1_loss")] = fcall("smooth_l1_loss", [(3, 4)], [same((3, 4))],
                                     RED + ({"beta": 0.5},))
OPS[("F", "binary_cross_entropy")] = fcall("binary_cross_entropy", [(3, 4)],
                                           [same((3, 4), 0.0, 1.0)], RED, lo=0.05, hi=0.95)
OPS[("F", "binary_cross_entropy_with_logits")] = fcall(
    "binary_cross_entropy_with_logits", [(3, 4)], [same((3, 4), 0.0, 1.0)], RED)
OPS[("F", "kl_div")] = fcall("kl_div", [(3, 4)], [same((3, 4), 0.05, 1.0)],
                             ({"reduction": "batchmean"}, {"reduction": "sum"},
                              {"reduction": "none"}))
OPS[("F", "cross_entropy")] = fcall("cross_entropy", [(3, 5)], [labels((3,), 5)],
                                    RED + ({"label_smoothing": 0.1},))
OPS[("F", "nll_loss")] = fcall("nll_loss", [(3, 5)], [labels((3,), 5)], RED)
OPS[("F", "margin_ranking_loss")] = fcall("margin_ranking_loss", [(4,), (4,)],
                                          [signs((4,))], RED + ({"margin": 0.5},))
OPS[("F", "cosine_embedding_loss")] = fcall("cosine_embedding_loss", [(3, 4), (3, 4)],
                                            [signs((3,))], RED + ({"margin": 0.2},))
OPS[("F", "triplet_margin_loss")] = fcall("triplet_margin_loss", [(3, 4)] * 3, [], RED)
OPS[("F", "cosine_similarity")] = fcall("cosine_similarity", [(3, 4), (3, 4)], [],
                                        ({}, {"dim": 0}))
OPS[("F", "pdist")] = fcall("pdist", [(4, 3)], [], ({}, {"p": 1.0}))
OPS[("F", "prelu")] = fcall("prelu", [(2, 3, 4), (3,)], [], kinks=(0,))
OPS[("F", "conv2d")] = fcall("conv2d", [(2, 2, 5, 5), (3, 2, 3, 3), (3,)], [],
                             ({}, {"stride": 2, "padding": 1}, {"dilation": 2}))
OPS[("F", "conv_transpose2d")] = fcall("conv_transpose2d", [(2, 2, 3, 3), (2, 3, 3, 3), (3,)],
                                       [], ({}, {"stride": 2, "padding": 1}))
OPS[("F", "batch_norm")] = fcall("batch_norm", [(4, 3, 2), (3,), (3,)],
                                 [same((3,)), same((3,), 0.5, 2.0)], ({},))
OPS[("F", "batch_norm")] = custom(lambda data, dtype: (
    [array(data, dtype, (4, 3, 2)), array(data, dtype, (3,)), array(data, dtype, (3,))],
    [array(data, dtype, (3,)), array(data, dtype, (3,), 0.5, 2.0)],
    (lambda training: lambda L, xs, cs: L.F.batch_norm(
        xs[0], cs[0], cs[1], xs[1], xs[2], training=training))(data.draw(st.booleans()))))
OPS[("F", "embedding")] = custom(lambda data, dtype: (
    [array(data, dtype, (5, 3))], [labels((2, 3), 5)(data, dtype)],
    lambda L, xs, cs: L.F.embedding(cs[0], xs[0])))
OPS[("F", "one_hot")] = custom(lambda data, dtype: (
    [array(data, dtype, (4,), 0, 3)], [],
    lambda L, xs, cs: L.F.one_hot(xs[0], 5)))

# -------------------------------------------------------------- not compared here
_PROTOCOL = "Python object protocol, not an op"
_STATE = "autograd/device state or a mode, covered by the tapegrad tests (test_tape.py, ...)"
SKIP = {
    **{("method", n): _PROTOCOL for n in _words(
        "__array__ __array_priority__ __class__ __delattr__ __dir__ __doc__ __format__ "
        "__getattribute__ __getstate__ __hash__ __init__ __init_subclass__ __module__ __new__ "
        "__reduce__ __reduce_ex__ __setattr__ __sizeof__ __subclasshook__ __weakref__ _base "
        "_version")},
    ("method", "__repr__"): "printing differs by design ('tensor(..., dtype=int32)' layout)",
    ("method", "__str__"): "printing differs by design",
    **{("method", n): _STATE for n in _words(
        "backward cpu cuda data device grad grad_fn is_cuda is_leaf requires_grad requires_grad_ "
        "retain_grad register_post_accumulate_grad_hook")},
    **{("method", n): "compared on every case's result" for n in ("dtype", "shape", "ndim")},
    **{("fn", n): _STATE for n in _words(
        "Tensor enable_grad get_default_dtype get_device get_num_threads inference_mode "
        "is_grad_enabled is_tensor manual_seed no_grad set_default_dtype set_grad_enabled "
        "set_num_threads")},
    **{k: "the environment surface: tests/device/test_torch_environment.py" for k in (
        ("fn", "device"), ("method", "is_cpu"), ("method", "is_mps"), ("method", "is_xpu"))},
    ("method", "__index__"): "a Python protocol: tests/test_torch_idioms.py",
    ("fn", "Generator"): "a random stream, not torch's: tests/test_torch_idioms.py",
    ("fn", "set_printoptions"): "printing: compared with torch's repr in tests/test_printing.py",
    ("fn", "memory_format"): "the memory-format names: tests/test_memory_formats.py",
    ("F", "scaled_dot_product_attention"): "against torch in tests/nn/test_transformer.py "
                                           "(masks, causal, gqa, gradients)",
    ("fn", "save"): "checkpoint files: formats differ by design (tests/test_serialization.py)",
    ("fn", "load"): "checkpoint files: formats differ by design (tests/test_serialization.py)",
}
ELSEWHERE = {("method", n) for n in _words(
        "__iadd__ __isub__ __imul__ __itruediv__ __setitem__ add_ sub_ mul_ div_ clamp_ copy_ "
        "fill_ zero_ abs_ sqrt_ exp_ log_ relu_ sigmoid_ tanh_ neg_ pow_ clamp_min_ "
        "clamp_max_ lerp_ masked_fill_ index_fill_")}

# ------------------------------------- PyTorch names added for ported scripts
add("flip", unary, opts=((([0],), {}),))
add("roll", unary, opts=(((1,), {}), ((1, 0), {}), ((-2, -1), {})))
add("argsort", unary, unique=True, opts=(((), {}), ((), {"descending": True})))
add("nonzero", unary, kinks=(0,))
add("median", unary, unique=True)
OPS[("fn", "diag")] = unary("fn", "diag", opts=(((), {}), ((1,), {}), ((-1,), {})))
OPS[("fn", "diag_embed")] = unary("fn", "diag_embed", opts=(((), {}), ((1,), {})))
method("clamp_min", unary, kinks=(0.5,), opts=(((0.5,), {}),))
method("clamp_max", unary, kinks=(0.5,), opts=(((0.5,), {}),))
_COVERED = "compared with torch in tests/test_torch_methods_vs_torch.py"
_RANDOM = "random samples (tapegrad's stream is not torch's): shapes and dtypes in " \
    "tests/test_torch_methods_vs_torch.py"
SKIP.update({
    **{(w, n): _COVERED for w in ("fn", "method") for n in _words(
        "addmm narrow index_select lerp")},
    **{("fn", n): _COVERED for n in _words("baddbmm")},
    **{("method", n): _COVERED for n in _words("mm bmm where allclose detach_ squeeze_ "
                                               "unsqueeze_")},
    **{("method", n): _RANDOM for n in _words("normal_ uniform_ bernoulli_ random_ "
                                              "exponential_")},
    **{("fn", n): _RANDOM for n in _words("randperm multinomial bernoulli normal")},
    **{("fn", n): "legacy constructors: " + _COVERED for n in _words(
        "FloatTensor DoubleTensor HalfTensor LongTensor IntTensor ShortTensor CharTensor "
        "ByteTensor BoolTensor")},
})

# ------------------------ names from the census of ported scripts (tensor_methods_more.py)
_HALVES = tuple(k + 0.5 for k in range(-4, 4))  # round jumps at the halves


def _either(where, name, numbers=(2, -1.5, True), lo2=-3.0, hi2=3.0, kinks2=(), opts=(),
            number_first=False, tensor_only=False):
    """``f(x, y, **kw)``: y a tensor (broadcast with x) or a number; in the "fn" form
    also ``f(number, x)`` where ``number_first``."""
    def draw(data, dtype):
        s1, s2 = data.draw(hnp.mutually_broadcastable_shapes(
            num_shapes=2, max_dims=3, max_side=4)).input_shapes
        x = array(data, dtype, s1)
        y = array(data, dtype, s2, lo2, hi2, kinks2)
        _, kw = _opts(data, opts)
        form = "tensor" if tensor_only else data.draw(st.sampled_from(
            ["tensor", "number"] + (["first"] if number_first and where == "fn" else [])))
        if form == "tensor":
            return [x, y], [], lambda L, xs, cs: L.call(where, name, xs[0], xs[1], **kw)
        s = data.draw(st.sampled_from(numbers))
        if form == "first":
            return [y], [], lambda L, xs, cs: L.call(where, name, s, xs[0], **kw)
        return [x], [], lambda L, xs, cs: L.call(where, name, xs[0], s, **kw)
    return custom(draw)


_ALPHAS = (((), {}), ((), {"alpha": 2}), ((), {"alpha": -1.5}), ((), {"alpha": True}))
_ROUNDING = (((), {}), ((), {"rounding_mode": "trunc"}), ((), {"rounding_mode": "floor"}))
add("add sub subtract", _either, opts=_ALPHAS, number_first=True)
add("mul multiply", _either, number_first=True)
add("div divide", _either, kinks2=(0,), numbers=(2, -1.5, 0.5), opts=_ROUNDING,
    number_first=True)
add("true_divide", _either, kinks2=(0,), numbers=(2, -1.5, 0.5), number_first=True)
add("floor_divide remainder fmod", _either, kinks2=(0,), numbers=(2, -1.5, 0.75),
    number_first=True)
add("logical_and logical_or logical_xor", _either, tensor_only=True)
# off the origin, where the gradient is 0 (both) but torch's second derivative is NaN
add("atan2", _either, tensor_only=True, kinks2=(0,))
add("neg negative square expm1 sinh cosh atan logical_not", unary)
add("reciprocal", unary, kinks=(0,))
add("rsqrt log2 log10", unary, lo=0.1, hi=4.0)
add("asin acos", unary, lo=-0.95, hi=0.95)


def _off_integers(where, name):
    """``f(x)`` for the functions that jump at the integers: floats 0.1 or more off them."""
    def draw(data, dtype):
        x = array(data, dtype, data.draw(shapes()))
        if x.dtype.kind == "f":
            x = (np.floor(x) + 0.1 + 0.8 * (x - np.floor(x))).astype(dtype)
        return [x], [], lambda L, xs, cs: L.call(where, name, xs[0])
    return custom(draw)


for _w in ("fn", "method"):
    for _n in ("floor", "ceil", "trunc", "frac"):
        OPS[(_w, _n)] = _off_integers(_w, _n)


def _round(where):
    """``round(x)``, ``decimals=0 / -1`` off the ties; ``decimals=1`` on values 0.03 off a
    multiple of 0.1 (ties in float16 would round as each library's arithmetic goes)."""
    def draw(data, dtype):
        decimals = data.draw(st.sampled_from([None, 0, -1, 1]))
        x = array(data, dtype, data.draw(shapes()), kinks=_HALVES)
        if decimals == 1 and x.dtype.kind == "f":
            x = (np.round(x.astype(np.float64), 1) + 0.03).astype(dtype)
        kw = {} if decimals is None else {"decimals": decimals}
        return [x], [], lambda L, xs, cs: L.call(where, "round", xs[0], **kw)
    return custom(draw)


OPS[("fn", "round")], OPS[("method", "round")] = _round("fn"), _round("method")
for _n in ("isfinite", "isinf", "isnan"):
    OPS[("method", _n)] = custom(lambda data, dtype, n=_n: (
        [_special(data, dtype)], [], lambda L, xs, cs: getattr(xs[0], n)()))


def _nan_to_num(where):
    def draw(data, dtype):
        _, kw = _opts(data, (((), {}), ((), {"nan": 1.5}), ((), {"posinf": 2.0, "neginf": -2.0})))
        return [_special(data, dtype)], [], lambda L, xs, cs: L.call(where, "nan_to_num", xs[0],
                                                                   **kw)
    return custom(draw)


OPS[("fn", "nan_to_num")], OPS[("method", "nan_to_num")] = _nan_to_num("fn"), _nan_to_num(
    "method")


def _masked_select(where):
    def draw(data, dtype):
        sx, sm = data.draw(hnp.mutually_broadcastable_shapes(
            num_shapes=2, max_dims=3, max_side=4)).input_shapes
        return [array(data, dtype, sx)], [array(data, "bool", sm)], (
            lambda L, xs, cs: L.call(where, "masked_select", xs[0], cs[0]))
    return custom(draw)


def _distinct_index(data, shp, d, ishape):
    """Indices along axis ``d`` of ``shp``, of shape ``ishape``, distinct along ``d``
    (so that no two writes meet: PyTorch leaves the winner open)."""
    keys = array(data, "float64", tuple(shp[k] if k == d else ishape[k]
                                        for k in range(len(shp))), unique=True)
    return np.argsort(keys, axis=d).take(range(ishape[d]), axis=d).astype(np.int64)


def _scatter(where):
    def draw(data, dtype):
        shp = data.draw(shapes(min_dims=1))
        d = _axis(shp, data)
        ishape = tuple(data.draw(st.integers(1, n)) for n in shp)
        reduce = data.draw(st.sampled_from([None, None, "add", "multiply"]))
        index = _distinct_index(data, shp, d, ishape) if reduce is None else data.draw(
            hnp.arrays(np.int64, ishape, elements=st.integers(0, shp[d] - 1)))
        kw = {} if reduce is None else {"reduce": reduce}
        x = array(data, dtype, shp)
        if data.draw(st.booleans()):
            # src of index's shape: with a larger src torch's backward fails (its gradient
            # has index's shape), though the forward reads only that part of src
            src = array(data, dtype, ishape)
            return [x, src], [index], lambda L, xs, cs: L.call(where, "scatter", xs[0], d, cs[0],
                                                               xs[1], **kw)
        v = data.draw(st.sampled_from([1.5, -2, True]))
        return [x], [index], lambda L, xs, cs: L.call(where, "scatter", xs[0], d, cs[0], v, **kw)
    return custom(draw)


def _index_write(where, name):
    def draw(data, dtype):
        shp = data.draw(shapes(min_dims=1))
        d = _axis(shp, data)
        k = data.draw(st.integers(0, 4 if name == "index_add" else shp[d]))
        if name == "index_add":
            index = data.draw(hnp.arrays(np.int64, (k,), elements=st.integers(0, shp[d] - 1)))
        else:
            index = np.array(data.draw(st.permutations(range(shp[d]))), np.int64)[:k]
        src = array(data, dtype, tuple(k if a == d % len(shp) else n for a, n in enumerate(shp)))
        kw = data.draw(st.sampled_from([{}, {"alpha": 2}])) if name == "index_add" else {}
        return [array(data, dtype, shp), src], [index], (
            lambda L, xs, cs: L.call(where, name, xs[0], d, cs[0], xs[1], **kw))
    return custom(draw)


def _with_zeros(data, dtype, shp, lo=-2.0, hi=2.0):
    x = array(data, dtype, shp, lo, hi)
    return np.where(array(data, "bool", shp), x, np.zeros((), x.dtype)).astype(x.dtype)


def _cumprod(where):
    def draw(data, dtype):
        shp = data.draw(shapes())
        d = data.draw(st.integers(-max(len(shp), 1), max(len(shp), 1) - 1))
        cast = data.draw(st.sampled_from([None, None, "float64"]))
        x = _with_zeros(data, dtype, shp)
        return [x], [], lambda L, xs, cs: L.call(where, "cumprod", xs[0], d, **(
            {} if cast is None else {"dtype": _dt(L, cast)}))
    return custom(draw)


def _count_nonzero(where):
    def draw(data, dtype):
        shp = data.draw(shapes())
        dims = [None, ()] + list(range(-max(len(shp), 1), max(len(shp), 1)))
        if len(shp) >= 2:
            dims.append((0, len(shp) - 1))
        dim = data.draw(st.sampled_from(dims))
        return [_with_zeros(data, dtype, shp)], [], lambda L, xs, cs: L.call(
            where, "count_nonzero", xs[0], dim)
    return custom(draw)


def _repeat_interleave(where):
    def draw(data, dtype):
        shp = data.draw(shapes())
        dim = data.draw(st.sampled_from([None] + list(range(-max(len(shp), 1),
                                                               max(len(shp), 1)))))
        n = int(np.prod(shp)) if dim is None or not shp else shp[dim]
        kind = data.draw(st.sampled_from(["int", "tensor", "one"]))
        reps = {"int": 2, "one": np.array([3]),
                "tensor": data.draw(hnp.arrays(np.int64, (n,), elements=st.integers(0, 2)))}[kind]
        consts = [reps] if kind != "int" else []
        return [array(data, dtype, shp)], consts, lambda L, xs, cs: L.call(
            where, "repeat_interleave", xs[0], cs[0] if cs else reps, dim)
    return custom(draw)


def _addc(where, name):
    def draw(data, dtype):
        shp = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3,
                                                          max_side=4)).input_shapes
        xs = [array(data, dtype, shp[0]), array(data, dtype, shp[1]),
              array(data, dtype, shp[2], 0.5, 2.0) if name == "addcdiv" else
              array(data, dtype, shp[2])]
        _, kw = _opts(data, (((), {}), ((), {"value": 0.5}), ((), {"value": -2})))
        return xs, [], lambda L, xs_, cs: L.call(where, name, xs_[0], xs_[1], xs_[2], **kw)
    return custom(draw)


def _products(where, name):
    forms = {"dot": [((3,), (3,)), ((3,), (2,))], "outer": [((3,), (2,))],
             "ger": [((3,), (2,)), ((1,), (4,))], "mv": [((2, 3), (3,)), ((2, 3), (2,))]}[name]

    def draw(data, dtype):
        s1, s2 = data.draw(st.sampled_from(forms))
        return [array(data, dtype, s1), array(data, dtype, s2)], [], (
            lambda L, xs, cs: L.call(where, name, xs[0], xs[1]))
    return custom(draw)


def _two_axes(shp, data):
    return data.draw(st.integers(-2, 2)), _axis(shp, data), _axis(shp, data)


def _select(shp, data):
    a = data.draw(st.integers(-len(shp), len(shp) - 1))
    return a, data.draw(st.integers(-shp[a], shp[a] - 1))


def _movedim(shp, data):
    if data.draw(st.booleans()) or len(shp) < 2:
        return _axis(shp, data), _axis(shp, data)
    return tuple(data.draw(st.permutations(range(len(shp)))))[:2], (-1, 0)


for _w in ("fn", "method"):
    OPS[(_w, "masked_select")] = _masked_select(_w)
    OPS[(_w, "scatter")] = _scatter(_w)
    OPS[(_w, "index_add")] = _index_write(_w, "index_add")
    OPS[(_w, "index_copy")] = _index_write(_w, "index_copy")
    OPS[(_w, "cumprod")] = _cumprod(_w)
    OPS[(_w, "count_nonzero")] = _count_nonzero(_w)
    OPS[(_w, "repeat_interleave")] = _repeat_interleave(_w)
    OPS[(_w, "addcmul")] = _addc(_w, "addcmul")
    OPS[(_w, "addcdiv")] = _addc(_w, "addcdiv")
    OPS[(_w, "ger")] = _products(_w, "ger")
    OPS[(_w, "mv")] = _products(_w, "mv")
    OPS[(_w, "unbind")] = shaped(_w, "unbind", lambda s, d: (_axis(s, d),))
    OPS[(_w, "select")] = shaped(_w, "select", _select, 1)
    OPS[(_w, "movedim")] = shaped(_w, "movedim", _movedim)
    OPS[(_w, "moveaxis")] = shaped(_w, "moveaxis", _movedim)
    OPS[(_w, "diagonal")] = shaped(_w, "diagonal", _two_axes, 2)
    OPS[(_w, "trace")] = shaped(_w, "trace", lambda s, d: (), 2)
    OPS[(_w, "tile")] = shaped(_w, "tile", lambda s, d: (tuple(
        d.draw(st.integers(1, 2)) for _ in range(d.draw(st.integers(0, len(s) + 1)))),))
OPS[("fn", "scatter_add")] = _gather("fn", "scatter_add")
OPS[("method", "dot")], OPS[("method", "outer")] = _products("method", "dot"), _products(
    "method", "outer")
OPS[("method", "mT")] = custom(lambda data, dtype: (
    [array(data, dtype, data.draw(shapes(min_dims=1, max_dims=3)))], [],
    lambda L, xs, cs: xs[0].mT))
OPS[("method", "stride")] = shaped("method", "stride", lambda s, d: (
    () if d.draw(st.booleans()) or not s else (_axis(s, d),)))
for _n in ("is_contiguous", "element_size", "nelement"):
    OPS[("method", _n)] = shaped("method", _n, lambda s, d: ())
SKIP[("method", "register_hook")] = (
    "refused by name (GraphError: tapegrad has no tensor gradient hooks): "
    "tests/test_tensor_methods_census.py")
ELSEWHERE |= {("method", n) for n in _words(
    "floor_ ceil_ trunc_ round_ addcmul_ addcdiv_ scatter_ scatter_add_ index_add_ "
    "index_copy_")}
SKIP.update({k: "sparse: tested in tests/test_sparse.py" for k in (
    ("fn", "sparse_coo_tensor"), ("fn", "spmm"), ("method", "is_sparse"),
    ("method", "to_sparse"))})

CASES = sorted(set(OPS) | set(OPS_TT))


def spec(key, variant):
    return (OPS_TT if variant == "tensor" else OPS)[key]


def variants(key):
    return [v for v, table in (("", OPS), ("tensor", OPS_TT)) if key in table]


