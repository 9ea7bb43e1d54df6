"""The checkpoint ``tapegrad train`` writes, and its schema.

``model.npz`` holds ``{"model": state dict, "optimizer": state dict,
"epoch": epochs completed, "args": settings, "history": one metrics row per
completed epoch}`` -- always the state at the *end* of epoch ``epoch``
(never mid-epoch state). Everything read back is checked against the schema
before use: a bad entry is a :class:`CheckpointError` naming the file and
the field.
"""

from __future__ import annotations

import math
import os
import zipfile

import numpy as np

from ..errors import ArgumentError, TapegradError
from .runfiles import _cannot
from .settings import check_settings

CHECKPOINT_NAME = "model.npz"
METRIC_FIELDS = ("epoch", "train_loss", "test_loss", "test_acc", "images_per_s", "seconds")


class CheckpointError(TapegradError, ValueError):
    """A checkpoint is missing, not one ``tapegrad train`` wrote, or damaged."""


def checkpoint_path(path) -> str:
    """A checkpoint file, or a run folder holding ``model.npz``."""
    path = os.fspath(path)
    return os.path.join(path, CHECKPOINT_NAME) if os.path.isdir(path) else path


def save_checkpoint(path, model, optimizer, epoch: int, config: dict, history) -> None:
    """Model and optimizer state at the end of epoch ``epoch``, the run's
    settings and metrics (``tapegrad.save``: atomic and durable)."""
    from ..serialization import save

    try:
        save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
              "epoch": int(epoch), "args": dict(config), "history": list(history)}, path)
    except OSError as exc:
        raise _cannot("write", path, exc) from exc


def _array(v):
    return v.array if hasattr(v, "requires_grad") else v  # a Tensor's array


def _check_model(state, where):
    if not isinstance(state, dict) or not state:
        raise ArgumentError(f"{where}: expected a non-empty state dict")
    for k, v in state.items():
        a = _array(v)
        if not isinstance(k, str) or not hasattr(a, "dtype"):
            raise ArgumentError(f"{where}[{k!r}]: expected an array, got {type(v).__name__}")
        if a.dtype.kind == "f" and not bool(np.isfinite(a).all()):
            raise ArgumentError(f"{where}[{k!r}]: holds non-finite values (NaN or inf); "
                             "the run diverged before this was saved")


def _check_history(history, epoch, where):
    if not isinstance(history, list) or len(history) != epoch:
        raise ArgumentError(f"{where}: expected a list of {epoch} per-epoch rows")
    for i, row in enumerate(history):
        if not isinstance(row, dict) or row.get("epoch") != i + 1:
            raise ArgumentError(f"{where}[{i}]: expected the row of epoch {i + 1}")
        for k in METRIC_FIELDS[1:]:
            v = row.get(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ArgumentError(f"{where}[{i}].{k}: expected a finite number, got {v!r}")


def validate(ckpt, path: str) -> dict:
    """The settings of checkpoint ``ckpt`` read from ``path``, after checking
    every entry the CLI uses; CheckpointError naming the field otherwise."""
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{path!r} is not a tapegrad train checkpoint (it holds a "
                              f"{type(ckpt).__name__}, not a dict)")
    for key in ("model", "optimizer", "epoch", "args"):
        if key not in ckpt:
            raise CheckpointError(f"{path!r} is not a tapegrad train checkpoint (no {key!r} "
                                  "entry)")
    try:
        epoch = ckpt["epoch"]
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ArgumentError(f"epoch: expected an integer >= 0, got {epoch!r}")
        config = check_settings(ckpt["args"], "args")
        _check_model(ckpt["model"], "model")
        opt = ckpt["optimizer"]
        if not isinstance(opt, dict) or not isinstance(opt.get("state"), dict) \
                or not isinstance(opt.get("param_groups"), list):
            raise ArgumentError("optimizer: expected a dict with 'state' and 'param_groups'")
        if "history" in ckpt:
            _check_history(ckpt["history"], epoch, "history")
    except ValueError as exc:
        raise CheckpointError(f"{path!r}: bad checkpoint entry {exc}; it was not written by "
                              "this tapegrad train, or was edited") from None
    return config


def load_checkpoint(path):
    """``(checkpoint dict, settings dict)`` after :func:`validate`; CheckpointError if unusable."""
    from ..serialization import load

    path = checkpoint_path(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at {path!r}: train first (tapegrad train --out "
                              "DIR writes DIR/model.npz) or pass the right path")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{path!r} is not a tapegrad train checkpoint: not an .npz "
                              "archive (pass the model.npz that tapegrad train wrote)")
    ckpt = load(path)  # SerializationError (a TapegradError) for damaged/foreign files
    return ckpt, validate(ckpt, path)


def restore_optimizer_state(optimizer, state: dict, path: str) -> None:
    """Load the saved optimizer state into ``optimizer`` (a fresh optimizer of
    the checkpoint's kind). The optimizer validates it (groups, buffer shapes
    and dtypes, steps) and changes nothing when it is invalid; non-finite
    buffers are refused here, as non-finite weights are."""
    for idx, buffers in state["state"].items():
        for k, v in (buffers.items() if isinstance(buffers, dict) else ()):
            a = _array(v)
            if hasattr(a, "dtype") and a.dtype.kind == "f" and not bool(np.isfinite(a).all()):
                raise CheckpointError(f"{path!r}: bad checkpoint entry optimizer.state[{idx!r}]"
                                      f"[{k!r}]: holds non-finite values")
    try:
        optimizer.load_state_dict(state)
    except TapegradError as exc:
        detail = " ".join(str(exc).split())
        raise CheckpointError(f"{path!r}: bad checkpoint entry optimizer: {detail}") from None
