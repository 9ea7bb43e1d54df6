"""Caffe's ``debug_info``, as data: one record per recorded op.

Caffe's ``debug_info: true`` logs the mean absolute value of each layer's
data and diffs, the tool for finding vanishing and exploding layers.
:class:`profile` keeps the same numbers per tape entry -- op, layer, user
line, output shape, mean |output|, mean |gradient of the output| (once
backward has run), bytes saved for the vjp, forward and backward time -- as
records to print (``str(prof)``), summarise per layer or op, or export as CSV.
"""

from __future__ import annotations

import csv
import math
import os
import weakref
from dataclasses import asdict, dataclass, fields

from ..errors import ArgumentError
from . import instrument
from .instrument import raw

__all__ = ["profile", "OpRecord", "SUMMARY_FIELDS"]


@dataclass
class OpRecord:
    """One recorded op: what forward made and what backward sent back to it."""

    index: int  # order of recording within the profile
    op: str
    layer: str  # innermost nn.Module that ran it ("0:Conv2d"), "" outside modules
    site: tuple | None  # (filename, lineno, function) of the user's line
    shape: tuple  # of its first differentiable output (the one the numbers describe)
    mean_abs_output: float
    saved_bytes: int  # arrays kept for the vjp
    forward_ms: float
    mean_abs_grad: float | None = None  # of that output's gradient; None until backward
    backward_ms: float = 0.0

    @property
    def line(self) -> str:
        return "" if self.site is None else f"{os.path.basename(self.site[0])}:{self.site[1]}"


SUMMARY_FIELDS = ("layer", "op", "calls", "shape", "mean_abs_output", "mean_abs_grad",
                  "saved_bytes", "forward_ms", "backward_ms")


class profile(instrument.Observer):
    """Record every op run inside the block (and the backward of those ops).

    >>> with tapegrad.autograd.profile(model=net) as prof:
    ...     loss_fn(net(x), y).backward()
    >>> print(prof)                              # one row per op
    >>> prof.summary(by="layer"); prof.to_csv("ops.csv")

    ``model`` names each op's layer by its attribute path (``"features.0:Conv2d"``);
    without it, by the layer's class.
    """

    def __init__(self, model=None):
        self.records: list[OpRecord] = []
        self._model = model
        self._names: dict = {}
        self._by_node = weakref.WeakKeyDictionary()
        self._call_code = None
        # checkpointed forwards' records, in order, and how far each recomputation is
        self._segments = weakref.WeakKeyDictionary()
        self._replayed = weakref.WeakKeyDictionary()

    def __enter__(self):
        from ..nn.module import Module
        from ..utils.checkpoint import _state

        self._call_code = Module.__call__.__code__
        self._checkpoint = _state  # which checkpointed forward or recomputation is running
        if self._model is not None:
            self._names = {id(m): name for name, m in self._model.named_modules()}
        instrument.add(self)
        return self

    def __exit__(self, *exc):
        instrument.remove(self)
        return False

    # ------------------------------------------------------------ observer
    def on_forward(self, cls, args, outs, node, site, seconds, frame):
        if node is None:
            return  # not on the tape (no_grad, integer results): nothing to report
        out = next(o for o in outs if isinstance(o, instrument.tape.Tensor) and o._node is node)
        ck = self._checkpoint
        rec = self._replayed_record(ck.replaying, cls)
        if rec is not None:  # a checkpoint recomputing in backward: the same op again
            rec.backward_ms += seconds * 1e3
            self._by_node[node] = (rec, out._out_nr)
        else:
            rec = self._new_record(cls, out, node, site, seconds, frame)
        seg = ck.segment
        while seg is not None:  # inside checkpointed forwards: note it for their replays
            self._segments.setdefault(seg, []).append(rec)
            seg = seg.parent

    def _replayed_record(self, replay, cls):
        """The record of the op that ``replay`` (a checkpoint's recomputation) re-runs
        now, or None (not recomputing, or the segment ran outside this profile)."""
        if replay is None:
            return None
        recs = self._segments.get(replay.segment)
        i = self._replayed.get(replay, 0)
        self._replayed[replay] = i + 1
        if recs is None or i >= len(recs) or recs[i].op != instrument.op_name(cls):
            return None
        return recs[i]

    def _new_record(self, cls, out, node, site, seconds, frame):
        data, xp = out.array, out.device.xp
        mean = float(xp.abs(data).mean()) if data.size else math.nan
        saved = sum(getattr(v, "nbytes", 0) for v in (node.saved or ()))
        rec = OpRecord(len(self.records), instrument.op_name(cls), self._layer(frame), site(),
                       tuple(data.shape), mean, int(saved), seconds * 1e3)
        self.records.append(rec)
        self._by_node[node] = (rec, out._out_nr)
        return rec

    def on_backward(self, node, grads, in_grads, seconds):
        hit = self._by_node.get(node)
        if hit is None:
            return  # recorded before the profile began
        rec, k = hit
        rec.backward_ms += seconds * 1e3
        g = raw(grads[k]) if k < len(grads) else None
        if g is not None and g.size:
            rec.mean_abs_grad = float(node.device.xp.abs(g).mean())

    def _layer(self, frame) -> str:
        """The innermost nn.Module whose ``__call__`` is on the stack."""
        f = frame
        while f is not None:
            if f.f_code is self._call_code:
                m = f.f_locals.get("self")
                kind = type(m).__name__
                name = self._names.get(id(m))
                return f"{name}:{kind}" if name else kind
            f = f.f_back
        return ""

    # ------------------------------------------------------------- reports
    def summary(self, by="layer") -> list[dict]:
        """Records grouped by ``"layer"``, ``"op"`` or ``("layer", "op")``: calls,
        mean of mean |output| and mean |gradient| over calls, saved bytes per call,
        total forward/backward ms. By layer, the values are those of the layer's
        output (its last op), as Caffe reports a layer's top blob."""
        keys = (by,) if isinstance(by, str) else tuple(by)
        for k in keys:
            if k not in ("layer", "op"):
                raise ArgumentError(f"profile.summary: by must be 'layer', 'op' or "
                                    f"('layer', 'op'), got {by!r}")
        groups: dict = {}
        for r in self.records:
            groups.setdefault(tuple(getattr(r, k) for k in keys), []).append(r)
        rows = []
        for recs in groups.values():
            shown = recs
            if keys == ("layer",):  # the layer's output: records of its last op
                last = max(recs, key=lambda r: r.index).op
                shown = [r for r in recs if r.op == last]
            grads = [r.mean_abs_grad for r in shown if r.mean_abs_grad is not None]
            rows.append({
                "layer": recs[0].layer if "layer" in keys else "",
                "op": shown[0].op,
                "calls": len(shown), "shape": shown[0].shape,
                "mean_abs_output": _mean([r.mean_abs_output for r in shown]),
                "mean_abs_grad": _mean(grads) if grads else None,
                "saved_bytes": sum(r.saved_bytes for r in recs) // max(len(shown), 1),
                "forward_ms": sum(r.forward_ms for r in recs),
                "backward_ms": sum(r.backward_ms for r in recs),
            })
        return rows

    def table(self, by=None) -> str:
        """The records (or ``summary(by)``) as an aligned text table."""
        if by is None:
            head = ("#", "op", "layer", "line", "output", "mean|out|", "mean|grad|", "saved",
                    "fwd ms", "bwd ms")
            body = [(str(r.index), r.op, r.layer, r.line, _shape(r.shape),
                     _num(r.mean_abs_output), _num(r.mean_abs_grad), _bytes(r.saved_bytes),
                     f"{r.forward_ms:.3f}", f"{r.backward_ms:.3f}") for r in self.records]
        else:
            head = ("layer", "op", "calls", "output", "mean|out|", "mean|grad|", "saved/call",
                    "fwd ms", "bwd ms")
            body = [(s["layer"], s["op"], str(s["calls"]), _shape(s["shape"]),
                     _num(s["mean_abs_output"]), _num(s["mean_abs_grad"]),
                     _bytes(s["saved_bytes"]), f"{s['forward_ms']:.3f}",
                     f"{s['backward_ms']:.3f}") for s in self.summary(by)]
        widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h)
                  for i, h in enumerate(head)]
        lines = ["  ".join(c.ljust(w) if i < 4 else c.rjust(w)
                           for i, (c, w) in enumerate(zip(row, widths)))
                 for row in (head, *body)]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def to_csv(self, path, by=None) -> None:
        """Write the records (or ``summary(by)``) to ``path`` as CSV."""
        if by is None:
            names = [f.name for f in fields(OpRecord) if f.name != "site"] + ["line"]
            rows = [{**{k: v for k, v in asdict(r).items() if k != "site"}, "line": r.line}
                    for r in self.records]
        else:
            names, rows = list(SUMMARY_FIELDS), self.summary(by)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=names)
            w.writeheader()
            for row in rows:
                w.writerow({k: csv_cell(row[k]) for k in names})


def _mean(values) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def csv_cell(v):
    """A record's value as a CSV cell: shapes as ``32x8x8``, None empty, floats to 6 digits."""
    if isinstance(v, tuple):
        return "x".join(map(str, v))
    if v is None:
        return ""
    return f"{v:.6g}" if isinstance(v, float) else v


def _num(v) -> str:
    return "-" if v is None else f"{v:.3e}"


def _shape(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1024 ** 2 else f"{n / 1024 ** 2:.1f} MiB"
