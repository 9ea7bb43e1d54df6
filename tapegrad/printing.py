"""How a Tensor prints: PyTorch's layout, so a script's printed numbers read alike.

One format for every element of a tensor, chosen from its finite nonzero values:
integers-valued floats as ``1.``; else 4 decimals (``1.5000``); scientific
(``1.0000e-05``) when the largest is over 1e8 or over 1000 times the smallest, or
the smallest under 1e-4. Elements are right-aligned to one width, wrapped at 80
columns; over 1000 elements only the first and last 3 of each axis are shown. The
dtype is named unless it is the default float, int64 or bool.
``set_printoptions`` changes these as ``torch.set_printoptions``.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import ArgumentError

__all__ = ["set_printoptions", "tensor_repr"]

_DEFAULTS = {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80,
             "sci_mode": None}
_opts = dict(_DEFAULTS)
_PROFILES = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80),
             "full": (4, math.inf, 3, 80)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):
    """As ``torch.set_printoptions``; ``sci_mode=None`` chooses per tensor."""
    if profile is not None:
        if profile not in _PROFILES:
            raise ArgumentError(f"set_printoptions: profile must be one of "
                                f"{sorted(_PROFILES)}, got {profile!r}")
        _opts.update(zip(("precision", "threshold", "edgeitems", "linewidth"),
                         _PROFILES[profile]))
    for key, value in (("precision", precision), ("threshold", threshold),
                       ("edgeitems", edgeitems), ("linewidth", linewidth)):
        if value is not None:
            _opts[key] = value
    _opts["sci_mode"] = sci_mode


class _Format:
    """One element format for the values of ``a`` (a host array)."""

    def __init__(self, a: np.ndarray):
        self.floating = a.dtype.kind == "f"
        self.int_mode, self.sci, self.width = True, False, 1
        p = _opts["precision"]
        if not self.floating:
            self.width = max([1] + [len(str(v)) for v in a.ravel().tolist()])
            return
        vals = a.ravel().astype(np.float64)
        vals = vals[np.isfinite(vals) & (vals != 0)]
        if vals.size == 0:
            return
        mags = np.abs(vals)
        small, big = float(mags.min()), float(mags.max())
        self.int_mode = bool((vals == np.ceil(vals)).all())
        sci = _opts["sci_mode"]
        self.sci = (big / small > 1000.0 or big > 1.0e8 or small < 1.0e-4) if sci is None \
            else bool(sci)
        if self.sci:
            texts = [f"{v:.{p}e}" for v in vals.tolist()]
        elif self.int_mode:
            texts = [f"{v:.0f}." for v in vals.tolist()]
        else:
            texts = [f"{v:.{p}f}" for v in vals.tolist()]
        self.width = max(len(t) for t in texts)

    def __call__(self, v) -> str:
        p = _opts["precision"]
        if not self.floating:
            text = str(v)
        elif self.sci:
            text = f"{v:.{p}e}"
        elif self.int_mode:
            text = f"{v:.0f}" + ("" if math.isinf(v) or math.isnan(v) else ".")
        else:
            text = f"{v:.{p}f}"
        return text.rjust(self.width)


def _edges(a: np.ndarray, n: int) -> np.ndarray:
    """The summarised values (first and last ``n`` along every axis)."""
    for axis in range(a.ndim):
        if a.shape[axis] > 2 * n:
            a = np.concatenate([np.take(a, range(n), axis),
                                np.take(a, range(a.shape[axis] - n, a.shape[axis]), axis)],
                               axis)
    return a


def _body(a: np.ndarray, fmt: _Format, indent: int, summarize: bool) -> str:
    n = _opts["edgeitems"]
    if a.ndim == 0:
        return fmt(a.item())
    cut = summarize and a.shape[0] > 2 * n
    if a.ndim == 1:
        items = a.tolist()
        texts = ([fmt(v) for v in items[:n]] + [" ..."] + [fmt(v) for v in items[-n:]]
                 if cut else [fmt(v) for v in items])
        per_line = max(1, math.floor((_opts["linewidth"] - indent) / (fmt.width + 2)))
        lines = [", ".join(texts[i:i + per_line]) for i in range(0, len(texts), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    rows = range(a.shape[0])
    parts = ([_body(a[i], fmt, indent + 1, summarize) for i in rows[:n]] + ["..."]
             + [_body(a[i], fmt, indent + 1, summarize) for i in rows[-n:]]) if cut else \
        [_body(a[i], fmt, indent + 1, summarize) for i in rows]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def tensor_repr(a: np.ndarray, default_dtype, suffixes: list[str]) -> str:
    """``tensor(...)`` of host array ``a`` with PyTorch's suffixes (device, grad_fn...)
    after the dtype's."""
    prefix = "tensor("
    indent = len(prefix)
    named = [] if a.dtype in (default_dtype, np.dtype(np.int64), np.dtype(bool)) \
        else [f"dtype={a.dtype}"]
    if a.size == 0:
        body = "[]"
        named = ([] if a.ndim == 1 else [f"size={tuple(a.shape)}"]) + (
            [] if a.dtype == default_dtype else [f"dtype={a.dtype}"])
    else:
        summarize = a.size > _opts["threshold"]
        body = _body(a, _Format(_edges(a, _opts["edgeitems"]) if summarize else a), indent,
                     summarize)
    out = prefix + body
    last = len(out) - out.rfind("\n") + 1
    for suffix in named + suffixes:  # wrapped as PyTorch's _add_suffixes
        if last + len(suffix) + 2 > _opts["linewidth"]:
            out += ",\n" + " " * indent + suffix
            last = indent + len(suffix)
        else:
            out += ", " + suffix
            last += len(suffix) + 2
    return out + ")"
