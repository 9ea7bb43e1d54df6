"""``tapegrad train``: train a model on digits or MNIST, with checkpoints.

Writes into ``--out DIR``: ``model.npz`` (model + optimizer state, epochs
done, settings, metrics; after every epoch), ``metrics.csv`` (one row per
epoch) and, when matplotlib is installed, ``curves.png``; each atomically
(see runfiles.py). ``--resume`` continues from ``DIR/model.npz``.

Ctrl-C keeps the checkpoint of the last *complete* epoch and discards the
partial one: a checkpoint only ever holds end-of-epoch state, so ``--resume``
repeats an uninterrupted run exactly (epoch e's shuffle and dropout masks
depend on (seed, e) alone). A non-finite loss stops the run (exit status 1)
before anything non-finite is saved.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import sys
import time

import numpy as np

from ..backends import onednn as onednn_backend
from ..device.threads import default_num_threads, get_num_threads, set_num_threads
from ..errors import ArgumentError, TapegradError
from .checkpoint import (
    CHECKPOINT_NAME,
    METRIC_FIELDS,
    load_checkpoint,
    restore_optimizer_state,
    save_checkpoint,
)
from .common import EVAL_BATCH, load_data, predict, progress_bar, pyplot, write_csv
from .debug_info import DebugInfo
from .models import build_model, count_parameters
from .runfiles import prepare_run_folder, sigint_held, write_atomic
from .settings import DEFAULT_LR, DEFAULTS

# settings a resumed run must share with its checkpoint (the others may change)
SAME_ON_RESUME = ("model", "data", "optimizer")


class TrainingDiverged(TapegradError, ArithmeticError):
    """The loss or the weights became NaN/inf; the run stops with exit status 1."""

    exit_status = 1


class _NonFinite(Exception):
    """Raised inside the epoch loop; becomes a TrainingDiverged with the context."""


def resolve(args) -> tuple[dict, object]:
    """Settings from the command line, the checkpoint (on --resume) and DEFAULTS,
    in that order of precedence; returns ``(config, checkpoint or None)``."""
    given = {k: getattr(args, k) for k in DEFAULTS if getattr(args, k, None) is not None}
    out = given.get("out", DEFAULTS["out"])
    ckpt = None
    config = dict(DEFAULTS)
    if args.resume:
        ckpt, saved = load_checkpoint(os.path.join(out, CHECKPOINT_NAME))
        for k in SAME_ON_RESUME:
            if k in given and given[k] != saved.get(k, DEFAULTS[k]):
                raise ArgumentError(
                    f"--resume: the checkpoint in {out} trained --{k} "
                    f"{saved.get(k, DEFAULTS[k])}, not "
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


@contextlib.contextmanager
def limit_threads(n: int):
    """Run with ``tapegrad.set_num_threads(n)`` (0: tapegrad's default, every core
    available or ``OMP_NUM_THREADS``), the previous count restored afterwards.
    The large layers split across the threads (tapegrad.device.pool)."""
    before = get_num_threads()
    set_num_threads(n or default_num_threads())
    try:
        yield
    finally:
        set_num_threads(before)


def _progress(loader, desc: str, quiet: bool):
    """A tqdm bar on stderr when it is a terminal (and tqdm is installed)."""
    return progress_bar(len(loader), desc, quiet)


def train_epoch(model, loader, optimizer, loss_fn, bar=None, job=None) -> tuple[float, int]:
    """One pass over ``loader``: ``(mean training loss, images seen)``. A
    non-finite loss raises before its backward/step can touch the weights
    (under mpirun the loss is the mean over the ranks: all stop together)."""
    model.train()
    total, seen = 0.0, 0
    for step, (x, y) in enumerate(loader, 1):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        value = float(loss.item())
        if job is not None:
            value = job.average(value)
        if not math.isfinite(value):
            raise _NonFinite(f"the training loss is {value} at step {step}/{len(loader)}")
        loss.backward()
        optimizer.step()
        n = len(y)
        total += value * n
        seen += n
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{value:.4f}", refresh=False)
    return total / max(seen, 1), seen


def _all_finite(model) -> bool:
    """Every float parameter and buffer of ``model`` is finite (one sync per tensor)."""
    return all(bool(t.device.xp.isfinite(t.array).all()) for t in model.state_dict().values()
               if t.dtype.kind == "f")


def restore_optimizer(optimizer, state: dict, config: dict, path: str) -> None:
    """Load the checkpoint's optimizer buffers (checked against ``optimizer``);
    the hyperparameters stay those of ``config``, so ``--resume --momentum M``
    really trains with momentum M."""
    options = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    restore_optimizer_state(optimizer, state, path)
    for group, opts in zip(optimizer.param_groups, options):
        group.update(opts)


def read_metrics(path: str, upto: int) -> list[dict]:
    """Rows of an older checkpoint's metrics.csv for epochs <= ``upto`` (for
    --resume of checkpoints that predate the history entry), one per epoch."""
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = {}
    for r in rows:
        try:
            row = {k: (int(r[k]) if k == "epoch" else float(r[k])) for k in METRIC_FIELDS}
        except (KeyError, TypeError, ValueError):
            continue
        if 1 <= row["epoch"] <= upto:
            out[row["epoch"]] = row
    return [out[e] for e in sorted(out)]


def write_metrics(path: str, history: list[dict]) -> None:
    write_csv(path, METRIC_FIELDS, history)


def plot_curves(path: str, history: list[dict]) -> bool:
    """Loss and accuracy per epoch into ``path`` (False if matplotlib is missing)."""
    if not history:
        return False
    plt = pyplot()
    if plt is None:
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
    try:
        write_atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=100))
    finally:
        plt.close(fig)
    return True


def run(args) -> int:
    if getattr(args, "nproc", None):
        from .launch import launch_train

        return launch_train(args)
    from .data_parallel import Job

    job = Job.start()  # one process, or this rank of an mpirun job
    try:
        config, ckpt = job.resolve(resolve, args)
        if job.lead:
            prepare_run_folder(config["out"])  # before any work: an unwritable --out fails now
        with limit_threads(config["threads"]), job.output():
            return job.end(_run(args, config, ckpt, job))
    except BaseException as exc:
        job.fail(exc)  # re-raised with one process; under mpirun, ends every rank
        raise


def _resumed_history(ckpt, csv_path: str, start: int) -> list[dict]:
    if "history" in ckpt:  # validated: exactly epochs 1..start
        return list(ckpt["history"])
    history = read_metrics(csv_path, start)
    if len(history) != start:
        print(f"warning: {csv_path} has {len(history)} of the {start} completed epochs' rows "
              "(an older tapegrad lost them); the metrics continue from there",
              file=sys.stderr)
    return history


def _stopped(done: int, start: int, ckpt_path: str) -> str:
    """What model.npz holds after a run stopped early."""
    if done == 0:
        return "no epoch completed, nothing saved"
    kept = f"{ckpt_path} holds the end of epoch {done}"
    return kept + (" (unchanged)" if done == start else "")


def _one_epoch(epoch, lr, config, model, optimizer, loader, test_loader, bar,
               job=None) -> dict:
    """Train epoch ``epoch`` and test; its metrics row. _NonFinite if the loss,
    the weights or the test loss stop being finite."""
    import tapegrad

    from .. import nn

    # epoch e's shuffle and dropout masks depend on (seed, e) alone, so a
    # resumed run repeats an uninterrupted one exactly
    loader.set_epoch(epoch - 1)
    seed = config["seed"] * 100_003 + epoch
    tapegrad.manual_seed(seed if job is None else job.seed(seed))
    for group in optimizer.param_groups:
        group["lr"] = lr
    t0 = time.perf_counter()
    try:
        train_loss, seen = train_epoch(model, loader, optimizer, nn.CrossEntropyLoss(), bar,
                                       job)
        if job is not None:
            seen *= job.size  # every rank's shard has the same size
    finally:
        if bar is not None:
            bar.close()
    t_train = time.perf_counter() - t0
    test_loss, preds, labels = predict(model, test_loader)
    if not (_all_finite(model) and math.isfinite(test_loss)):
        raise _NonFinite(f"the weights or the test loss ({test_loss}) became non-finite by "
                         "the end of the epoch")
    return {"epoch": epoch, "train_loss": train_loss, "test_loss": test_loss,
            "test_acc": float((preds == labels).mean()),
            "images_per_s": seen / max(t_train, 1e-9), "seconds": time.perf_counter() - t0}


def _run(args, config, ckpt, job=None) -> int:
    import tapegrad

    from ..data import DataLoader
    from .data_parallel import Job

    job = job or Job()
    quiet = bool(getattr(args, "quiet", False)) or not job.lead
    device = tapegrad.get_device(config["device"])
    train_ds, test_ds = load_data(config["data"], config["data_dir"], config["train_samples"],
                                  config["test_samples"])
    tapegrad.manual_seed(config["seed"])
    model = build_model(config["model"], config["data"]).to(device)
    optimizer = make_optimizer(config["optimizer"], model.parameters(), config)
    out = config["out"]
    ckpt_path = os.path.join(out, CHECKPOINT_NAME)
    csv_path = os.path.join(out, "metrics.csv")
    png_path = os.path.join(out, "curves.png")
    start = 0
    history: list[dict] = []
    if ckpt is not None:
        start = ckpt["epoch"]
        if config["epochs"] <= start:
            raise ArgumentError(f"--resume: {ckpt_path} has already trained {start} epoch(s); "
                                f"pass --epochs N with N > {start} to train more")
        model.load_state_dict(ckpt["model"])
        restore_optimizer(optimizer, ckpt["optimizer"], config, ckpt_path)
        history = _resumed_history(ckpt, csv_path, start)
        if job.lead:
            with sigint_held():
                write_metrics(csv_path, history)  # repairs a metrics.csv a kill left behind
    net = job.wrap(model)  # what trains: the model, or its DistributedDataParallel replica
    loader = job.loader(train_ds, config, device)
    test_loader = DataLoader(test_ds, EVAL_BATCH, device=device)
    epochs = config["epochs"]
    debug = DebugInfo(out, model, start) if getattr(args, "debug_info", False) and job.lead \
        else None
    print(f"{'resuming' if start else 'training'} {config['model']} "
          f"({count_parameters(model):,} parameters) on {config['data']} "
          f"({len(train_ds)} train / {len(test_ds)} test images), {config['optimizer']} "
          f"lr {config['lr']:g} ({config['schedule']}), batch {config['batch_size']}, "
          f"epochs {start + 1}..{epochs}, "
          f"device {device}", flush=True)
    if job.describe(config):
        print(job.describe(config), flush=True)
    if device.type == "cpu":
        print(f"CPU layers: {onednn_backend.describe()}", flush=True)
    done = start  # the epoch whose end model.npz holds
    lr = config["lr"]
    t_run = time.perf_counter()
    # overflow is caught below as a non-finite loss, with the epoch and step; no
    # NumPy warnings about it on the way
    quiet_fp = np.errstate(over="ignore", invalid="ignore", divide="ignore")
    try:
        with quiet_fp:
            for epoch in range(start + 1, epochs + 1):
                lr = epoch_lr(config["lr"], epoch, epochs, config["schedule"])
                with debug.watch() if debug else contextlib.nullcontext():
                    row = _one_epoch(epoch, lr, config, net, optimizer, loader, test_loader,
                                     _progress(loader, f"epoch {epoch}/{epochs}", quiet), job)
                with sigint_held():  # checkpoint and metrics.csv always agree
                    if job.lead:  # the plain model: loadable by one process
                        save_checkpoint(ckpt_path, model, optimizer, epoch, config,
                                        [*history, row])
                    history.append(row)
                    done = epoch
                    if job.lead:
                        write_metrics(csv_path, history)
                    if debug is not None:
                        debug.write(epoch)
                print(f"epoch {epoch:3d}/{epochs}  train loss {row['train_loss']:.4f}  "
                      f"test loss {row['test_loss']:.4f}  test acc {100 * row['test_acc']:6.2f}%  "
                      f"{row['images_per_s']:7.0f} img/s  ({row['seconds']:.1f} s)", flush=True)
    except KeyboardInterrupt:
        with sigint_held():
            if job.lead:
                plot_curves(png_path, history)
        lead = "\n" if sys.stderr.isatty() else ""  # end the progress bar's line
        resume = (f"; continue with: tapegrad train --out {out} --resume" if done else "")
        print(f"{lead}interrupted during epoch {min(done + 1, epochs)}: the partial epoch is "
              f"discarded; {_stopped(done, start, ckpt_path)}{resume}",
              file=sys.stderr)
        return 130
    except _NonFinite as exc:
        with sigint_held():
            if job.lead:
                plot_curves(png_path, history)
        base = config["lr"]
        at = f", {lr:g} in this epoch" if lr != base else ""
        raise TrainingDiverged(
            f"training diverged in epoch {done + 1} (--lr {base:g}{at}): {exc}; stopped "
            f"without saving it: {_stopped(done, start, ckpt_path)}; rerun with a lower --lr "
            f"(e.g. --lr {base / 10:g}; the {config['optimizer']} default is "
            f"{DEFAULT_LR[config['optimizer']]:g})") from None
    with sigint_held():
        plotted = job.lead and plot_curves(png_path, history)
    final = history[-1]["test_acc"] if history else float("nan")
    print(f"done: test accuracy {100 * final:.2f}% after {done} epoch(s) "
          f"({time.perf_counter() - t_run:.1f} s); wrote {ckpt_path}, {csv_path}"
          + (f", {png_path}" if plotted else "")
          + (f", {debug.csv_path}" if debug else "")
          + (f", {debug.png_path}" if debug and os.path.isfile(debug.png_path) else ""),
          flush=True)
    return 0
