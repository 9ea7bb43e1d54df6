"""Pieces the commands share: data, evaluation, progress bars, CSV files
(checkpoints: checkpoint.py)."""

from __future__ import annotations

import csv
import io
import os
import sys

import numpy as np

from ..errors import ArgumentError

EVAL_BATCH = 500


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
            preds.append(logits.argmax(axis=1).cpu().numpy())
            labels.append(y.cpu().numpy())
    model.train(was_training)
    preds, labels = np.concatenate(preds), np.concatenate(labels)
    return total / max(len(labels), 1), preds, labels


def confusion_matrix(labels, preds, n_classes: int = 10) -> np.ndarray:
    """Counts, rows = true class, columns = predicted class."""
    return np.bincount(labels * n_classes + preds,
                       minlength=n_classes * n_classes).reshape(n_classes, n_classes)


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend, or None without matplotlib
    (the figures are optional: the run still writes its CSVs)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def progress_bar(total: int, desc: str, quiet: bool, unit: str = "batch"):
    """A tqdm bar on stderr when it is a terminal (and tqdm is installed), else None."""
    if quiet or not (sys.stderr.isatty() or os.environ.get("TAPEGRAD_PROGRESS") == "1"):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit=unit, leave=False, file=sys.stderr,
                dynamic_ncols=True)


def write_csv(path: str, fields: list[str], rows: list[dict]) -> None:
    """``rows`` under the header ``fields`` into ``path``, atomically; floats with 6
    significant digits, absent values as empty cells."""
    from .runfiles import write_atomic

    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    for row in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    write_atomic(path, lambda fh: fh.write(text.getvalue().encode()))
