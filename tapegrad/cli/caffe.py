"""``tapegrad caffe train`` and ``tapegrad caffe test``: Caffe's ``caffe train`` and
``caffe test`` tools on tapegrad (:mod:`tapegrad.compat.caffe`).

``train --solver S`` runs the solver (its nets, test nets, snapshots) with the data
layers fed by :func:`tapegrad.compat.caffe.feeds.feed_for` (``--data digits`` or
``mnist``; HDF5Data reads its own source). It prints Caffe's lines (``Iteration N,
loss = X, lr = Y``, ``Test net output #k: name = v``, ``Snapshotting to ...``) and
writes ``metrics.csv`` (iter, loss, lr, the test outputs) and ``curves.png`` into
``--out``, where the snapshots go too (default: the folder of the solver's
``snapshot_prefix``, as Caffe). ``--snapshot x.solverstate`` continues a run
(its metrics.csv rows before that iteration are kept); ``--weights`` fine-tunes.
The first Ctrl-C stops at the next iteration and snapshots (Caffe's
``--sigint_effect stop``); a second one ends the process at once.

``test --model M --weights W`` runs M's TEST phase ``--iterations`` times and
prints each output's mean, as Caffe's ``caffe test``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time

from ..errors import ArgumentError

__all__ = ["add_arguments", "run"]


def _add_common(p, quiet_help):
    from .settings import arg_type

    p.add_argument("--data", choices=("digits", "mnist"), default="digits",
                   help="what the Data/ImageData/MemoryData/Input layers read (default "
                        "digits: scikit-learn's digits made MNIST-shaped, 28x28 in 0..255); "
                        "HDF5Data layers read their own source")
    p.add_argument("--data-dir", metavar="DIR", help="folder with the MNIST IDX files "
                                                     "(for --data mnist)")
    p.add_argument("--threads", type=arg_type("threads"), default=0, metavar="N",
                   help="threads the layers split across (default 0: every core available)")
    p.add_argument("--seed", type=arg_type("seed"), metavar="N",
                   help="seeds the shuffles, crops and mirrors of the feeds (and, for train, "
                        "the solver's random_seed); default: the solver's random_seed, or 0")
    p.add_argument("-q", "--quiet", action="store_true", help=quiet_help)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``tapegrad caffe {train,test}``."""
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    t = sub.add_parser("train", help="train with a Caffe solver prototxt (caffe train)",
                       description="Caffe's `caffe train`: run a solver.prototxt.")
    t.add_argument("--solver", required=True, metavar="PATH", help="the solver .prototxt")
    start = t.add_mutually_exclusive_group()
    start.add_argument("--weights", metavar="A[,B]",
                       help="caffemodels to fine-tune from (copied by layer name)")
    start.add_argument("--snapshot", metavar="PATH",
                       help="a .solverstate to continue training from")
    t.add_argument("--out", metavar="DIR",
                   help="where snapshots, metrics.csv and curves.png go (default: the folder "
                        "of the solver's snapshot_prefix)")
    _add_common(t, "no progress bar")
    e = sub.add_parser("test", help="score a model's TEST phase (caffe test)",
                       description="Caffe's `caffe test`: mean of each output over "
                                   "--iterations batches.")
    e.add_argument("--model", required=True, metavar="PATH", help="the net .prototxt")
    e.add_argument("--weights", required=True, metavar="A[,B]", help="the .caffemodel(s)")
    e.add_argument("--iterations", type=int, default=50, metavar="N",
                   help="batches to score (default 50, as Caffe)")
    _add_common(e, "only the means, not each batch's outputs")


def run(args) -> int:
    from ..backends import onednn
    from ..compat.caffe.schema import require_protobuf
    from .train import limit_threads

    require_protobuf("tapegrad caffe")
    for opt in ("solver", "model", "snapshot"):
        path = getattr(args, opt, None)
        if path is not None and not os.path.isfile(path):
            raise ArgumentError(f"--{opt} {path!r}: no such file")
    if args.data == "mnist" and not args.data_dir:
        raise ArgumentError("--data mnist needs --data-dir DIR: the folder holding the four "
                            "MNIST IDX files")
    if args.data_dir and not os.path.isdir(args.data_dir):
        raise ArgumentError(f"--data-dir {args.data_dir!r} is not a folder")
    with limit_threads(args.threads):
        print(f"CPU layers: {onednn.describe()}", flush=True)
        return _train(args) if args.action == "train" else _test(args)


def _feed(net, args, seed, root=None):
    from ..compat.caffe.feeds import feed_for

    return feed_for(net, args.data, data_dir=args.data_dir, seed=seed, root=root)


def _scalars(outputs: dict) -> list[tuple[str, float]]:
    """(name, value) per element of each output, as Caffe's lines list them."""
    import numpy as np

    return [(k, float(x)) for k, v in outputs.items() for x in np.ravel(v)]


def _output_lines(kind, outputs, weights):
    lines = []
    for i, (name, v) in enumerate(_scalars(outputs)):
        w = weights.get(name)
        extra = f" (* {w:g} = {w * v:g} loss)" if w else ""
        lines.append(f"    {kind} net output #{i}: {name} = {v:g}{extra}")
    return lines


# ------------------------------------------------------------------ test


def _test(args) -> int:
    import numpy as np

    from ..compat import caffe

    if args.iterations < 1:
        raise ArgumentError(f"--iterations {args.iterations}: give a positive number")
    net = caffe.Net(args.model, caffe.TEST)
    for w in args.weights.split(","):
        net.copy_from(w.strip())
    feed = _feed(net, args, 0 if args.seed is None else args.seed,
                 os.path.dirname(os.path.abspath(args.model)))
    m = net.model
    weights = dict(m.weighted_tops)
    print(f"testing {m.net_name or args.model} ({args.iterations} batches of "
          f"{feed.shapes} from {args.data})", flush=True)
    sums, loss = {}, 0.0
    for i in range(args.iterations):
        out = net.forward(**feed())
        loss += sum(w * float(np.sum(out[t])) for t, w in weights.items() if t in out)
        for k, v in out.items():
            sums[k] = sums.get(k, 0) + np.asarray(v, np.float64)
        if not args.quiet:
            for name, v in _scalars(out):
                print(f"Batch {i}, {name} = {v:g}")
    means = {k: v / args.iterations for k, v in sums.items()}
    print(f"Loss: {loss / args.iterations:g}")
    for name, v in _scalars(means):
        w = weights.get(name)
        print(f"{name} = {v:g}" + (f" (* {w:g} = {w * v:g} loss)" if w else ""))
    return 0


# ------------------------------------------------------------------ train


class _Later:
    """A feed the solver gets before its nets exist; bound to them afterwards.
    Each call first honours a pending Ctrl-C (the weights are whole between
    iterations, so the run can stop and snapshot there)."""

    def __init__(self, stop, tick=None):
        self.feed, self.stop, self.tick = None, stop, tick

    def __call__(self):
        if self.stop.requested:
            raise _Stopped
        if self.tick is not None:
            self.tick()
        return self.feed()


class _Stopped(Exception):
    """Ctrl-C was pressed: stop at this point of the iteration and snapshot."""


class _StopFlag:
    """The first Ctrl-C sets ``requested`` (and puts back the previous handler,
    so a second one interrupts at once)."""

    requested = False

    @contextlib.contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.getsignal(signal.SIGINT)

        def handler(signum, frame):
            self.requested = True
            signal.signal(signal.SIGINT, previous)

        signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


class _Run:
    """What ``caffe train`` prints and writes while the solver runs."""

    def __init__(self, out):
        self.out, self.bar = out, None
        self.rows: dict[int, dict] = {}
        self.fields = ["iter", "loss", "lr"]
        self.csv = os.path.join(out, "metrics.csv")
        self.png = os.path.join(out, "curves.png")
        self.last = None

    def close_bar(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def say(self, line):
        if self.bar is not None:
            self.bar.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def row(self, it, **values):
        row = self.rows.setdefault(it, {"iter": it})
        for k, v in values.items():
            if k not in self.fields:
                self.fields.append(k)
            row[k] = v

    def on_display(self, info):
        it, now = info["iter"], time.perf_counter()
        speed = ""
        if self.last is not None and it > self.last[0]:
            speed = f" ({(it - self.last[0]) / max(now - self.last[1], 1e-9):.1f} iter/s)"
        self.last = (it, now)
        self.say(f"Iteration {it}, loss = {info['loss']:g}, lr = {info['lr']:g}{speed}")
        if len(info["outputs"]) > 1:
            for line in _output_lines("Train", info["outputs"], {}):
                self.say(line)
        self.row(it, loss=float(info["loss"]), lr=float(info["lr"]))
        self.save()

    def on_test(self, info, n_nets):
        self.say(f"Iteration {info['iter']}, Testing net (#{info['net']})")
        for line in _output_lines("Test", info["outputs"], info["loss_weights"]):
            self.say(line)
        tag = "test" if n_nets == 1 else f"test{info['net']}"
        seen: dict[str, int] = {}
        values = {}
        for name, v in _scalars(info["outputs"]):
            k = seen[name] = seen.get(name, -1) + 1
            values[f"{tag}_{name}" + (f"_{k}" if k else "")] = v
        self.row(info["iter"], **values)
        self.save()

    def resume_rows(self, upto: int):
        """Keep the rows of an earlier metrics.csv for iterations before ``upto``."""
        import csv

        if not os.path.isfile(self.csv):
            return
        with open(self.csv, newline="") as f:
            for r in csv.DictReader(f):
                try:
                    it = int(r.pop("iter"))
                except (KeyError, TypeError, ValueError):
                    continue
                if it < upto:
                    self.row(it, **{k: float(v) for k, v in r.items() if v not in ("", None)})

    def save(self):
        from .common import write_csv
        from .runfiles import sigint_held

        with sigint_held():
            write_csv(self.csv, self.fields, [self.rows[k] for k in sorted(self.rows)])

    def plot(self) -> bool:
        from .common import pyplot
        from .runfiles import write_atomic

        rows = [self.rows[k] for k in sorted(self.rows)]
        plt = pyplot()
        if plt is None or not rows:
            return False
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
        train = [(r["iter"], r["loss"]) for r in rows if "loss" in r]
        if train:
            ax1.plot(*zip(*train), "-", label="train (smoothed)")
        for f in self.fields[3:]:
            pts = [(r["iter"], r[f]) for r in rows if f in r]
            (ax1 if f.endswith("loss") else ax2).plot(*zip(*pts), "s-", label=f)
        ax1.set_ylabel("loss")
        if all(v > 0 for _, v in train):
            ax1.set_yscale("log")
        ax2.set_ylabel("test outputs")
        for ax in (ax1, ax2):
            ax.set_xlabel("iteration")
            ax.grid(alpha=0.3)
            if ax.lines:
                ax.legend()
        fig.tight_layout()
        try:
            write_atomic(self.png, lambda fh: fig.savefig(fh, format="png", dpi=100))
        finally:
            plt.close(fig)
        return True


def _out_folder(param, solver_path, out):
    """Where the run writes; the solver's snapshot_prefix moved into it."""
    from ..compat.caffe.files import locate

    prefix = param.snapshot_prefix
    if out is None:
        folder = os.path.dirname(prefix)
        if folder and not os.path.isabs(folder):
            found = locate(folder, os.path.dirname(os.path.abspath(solver_path)),
                           os.path.isdir)
            if found is None:
                raise ArgumentError(
                    f"the solver's snapshot_prefix {prefix!r} is in the folder {folder!r}, "
                    f"which is neither in the working directory nor beside the solver; "
                    "create it or pass --out DIR")
            folder = found
        out = folder or "."
    param.snapshot_prefix = os.path.join(out, os.path.basename(prefix) or "caffe")
    return out


def _train(args) -> int:
    from ..compat import caffe
    from ..compat.caffe.solver import SolverDiverged
    from .common import progress_bar
    from .runfiles import prepare_run_folder, sigint_held

    param = caffe.read_solver(args.solver)
    out = _out_folder(param, args.solver, args.out)
    prepare_run_folder(out)
    seed = args.seed if args.seed is not None else max(param.random_seed, 0)
    if args.seed is not None or param.random_seed < 0:
        param.random_seed = seed  # reproducible runs (Caffe's default -1 is not)
    stop, run = _StopFlag(), _Run(out)
    train_feed = _Later(stop, lambda: run.bar and run.bar.update(s.iter - start - run.bar.n))
    test_feeds = [_Later(stop) for _ in param.test_iter]

    class CliSolver(caffe.Solver):
        def snapshot(self):
            with sigint_held():
                paths = super().snapshot()
            run.say(f"Snapshotting to binary proto file {paths[0]}")
            run.say(f"Snapshotting solver state to binary proto file {paths[1]}")
            return paths

    root = os.path.dirname(os.path.abspath(args.solver))
    s = CliSolver(param, train_feed=train_feed, test_feed=test_feeds,
                  weights=args.weights.split(",") if args.weights else None, root=root,
                  on_display=run.on_display,
                  on_test=lambda info: run.on_test(info, len(s.test_nets)))
    train_feed.feed = _feed(s.net, args, seed, root)
    for i, (f, net) in enumerate(zip(test_feeds, s.test_nets)):
        f.feed = _feed(net, args, seed + 1 + i, root)
        n = param.test_iter[i] * max((sh[0] for sh in f.feed.shapes.values()), default=0)
        if f.feed.size and n > f.feed.size:
            print(f"note: test net #{i} scores test_iter {param.test_iter[i]} batches "
                  f"({n} items) of {f.feed.size}: it sees items more than once, as Caffe's "
                  "data layers cycle", flush=True)
    if args.snapshot:
        s.restore(args.snapshot)
        run.resume_rows(s.iter)
    start = s.iter
    print(f"Solving {s.net.model.net_name or args.solver} ({param.type}, base_lr "
          f"{param.base_lr:g}, lr_policy {param.lr_policy}, iterations {s.iter}..."
          f"{param.max_iter}) on {args.data}: train batches {train_feed.feed.shapes}; writing "
          f"into {out}", flush=True)
    if s.iter >= param.max_iter:
        raise ArgumentError(f"--snapshot {args.snapshot!r} is at iteration {s.iter}, which is "
                            f"max_iter ({param.max_iter}): raise max_iter in the solver to "
                            "train more")
    run.bar = progress_bar(param.max_iter - start, "caffe train", args.quiet, "iter")
    t0 = time.perf_counter()
    try:
        with stop.installed():
            s.solve()
    except _Stopped:
        run.close_bar()
        _, state = s.snapshot()
        run.plot()
        data = f" --data mnist --data-dir {args.data_dir}" if args.data == "mnist" else ""
        print(f"interrupted at iteration {s.iter}: wrote the snapshot {state}; continue with: "
              f"tapegrad caffe train --solver {args.solver} --snapshot {state} --out {out}"
              f"{data}", file=sys.stderr)
        return 130
    except SolverDiverged:
        run.plot()
        raise
    finally:
        run.close_bar()
    plotted = run.plot()
    print(f"Optimization Done ({time.perf_counter() - t0:.1f} s); wrote {run.csv}"
          + (f", {run.png}" if plotted else ""), flush=True)
    return 0
