"""``tapegrad train``: train a model on digits or MNIST, with checkpoints.

Writes into ``--out DIR``: ``model.npz`` (model + optimizer state, epochs
done, settings; after every epoch), ``metrics.csv`` (one row per epoch) and,
when matplotlib is installed, ``curves.png``. ``--resume`` continues from
``DIR/model.npz``; Ctrl-C saves a checkpoint before exiting.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import sys
import time

from ..errors import ArgumentError
from .common import (
    CHECKPOINT_NAME,
    EVAL_BATCH,
    load_checkpoint,
    load_data,
    predict,
    save_checkpoint,
)
from .models import build_model, count_parameters

# Defaults, tuned for the bundled digits: >= 97% test accuracy well within a
# minute on a 2-core CPU (see the --help epilog).
DEFAULTS = {
    "model": "lenet", "data": "digits", "data_dir": None, "epochs": 20, "batch_size": 32,
    "lr": None, "optimizer": "adam", "momentum": 0.9, "weight_decay": 0.0, "device": "cpu",
    "seed": 0, "out": os.path.join("runs", "latest"), "train_samples": None,
    "test_samples": None, "schedule": "cosine", "threads": 1,
}
DEFAULT_LR = {"adam": 3e-3, "sgd": 0.05}
# settings a resumed run takes from its checkpoint unless given again
ARCH_KEYS = ("model", "data")
METRIC_FIELDS = ("epoch", "train_loss", "test_loss", "test_acc", "images_per_s", "seconds")


def resolve(args) -> tuple[dict, object]:
    """Settings from the command line, the checkpoint (on --resume) and DEFAULTS,
    in that order of precedence; returns ``(config, checkpoint or None)``."""
    given = {k: getattr(args, k) for k in DEFAULTS if getattr(args, k, None) is not None}
    out = given.get("out", DEFAULTS["out"])
    ckpt = None
    config = dict(DEFAULTS)
    if args.resume:
        ckpt, saved = load_checkpoint(os.path.join(out, CHECKPOINT_NAME))
        for k in ARCH_KEYS:
            if k in given and given[k] != saved.get(k):
                raise ArgumentError(
                    f"--resume: the checkpoint in {out} trained --{k} {saved.get(k)}, not "
                    f"{given[k]}; drop --{k} or use another --out")
        config.update({k: v for k, v in saved.items() if k in DEFAULTS})
    config.update(given)
    config["out"] = out
    if config["lr"] is None:
        config["lr"] = DEFAULT_LR[config["optimizer"]]
    if config["data"] == "mnist" and not config["data_dir"]:
        raise ArgumentError("--data mnist needs --data-dir DIR: the folder holding the MNIST "
                            "IDX files (train-images-idx3-ubyte, ...; from "
                            "http://yann.lecun.com/exdb/mnist/ or a mirror)")
    if config["data_dir"] and not os.path.isdir(config["data_dir"]):
        raise ArgumentError(f"--data-dir {config['data_dir']!r} is not a folder")
    return config, ckpt


def make_optimizer(name: str, params, config: dict):
    from .. import optim

    if name == "sgd":
        return optim.SGD(params, lr=config["lr"], momentum=config["momentum"],
                         weight_decay=config["weight_decay"])
    if name == "adam":
        return optim.Adam(params, lr=config["lr"], weight_decay=config["weight_decay"])
    raise ArgumentError(f"unknown optimizer {name!r}: choose sgd or adam")


def epoch_lr(base_lr: float, epoch: int, epochs: int, schedule: str) -> float:
    """Learning rate of epoch ``epoch`` (1-based): constant, or cosine from
    ``base_lr`` down to 2% of it at the last epoch (a function of the epoch
    alone, so --resume needs no scheduler state)."""
    if schedule == "constant" or epochs <= 1:
        return base_lr
    frac = (epoch - 1) / (epochs - 1)
    return base_lr * (0.02 + 0.98 * 0.5 * (1.0 + math.cos(math.pi * frac)))


def limit_threads(n: int):
    """Cap BLAS threads at ``n`` for the run (0: leave the library default).

    Small models' GEMMs are too small to split across cores, and OpenBLAS
    threads that spin while other processes hold the cores slow training
    down several times, so ``tapegrad train`` uses 1 thread unless told.
    Needs threadpoolctl (a scikit-learn dependency); without it, a no-op.
    """
    if not n:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=n, user_api="blas")


def _progress(loader, desc: str, quiet: bool):
    """A tqdm bar on stderr when it is a terminal (and tqdm is installed)."""
    if quiet or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=len(loader), desc=desc, unit="batch", leave=False, file=sys.stderr,
                dynamic_ncols=True)


def train_epoch(model, loader, optimizer, loss_fn, bar=None) -> tuple[float, int]:
    """One pass over ``loader``: ``(mean training loss, images seen)``."""
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        n = len(y)
        value = float(loss.item())
        total += value * n
        seen += n
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{value:.4f}", refresh=False)
    return total / max(seen, 1), seen


def read_metrics(path: str, upto: int) -> list[dict]:
    """Rows of an earlier run's metrics.csv for epochs <= ``upto`` (for --resume)."""
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        try:
            row = {k: (int(r[k]) if k == "epoch" else float(r[k])) for k in METRIC_FIELDS}
        except (KeyError, TypeError, ValueError):
            continue
        if row["epoch"] <= upto:
            out.append(row)
    return out


def write_metrics(path: str, history: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=METRIC_FIELDS)
        w.writeheader()
        for row in history:
            w.writerow({k: (f"{row[k]:.6g}" if isinstance(row[k], float) else row[k])
                        for k in METRIC_FIELDS})


def plot_curves(path: str, history: list[dict]) -> bool:
    """Loss and accuracy per epoch into ``path`` (False if matplotlib is missing)."""
    if not history:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ep = [r["epoch"] for r in history]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    ax1.plot(ep, [r["train_loss"] for r in history], "o-", label="train")
    ax1.plot(ep, [r["test_loss"] for r in history], "s-", label="test")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("cross-entropy loss")
    ax1.set_yscale("log")
    ax1.legend()
    ax2.plot(ep, [100 * r["test_acc"] for r in history], "s-", color="C1")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("test accuracy (%)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def run(args) -> int:
    config, ckpt = resolve(args)
    with limit_threads(config["threads"]):
        return _run(args, config, ckpt)


def _run(args, config, ckpt) -> int:
    import tapegrad

    from .. import nn
    from ..data import DataLoader

    quiet = bool(getattr(args, "quiet", False))
    device = tapegrad.get_device(config["device"])
    train_ds, test_ds = load_data(config["data"], config["data_dir"], config["train_samples"],
                                  config["test_samples"])
    tapegrad.manual_seed(config["seed"])
    model = build_model(config["model"], config["data"]).to(device)
    optimizer = make_optimizer(config["optimizer"], model.parameters(), config)
    out = config["out"]
    os.makedirs(out, exist_ok=True)
    ckpt_path = os.path.join(out, CHECKPOINT_NAME)
    csv_path = os.path.join(out, "metrics.csv")
    start = 0
    history: list[dict] = []
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        start = int(ckpt["epoch"])
        history = read_metrics(csv_path, start)
        if config["epochs"] <= start:
            raise ArgumentError(f"--resume: {ckpt_path} has already trained {start} epoch(s); "
                                f"pass --epochs N with N > {start} to train more")
    loader = DataLoader(train_ds, config["batch_size"], shuffle=True, seed=config["seed"],
                        device=device)
    test_loader = DataLoader(test_ds, EVAL_BATCH, device=device)
    loss_fn = nn.CrossEntropyLoss()
    epochs = config["epochs"]
    print(f"{'resuming' if start else 'training'} {config['model']} "
          f"({count_parameters(model):,} parameters) on {config['data']} "
          f"({len(train_ds)} train / {len(test_ds)} test images), {config['optimizer']} "
          f"lr {config['lr']:g} ({config['schedule']}), batch {config['batch_size']}, "
          f"epochs {start + 1}..{epochs}, "
          f"device {device}", flush=True)
    done = start
    t_run = time.perf_counter()
    try:
        for epoch in range(start + 1, epochs + 1):
            # epoch e's shuffle and dropout masks depend on (seed, e) alone, so a
            # resumed run repeats an uninterrupted one exactly
            loader.set_epoch(epoch - 1)
            tapegrad.manual_seed(config["seed"] * 100_003 + epoch)
            lr = epoch_lr(config["lr"], epoch, epochs, config["schedule"])
            for group in optimizer.param_groups:
                group["lr"] = lr
            bar = _progress(loader, f"epoch {epoch}/{epochs}", quiet)
            t0 = time.perf_counter()
            try:
                train_loss, seen = train_epoch(model, loader, optimizer, loss_fn, bar)
            finally:
                if bar is not None:
                    bar.close()
            t_train = time.perf_counter() - t0
            test_loss, preds, labels = predict(model, test_loader)
            acc = float((preds == labels).mean())
            row = {"epoch": epoch, "train_loss": train_loss, "test_loss": test_loss,
                   "test_acc": acc, "images_per_s": seen / max(t_train, 1e-9),
                   "seconds": time.perf_counter() - t0}
            history.append(row)
            done = epoch
            print(f"epoch {epoch:3d}/{epochs}  train loss {train_loss:.4f}  "
                  f"test loss {test_loss:.4f}  test acc {100 * acc:6.2f}%  "
                  f"{row['images_per_s']:7.0f} img/s  ({row['seconds']:.1f} s)", flush=True)
            save_checkpoint(ckpt_path, model, optimizer, epoch, config)
            write_metrics(csv_path, history)
    except KeyboardInterrupt:
        # the weights may be mid-epoch; the epoch count says what is complete
        save_checkpoint(ckpt_path, model, optimizer, done, config)
        write_metrics(csv_path, history)
        plot_curves(os.path.join(out, "curves.png"), history)
        lead = "\n" if sys.stderr.isatty() else ""  # end the progress bar's line
        print(f"{lead}interrupted: checkpoint saved to {ckpt_path} after {done} complete "
              f"epoch(s); continue with: tapegrad train --out {out} --resume", file=sys.stderr)
        return 130
    plotted = plot_curves(os.path.join(out, "curves.png"), history)
    final = history[-1]["test_acc"] if history else float("nan")
    print(f"done: test accuracy {100 * final:.2f}% after {done} epoch(s) "
          f"({time.perf_counter() - t_run:.1f} s); wrote {ckpt_path}, {csv_path}"
          + (f", {os.path.join(out, 'curves.png')}" if plotted else ""), flush=True)
    return 0
