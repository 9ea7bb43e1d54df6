"""One declaration per elementwise op of one tensor (JAX's ``standard_unop``).

A unary op declares its math and its policy; :class:`Unary` writes the rest once
(the forward that saves, the backward that unpacks, float16 in float32, the
int/bool rule, the public function)::

    class Exp(Unary):
        \"\"\"``e ** x``; the vjp reuses the output. >>> ops.exp(x)\"\"\"
        saves = OUTPUT          # what df reads: INPUT, OUTPUT, BOTH or NOTHING (the least)
        int_inputs = FLOAT      # an int or bool input becomes (tapegrad.dtypes.INT_RULES)
        half_in_float32 = False # True: float16 is computed in float32 and rounded back

        def f(xp, x):           # raw arrays, ``xp`` the array module
            return xp.exp(x)

        def df(ctx, g, x, out): # the vjp: x or out is None when not saved;
            return g * out      # ctx.xp is the array module (Tensors under create_graph)

    exp = Exp.public("exp")

``f`` and ``df`` are plain functions in the class body (no ``self``); ``df`` may
take a device-specific path (a fused CUDA kernel) when ``ctx.xp.name`` says so
and ``ctx._graph`` is off. Ops with parameters (``leaky_relu``'s slope,
``hardtanh``'s bounds) or a forward of their own (``relu``'s streamed CPU pass) are
plain :class:`~tapegrad.tape.Function` subclasses.
"""

from __future__ import annotations

from ..dtypes import FLOAT, downcast, int_input, upcast
from ..errors import ArgumentError
from ..tape import Function

__all__ = ["Unary", "INPUT", "OUTPUT", "BOTH", "NOTHING", "declared"]

INPUT, OUTPUT, BOTH, NOTHING = "input", "output", "both", "nothing"


class Unary(Function):
    differentiable_twice = True  # df uses operators and ctx.xp only
    int_inputs = FLOAT
    saves = INPUT
    half_in_float32 = False

    @staticmethod
    def f(xp, x):
        raise NotImplementedError

    @staticmethod
    def df(ctx, g, x, out):
        raise NotImplementedError

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own = cls.__dict__
        if not any(k in own for k in ("f", "df", "saves", "half_in_float32")):
            return  # a subclass that changes nothing declared (anomaly mode's observers)
        f, df = own.get("f", cls.f), own.get("df", cls.df)
        f = f.__func__ if isinstance(f, staticmethod) else f
        df = df.__func__ if isinstance(df, staticmethod) else df
        cls.f, cls.df = staticmethod(f), staticmethod(df)
        forward, backward = _rules(cls.__name__, f, df, cls.saves, cls.half_in_float32)
        if "forward" not in own:
            cls.forward = staticmethod(forward)
        if "backward" not in own:
            cls.backward = staticmethod(backward)

    @classmethod
    def public(cls, name):
        """The op's function, ``name(x)`` (PyTorch's ``input=`` too): the int/bool rule,
        then :meth:`apply`. Its docstring is the class's."""
        apply = cls.apply

        def op(x=None, *, input=None):
            if input is not None:
                if x is not None:
                    raise ArgumentError(f"{name}: pass the tensor or input=, not both")
                x = input
            return apply(int_input(cls, x))

        op.__name__ = op.__qualname__ = name
        op.__module__ = cls.__module__
        op.__doc__ = cls.__doc__
        op.op_class = cls
        cls.op_name = name  # what errors call it
        return op


def declared() -> dict:
    """{public name: class} of every op tapegrad.ops declares with :class:`Unary`."""
    found, todo = {}, list(Unary.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        name = cls.__dict__.get("op_name")
        if name is not None and cls.__module__.startswith("tapegrad.ops."):
            found[name] = cls
    return dict(sorted(found.items()))


def _rules(name, f, df, saves, half):
    """The forward and backward of a declaration, written out per case: a unary op's
    overhead is a few microseconds, and branching on the declaration in every call
    would cost several percent of it."""
    if half and saves == INPUT:  # float16 in float32: upcast in, downcast out
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return downcast(f(ctx.xp, upcast(x)), x.dtype)

        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return df(ctx, g, upcast(x), None)
    elif half and saves == OUTPUT:
        def forward(ctx, x):
            out = downcast(f(ctx.xp, upcast(x)), x.dtype)
            ctx.save_for_backward(out)
            return out

        def backward(ctx, g):
            (out,) = ctx.saved_tensors
            return df(ctx, g, None, upcast(out))
    elif half and saves == BOTH:
        def forward(ctx, x):
            out = downcast(f(ctx.xp, upcast(x)), x.dtype)
            ctx.save_for_backward(x, out)
            return out

        def backward(ctx, g):
            x, out = ctx.saved_tensors
            return df(ctx, g, upcast(x), upcast(out))
    elif half and saves == NOTHING:
        def forward(ctx, x):
            return downcast(f(ctx.xp, upcast(x)), x.dtype)

        def backward(ctx, g):
            return df(ctx, g, None, None)
    elif saves == INPUT:
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return f(ctx.xp, x)

        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return df(ctx, g, x, None)
    elif saves == OUTPUT:
        def forward(ctx, x):
            out = f(ctx.xp, x)
            ctx.save_for_backward(out)
            return out

        def backward(ctx, g):
            (out,) = ctx.saved_tensors
            return df(ctx, g, None, out)
    elif saves == BOTH:
        def forward(ctx, x):
            out = f(ctx.xp, x)
            ctx.save_for_backward(x, out)
            return out

        def backward(ctx, g):
            x, out = ctx.saved_tensors
            return df(ctx, g, x, out)
    elif saves == NOTHING:
        def forward(ctx, x):
            return f(ctx.xp, x)

        def backward(ctx, g):
            return df(ctx, g, None, None)
    else:
        raise ArgumentError(f"{name}.saves must be INPUT, OUTPUT, BOTH or NOTHING, got "
                            f"{saves!r}")
    forward.__qualname__, backward.__qualname__ = f"{name}.forward", f"{name}.backward"
    return forward, backward
