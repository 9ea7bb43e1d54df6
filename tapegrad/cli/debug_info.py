"""``tapegrad train --debug-info``: Caffe's ``debug_info``, per epoch, as files.

Each epoch's training steps run under :class:`tapegrad.autograd.profile`; its
summary per (layer, op) -- calls, mean |output|, mean |gradient|, saved bytes
per call, forward and backward milliseconds -- is appended to
``debug_info.csv`` (an ``epoch`` column first), and ``debug_info.png``, next
to ``curves.png``, plots each layer's mean |gradient| and mean |output| over
the epochs: where gradients vanish or explode, and from which epoch.
"""

from __future__ import annotations

import csv
import io
import os
import sys

from ..autograd.profile import SUMMARY_FIELDS, csv_cell, profile
from .common import pyplot
from .runfiles import write_atomic

__all__ = ["DebugInfo", "CSV_NAME", "PNG_NAME", "FIELDS"]

CSV_NAME = "debug_info.csv"
PNG_NAME = "debug_info.png"
FIELDS = ("epoch", *SUMMARY_FIELDS)


class DebugInfo:
    """The debug_info files of one run folder (``start``: epochs already done)."""

    def __init__(self, out: str, model, start: int = 0):
        self.csv_path = os.path.join(out, CSV_NAME)
        self.png_path = os.path.join(out, PNG_NAME)
        self.model = model
        self.rows = _read(self.csv_path, start)
        self._prof = None
        self._noted = False

    def watch(self) -> profile:
        """A profile of the model, to run one epoch's training in."""
        self._prof = profile(model=self.model)
        return self._prof

    def write(self, epoch: int) -> bool:
        """Add the watched epoch's rows; rewrite the CSV and the figure (False:
        no figure, matplotlib is missing)."""
        for s in self._prof.summary(("layer", "op")):
            self.rows.append({"epoch": epoch, **s})
        self._prof = None
        text = io.StringIO(newline="")
        w = csv.DictWriter(text, fieldnames=FIELDS)
        w.writeheader()
        for r in self.rows:
            w.writerow({k: csv_cell(r[k]) for k in FIELDS})
        write_atomic(self.csv_path, lambda fh: fh.write(text.getvalue().encode()))
        plotted = plot(self.png_path, self.rows)
        if not plotted and not self._noted:
            self._noted = True
            print(f"note: matplotlib is not installed, so no {PNG_NAME}; the numbers are in "
                  f"{self.csv_path}", file=sys.stderr)
        return plotted


def _read(path: str, upto: int) -> list[dict]:
    """Rows of an earlier run's CSV for epochs <= ``upto`` (on --resume)."""
    if upto <= 0 or not os.path.isfile(path):
        return []
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            try:
                epoch = int(r["epoch"])
                row = {k: r[k] for k in FIELDS}
                for k in ("mean_abs_output", "mean_abs_grad", "forward_ms", "backward_ms"):
                    row[k] = float(row[k]) if row[k] else None
                row["calls"], row["saved_bytes"] = int(row["calls"]), int(row["saved_bytes"])
            except (KeyError, TypeError, ValueError):
                continue  # a row an older or interrupted run left half-written
            if 1 <= epoch <= upto:
                row["epoch"] = epoch
                rows.append(row)
    return rows


def per_layer(rows: list[dict]) -> dict:
    """``{layer: {epoch: (mean |grad|, mean |output|)}}`` from each layer's last
    op per epoch (its output, as Caffe reports a layer's top blob)."""
    out: dict = {}
    for r in rows:  # rows keep recording order within an epoch: the last op wins
        scalar = not r["shape"]  # the loss: its gradient is backward's seed, 1
        out.setdefault(r["layer"] or "(outside layers)", {})[r["epoch"]] = (
            None if scalar else r["mean_abs_grad"], r["mean_abs_output"])
    return out


def plot(path: str, rows: list[dict]) -> bool:
    """Each layer's mean |gradient| and mean |output| per epoch into ``path``."""
    if not rows:
        return False
    plt = pyplot()
    if plt is None:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    colors = plt.get_cmap("tab20").colors  # distinct for up to 20 layers
    for i, (layer, by_epoch) in enumerate(per_layer(rows).items()):
        ep = sorted(by_epoch)
        style = {"color": colors[i % len(colors)], "marker": "os^v"[i // len(colors) % 4],
                 "label": layer}
        grads = [by_epoch[e][0] for e in ep]
        if any(g for g in grads):
            ax1.plot(ep, [g if g else float("nan") for g in grads], **style)
        ax2.plot(ep, [by_epoch[e][1] for e in ep], **style)
    ax1.set_ylabel("mean |gradient| of the layer's output")
    ax2.set_ylabel("mean |output|")
    for ax in (ax1, ax2):
        ax.set_xlabel("epoch")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    ax2.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    try:
        write_atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=100))
    finally:
        plt.close(fig)
    return True
