"""Pieces ``train`` and ``eval`` share: data, checkpoints, evaluation."""

from __future__ import annotations

import os

import numpy as np

from ..errors import ArgumentError, TapegradError

CHECKPOINT_NAME = "model.npz"
EVAL_BATCH = 500


class CheckpointError(TapegradError, ValueError):
    """A checkpoint is missing or not one ``tapegrad train`` wrote."""


def load_data(data: str, data_dir=None, train_samples=None, test_samples=None):
    """``(train, test)`` datasets, optionally cut to their first N samples."""
    from ..data import Subset, datasets

    if data == "digits":
        train, test = datasets.digits()
    elif data == "mnist":
        if not data_dir:
            raise ArgumentError("--data mnist needs --data-dir DIR: the folder holding the four "
                                f"MNIST IDX files (from {datasets.MNIST_URL} or a mirror)")
        train, test = datasets.mnist(data_dir)
    else:
        raise ArgumentError(f"unknown dataset {data!r}: choose digits or mnist")
    if train_samples is not None and train_samples < len(train):
        train = Subset(train, np.arange(train_samples))
    if test_samples is not None and test_samples < len(test):
        test = Subset(test, np.arange(test_samples))
    return train, test


def checkpoint_path(path) -> str:
    """A checkpoint file, or a run folder holding ``model.npz``."""
    path = os.fspath(path)
    return os.path.join(path, CHECKPOINT_NAME) if os.path.isdir(path) else path


def save_checkpoint(path, model, optimizer, epoch: int, config: dict) -> None:
    """Model and optimizer state, epochs done and the run's settings
    (``tapegrad.save`` writes atomically: a crash keeps the previous file)."""
    from ..serialization import save

    save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
          "epoch": int(epoch), "args": dict(config)}, path)


def load_checkpoint(path):
    """``(checkpoint dict, settings dict)``; CheckpointError if unusable."""
    from ..serialization import load

    path = checkpoint_path(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint at {path!r}: train first (tapegrad train --out "
                              "DIR writes DIR/model.npz) or pass the right path")
    ckpt = load(path)  # SerializationError (a TapegradError) for damaged/foreign files
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{path!r} is not a tapegrad train checkpoint")
    for key in ("model", "optimizer", "epoch", "args"):
        if key not in ckpt:
            raise CheckpointError(f"{path!r} is not a tapegrad train checkpoint (no {key!r} "
                                  "entry)")
    config = ckpt["args"]
    if not isinstance(config, dict) or "model" not in config or "data" not in config:
        raise CheckpointError(f"{path!r}: its 'args' entry lacks the model and data settings")
    return ckpt, config


def predict(model, loader):
    """``(mean loss, predictions, labels)`` over ``loader`` in eval mode, no tape."""
    from .. import nn, no_grad

    was_training = model.training
    model.eval()
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    total, preds, labels = 0.0, [], []
    with no_grad():
        for x, y in loader:
            logits = model(x)
            total += float(loss_fn(logits, y).item())
            preds.append(logits.argmax(axis=1).numpy())
            labels.append(y.numpy())
    model.train(was_training)
    preds, labels = np.concatenate(preds), np.concatenate(labels)
    return total / max(len(labels), 1), preds, labels


def confusion_matrix(labels, preds, n_classes: int = 10) -> np.ndarray:
    """Counts, rows = true class, columns = predicted class."""
    return np.bincount(labels * n_classes + preds,
                       minlength=n_classes * n_classes).reshape(n_classes, n_classes)
