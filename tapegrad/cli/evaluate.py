"""``tapegrad eval``: test accuracy and confusion matrix of a checkpoint."""

from __future__ import annotations

import numpy as np

from .checkpoint import checkpoint_path, load_checkpoint
from .common import EVAL_BATCH, confusion_matrix, load_data, predict
from .models import build_model


def format_confusion(cm: np.ndarray) -> str:
    """Rows: true class; columns: predicted class."""
    n = cm.shape[0]
    width = max(4, len(str(int(cm.max()))) + 1)
    lines = ["true\\pred" + "".join(f"{j:>{width}d}" for j in range(n))]
    for i in range(n):
        lines.append(f"{i:>9d}" + "".join(f"{int(v):>{width}d}" for v in cm[i]))
    return "\n".join(lines)


def run(args) -> int:
    import tapegrad

    from ..data import DataLoader

    path = checkpoint_path(args.checkpoint)
    ckpt, config = load_checkpoint(path)
    device = tapegrad.get_device(args.device or config.get("device", "cpu"))
    data_dir = args.data_dir or config.get("data_dir")
    _, test = load_data(config["data"], data_dir, None, args.test_samples)
    model = build_model(config["model"], config["data"]).to(device)
    model.load_state_dict(ckpt["model"])
    loss, preds, labels = predict(model, DataLoader(test, args.batch_size or EVAL_BATCH,
                                                    device=device))
    acc = float((preds == labels).mean())
    cm = confusion_matrix(labels, preds)
    print(f"checkpoint {path}: {config['model']} on {config['data']}, "
          f"{ckpt['epoch']} epoch(s) trained")
    print(f"test accuracy {100 * acc:.2f}% ({int((preds == labels).sum())}/{len(labels)}), "
          f"test loss {loss:.4f}")
    print("confusion matrix (rows: true class, columns: predicted class):")
    print(format_confusion(cm))
    return 0
