"""Anomaly mode: where a NaN/inf came from, and why (PyTorch's ``detect_anomaly``).

While on, every op notes the user's line that ran it (``node.site``) and,
when its output has non-finite values, an int8 code per position (1 NaN,
2 +inf, 3 -inf; ``node.nonfinite``) -- a mask, not the output. Forward only
notes such ops (masked code computes them on purpose) unless
``check_forward=True``. Backward raises at the first vjp whose gradient is not
finite. When the incoming gradient is 0 at every bad position, the NaN is the
masked-branch one (``where(mask, log(x), 0)`` at ``x == 0``: 0 * inf), and the
message names the op that zeroed the gradient: each vjp passes on, per input,
which op put the zeros in its gradient (itself, or its own zeros' author when
it only propagated them).
"""

from __future__ import annotations

import functools
import linecache
import math
import os
import weakref
from typing import NamedTuple

from ..device import get_array_module
from ..errors import AnomalyError, describe
from . import instrument
from .instrument import op_name, raw

__all__ = ["detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
           "is_anomaly_check_nan_enabled", "ForwardNote"]

_KINDS = {1: "NaN", 2: "inf", 3: "-inf"}
# how to keep the thrown-away branch finite, per op (default: ``op(where(mask, x, 1))``)
_FIX = {"div": "a / where(mask, b, 1)", "pow": "where(mask, x, 1) ** p",
        "getitem": "index a masked input"}


class ForwardNote(NamedTuple):
    """An op and line whose output had non-finite values in forward."""

    op: str
    site: tuple | None  # (filename, lineno, function)
    shape: tuple
    kinds: tuple  # of "NaN", "inf", "-inf"
    count: int  # times this op at this line produced them


class _Mode(instrument.Observer):
    def __init__(self, check_nan: bool, check_forward: bool):
        self.check_nan = check_nan
        self.check_forward = check_forward
        self.notes: dict = {}
        # entry -> {output k: the entry whose vjp put the zeros into that output's gradient}
        self.zeroed_by = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------ forward
    def on_forward(self, cls, args, outs, node, site, seconds, frame):
        if node is not None:
            node.site = site()
        codes = None
        for k, o in enumerate(outs):
            if not isinstance(o, instrument.tape.Tensor) or o.dtype.kind != "f":
                continue
            xp = o.device.xp
            fin = xp.isfinite(o.array)
            if bool(fin.all()):
                continue
            c = _codes(xp, o.array)
            if node is not None and o._node is node:
                codes = codes if codes is not None else [None] * len(outs)
                codes[k] = c
                node.nonfinite = codes
            self._note(cls, site(), o.array, c)
            if self.check_forward and _finite(args):
                raise AnomalyError(_forward_message(cls, site(), args, outs, k, c))

    def _note(self, cls, site, a, c):
        key = (cls.__name__, site)
        old = self.notes.get(key)
        if old is not None:
            self.notes[key] = old._replace(count=old.count + 1)
            return
        kinds = tuple(_KINDS[v] for v in (1, 2, 3) if bool((c == v).any()))
        self.notes[key] = ForwardNote(op_name(cls), site, tuple(a.shape), kinds, 1)

    # ----------------------------------------------------------- backward
    def on_backward(self, node, grads, in_grads, seconds):
        incoming = self.zeroed_by.pop(node, None)
        if not self.check_nan:
            return
        xp = node.device.xp
        for i, g in enumerate(in_grads):
            a = raw(g)
            if getattr(a, "dtype", None) is None or a.dtype.kind != "f":
                continue
            if not bool(xp.isfinite(a).all()):
                raise AnomalyError(_backward_message(node, grads, i, a, incoming))
        self._attribute(node, grads, in_grads, incoming)

    def _attribute(self, node, grads, in_grads, incoming):
        """Note, for each input entry, which op put zeros into its gradient."""
        for index, target, out_nr, _, _ in node.edges:
            if out_nr < 0 or index >= len(in_grads):
                continue  # a leaf runs no vjp, so there is nothing to explain
            a = raw(in_grads[index])
            if a is None or not hasattr(a, "shape"):
                continue
            zero = a == 0
            if not bool(zero.any()):
                continue
            author = node
            if incoming:  # did node only pass on zeros it was given?
                for k, g in enumerate(grads):
                    gk = raw(g)
                    if (incoming.get(k) is not None and getattr(gk, "shape", None) == a.shape
                            and not bool((zero & (gk != 0)).any())):
                        author = incoming[k]
                        break
            self.zeroed_by.setdefault(target, {}).setdefault(out_nr, author)


def _codes(xp, a):
    c = xp.zeros(a.shape, dtype=xp.int8)
    c[xp.isnan(a)] = 1
    c[a == math.inf] = 2
    c[a == -math.inf] = 3
    return c


def _finite(args) -> bool:
    """Were all of an op's float inputs finite?"""
    for a in args:
        if isinstance(a, float):
            if not math.isfinite(a):
                return False
            continue
        data = a.array if isinstance(a, instrument.tape.Tensor) else a
        dtype = getattr(data, "dtype", None)
        if (dtype is not None and dtype.kind == "f" and hasattr(data, "shape")
                and not bool(get_array_module(data).isfinite(data).all())):
            return False
    return True


def site_text(site) -> str:
    """``file.py:12 in f: `y = log(x)``` for messages (the line as written)."""
    if site is None:
        return "a line recorded outside anomaly mode"
    filename, lineno, func = site
    try:
        rel = os.path.relpath(filename)
        shown = rel if not rel.startswith("..") else filename
    except ValueError:  # another drive (Windows)
        shown = filename
    code = linecache.getline(filename, lineno).strip()
    return f"{shown}:{lineno} in {func}" + (f": `{code}`" if code else "")


def _forward_message(cls, site, args, outs, k, c) -> str:
    name = op_name(cls)
    n_bad = int((c != 0).sum())
    kinds = ", ".join(f"{_KINDS[v]} x{int((c == v).sum())}" for v in (1, 2, 3)
                      if bool((c == v).any()))
    ins = describe(*[a for a in args if hasattr(a, "shape")]) or "none"
    return (f"anomaly mode (check_forward=True): `{name}` produced non-finite values ({kinds}; "
            f"{n_bad} of {c.size} elements of output {k}) from finite inputs, at "
            f"{site_text(site)}. "
            f"Inputs: {ins}; outputs: {describe(*outs)}. If they are discarded on purpose "
            f"later (masked code such as where(mask, log(x), 0)), use detect_anomaly() without "
            f"check_forward=True, which only notes them; otherwise keep the input of `{name}` "
            "inside its domain (clamp it, add an epsilon).")


def _backward_message(node, grads, i, a, incoming) -> str:
    xp = node.device.xp
    name = op_name(node.fn)
    bad = ~xp.isfinite(a)
    what = "NaN" if bool(xp.isnan(a).any()) else "inf"
    head = (f"anomaly mode: the vjp of `{name}` (tape entry #{node.seq}, recorded at "
            f"{site_text(node.site)}) produced {what} in the gradient of its input {i} "
            f"({int(bad.sum())} of {a.size} elements; {describe(a)}).")
    arrays = [raw(g) for g in grads]
    finite_in = all(g is None or bool(xp.isfinite(g).all()) for g in arrays)
    if not finite_in:
        return (head + " Its incoming gradient was already non-finite: the gradient given to "
                "backward() was, or its consumers' finite gradients overflowed when summed.")
    # the output whose gradient lines up with this input's, position by position
    k = next((k for k, g in enumerate(arrays) if getattr(g, "shape", None) == a.shape), None)
    if k is not None:
        zero = arrays[k] == 0
        masked = bad & zero
        if bool(masked.any()) and not bool((bad & ~zero).any()):
            return _masked_message(node, name, k, masked, (incoming or {}).get(k))
        nonzero = int((bad & ~zero).sum())
        at = f" (and nonzero at {nonzero} of those positions)"
    else:
        at = ""
    return (head + f" Its incoming gradient was finite{at}, so the {what} arises in the vjp "
            f"itself: the derivative of `{name}` is not finite at its input there (log or sqrt "
            "of 0, a division by 0, ...). Keep the input inside the op's domain (clamp it, add "
            "an epsilon).")


def _origin(node, k, masked):
    """``(entry, output, positions)``: the op that first made the non-finite values at
    ``masked`` (output ``k`` of ``node``), found by walking to inputs whose outputs were
    non-finite at the same positions."""
    cur, out, mask = node, k, masked
    for _ in range(10_000):  # a chain of elementwise ops; never loops (the tape is a DAG)
        for _, target, out_nr, _, _ in cur.edges:
            codes = target.nonfinite[out_nr] if (
                out_nr >= 0 and target.nonfinite is not None) else None
            if codes is not None and codes.shape == mask.shape and bool((codes[mask] != 0).any()):
                cur, out, mask = target, out_nr, mask & (codes != 0)
                break
        else:
            break
    return cur, out, mask


def _masked_message(node, name, k, masked, author) -> str:
    origin, out, at = _origin(node, k, masked)
    codes = origin.nonfinite[out] if origin.nonfinite is not None else None
    kinds = []
    if codes is not None and codes.shape == at.shape:
        vals = codes[at]
        kinds = [_KINDS[v] for v in (3, 2, 1) if bool((vals == v).any())]
    n = int(at.sum())
    where_ = f"at {n} position{'s' * (n != 1)}"
    src = op_name(origin.fn)
    if kinds:
        cause = f"produced {'/'.join(kinds)} {where_}"
        how = f"0 * {kinds[0].lstrip('-')}"
    else:
        cause = f"has an infinite derivative {where_}"
        how = "0 * inf"
    head = (f"anomaly mode: the gradient is NaN because `{src}` (tape entry #{origin.seq}, "
            f"recorded at {site_text(origin.site)}) {cause}")
    if author is not None:
        who = op_name(author.fn)
        line = ("the same line" if author.site is not None and author.site == origin.site
                else site_text(author.site))
        by = (f" that `{who}` did not select (recorded at {line}): the vjp of `{who}` passes "
              "a zero gradient there")
    else:
        by = " where the gradient is zero (as given to backward())"
    if origin is node:
        turn = f", and {how} = NaN in the vjp of `{name}`"
    else:
        line = "the same line" if node.site == origin.site else site_text(node.site)
        turn = (f", and the vjp of `{name}` (tape entry #{node.seq}, recorded at {line}), which "
                f"`{src}`'s values reach, turns it into NaN ({how})")
    fix = _FIX.get(src, f"{src}(where(mask, x, 1))")
    return (f"{head}{by}{turn}. Mask the input of `{src}` as well (e.g. `{fix}`), so that "
            "the branch that is thrown away stays finite.")


# ---------------------------------------------------------------- switches
_mode: _Mode | None = None


def _set(mode):
    """Make ``mode`` (or None: off) the active anomaly mode; returns the previous one."""
    global _mode
    prev = _mode
    if prev is not None:
        instrument.remove(prev)
    _mode = mode
    if mode is not None:
        instrument.add(mode)
    return prev


def is_anomaly_enabled() -> bool:
    """Is anomaly mode on? ``tapegrad.autograd.is_anomaly_enabled()``"""
    return _mode is not None


def is_anomaly_check_nan_enabled() -> bool:
    """Does anomaly mode raise on non-finite gradients (PyTorch's ``check_nan``)?"""
    return _mode is not None and _mode.check_nan


class detect_anomaly:
    """Context manager (or decorator) turning anomaly mode on (PyTorch's name).

    >>> with tapegrad.autograd.detect_anomaly() as anomaly:
    ...     where(x > 0, log(x), 0).sum().backward()   # a NaN gradient raises, explained
    ... anomaly.forward_nonfinite                        # ops whose outputs were NaN/inf
    """

    def __init__(self, check_nan: bool = True, check_forward: bool = False):
        self.check_nan = bool(check_nan)
        self.check_forward = bool(check_forward)
        self._mode = None
        self._prev = []

    def __enter__(self):
        self._mode = _Mode(self.check_nan, self.check_forward)
        self._prev.append(_set(self._mode))
        return self

    def __exit__(self, *exc):
        _set(self._prev.pop())
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with detect_anomaly(self.check_nan, self.check_forward):
                return func(*args, **kwargs)
        return wrapper

    @property
    def forward_nonfinite(self) -> list[ForwardNote]:
        """The ops (with the line that ran them) whose outputs were NaN/inf in forward."""
        return [] if self._mode is None else list(self._mode.notes.values())


class set_detect_anomaly:
    """Turn anomaly mode on or off now; as a context manager, restore it on exit.

    >>> tapegrad.autograd.set_detect_anomaly(True)
    """

    def __init__(self, mode: bool, check_nan: bool = True, check_forward: bool = False):
        self._prev = _set(_Mode(bool(check_nan), bool(check_forward)) if mode else None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _set(self._prev)
        return False
