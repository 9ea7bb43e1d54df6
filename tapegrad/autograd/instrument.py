"""The switchable instrumentation behind anomaly mode and :class:`profile`.

Nothing here runs unless an observer is active. Adding the first one swaps
``Function.apply`` / ``Function._apply_unary`` for observed wrappers and sets
``engine._observe``, which each backward calls once with the entries it will
replay; removing the last one puts the originals back. So the hot path
(``_apply_unary``, ``_record``, the engine loop) is the uninstrumented code
whenever anomaly mode and profiling are off, not code with a flag in it.

In backward, each replayed entry's ``fn`` becomes a cached subclass of its op
whose ``backward`` times the vjp and shows its gradients to the observers.
The subclass keeps the op's name, and when no observer is active it only
calls through, so a tape recorded under a profile stays correct after it.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from .. import engine, tape
from ..tape import Function

__all__ = ["Observer", "add", "remove", "active", "user_site", "raw", "op_name"]

_ORIG_APPLY = Function.__dict__["apply"]  # the classmethod objects, restored as they were
_ORIG_UNARY = Function.__dict__["_apply_unary"]
_apply = _ORIG_APPLY.__func__
_unary = _ORIG_UNARY.__func__

_observers: list = []  # active observers, in the order they were added
_lock = threading.Lock()
_observed_fns: dict = {}  # op class -> its observed subclass

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_CLI = _PKG + "cli" + os.sep  # the command line is tapegrad's *user*: its lines count


class Observer:
    """What anomaly mode and profile implement; called only while added."""

    def on_forward(self, cls, args, outs, node, site, seconds, frame) -> None:
        """An op ran (in ``seconds``): ``outs`` is a tuple of its outputs, ``node``
        its tape entry (None if unrecorded), ``site()`` the user's line (computed
        on demand), ``frame`` the frame that called ``apply``."""

    def on_backward(self, node, grads, in_grads, seconds) -> None:
        """``node``'s vjp mapped ``grads`` (one per output) to ``in_grads``."""


def active() -> bool:
    return bool(_observers)


def add(obs: Observer) -> None:
    with _lock:
        _observers.append(obs)
        if len(_observers) == 1:
            Function.apply = classmethod(_observed_apply)
            Function._apply_unary = classmethod(_observed_unary)
            engine._observe = _observe_backward


def remove(obs: Observer) -> None:
    with _lock:
        if obs in _observers:
            _observers.remove(obs)
        if not _observers:
            Function.apply = _ORIG_APPLY
            Function._apply_unary = _ORIG_UNARY
            engine._observe = None


def user_site(frame=None):
    """``(filename, lineno, function)`` of the innermost frame outside tapegrad
    (tapegrad.cli counts as user code); a cheap walk, no traceback string."""
    f = sys._getframe(1) if frame is None else frame
    while f is not None:
        name = f.f_code.co_filename
        if not name.startswith(_PKG) or name.startswith(_CLI):
            return (name, f.f_lineno, f.f_code.co_name)
        f = f.f_back
    return None


def op_name(cls) -> str:
    """``log`` for tapegrad's Log (its function's name), a user Function's class name;
    a private variant is named by its public base (_BasicGetItem: ``getitem``)."""
    if not cls.__module__.startswith("tapegrad."):
        return cls.__name__
    public = next((c for c in cls.__mro__ if issubclass(c, Function) and c is not Function
                   and not c.__name__.startswith("_")), cls)
    return public.__name__.lstrip("_").lower()


def raw(g):
    """The array behind a gradient (a Tensor under create_graph)."""
    return g.array if isinstance(g, tape.Tensor) else g


def _notify(cls, args, out, frame, seconds):
    outs = out if type(out) is tuple else (out,)
    # the op's tape entry: that of its first differentiable output (integer ones have none)
    node = next((o._node for o in outs if isinstance(o, tape.Tensor) and o._node is not None),
                None)
    site_cache = []

    def site():
        if not site_cache:
            site_cache.append(user_site(frame))
        return site_cache[0]

    for obs in list(_observers):
        obs.on_forward(cls, args, outs, node, site, seconds, frame)


def _observed_unary(cls, x, consts, params):
    t0 = time.perf_counter()
    out = _unary(cls, x, consts, params)
    seconds = time.perf_counter() - t0
    _notify(cls, (x, *consts), out, sys._getframe(1), seconds)
    return out


def _observed_apply(cls, *args, **params):
    x = args[0] if args else None
    if isinstance(x, tape.Tensor) and (
            len(args) == 1 or (len(args) == 2 and not isinstance(args[1], tape.Tensor))):
        return _apply(cls, *args, **params)  # apply hands these to _apply_unary: observed there
    t0 = time.perf_counter()
    out = _apply(cls, *args, **params)
    seconds = time.perf_counter() - t0
    _notify(cls, args, out, sys._getframe(1), seconds)
    return out


def _observe_backward(order) -> None:
    for node in order:
        fn = node.fn
        if not fn.__dict__.get("_tg_observed", False):
            node.fn = _observed_fn(fn)


def _observed_fn(cls):
    sub = _observed_fns.get(cls)
    if sub is not None:
        return sub
    vjp = cls.backward

    def backward(ctx, *grads):
        if not _observers:
            return vjp(ctx, *grads)
        t0 = time.perf_counter()
        in_grads = vjp(ctx, *grads)
        seconds = time.perf_counter() - t0
        tup = in_grads if type(in_grads) is tuple else (in_grads,)
        for obs in list(_observers):
            obs.on_backward(ctx, grads, tup, seconds)
        return in_grads

    sub = type(cls.__name__, (cls,), {
        "backward": staticmethod(backward), "_tg_observed": True,
        "__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__,
    })
    _observed_fns[cls] = sub
    return sub
