"""The ``tapegrad`` command line: ``tapegrad train``, ``eval``, ``check`` and ``caffe``.

Every tapegrad error (bad argument, missing data, missing CuPy, unwritable
run folder, bad checkpoint, ...) becomes a one-line message on stderr and exit
status 2, not a traceback; a diverged training run exits with status 1. Subcommands
live in :data:`COMMANDS` (name -> (add_arguments, run)).
"""

from __future__ import annotations

import argparse
import sys

from ..errors import TapegradError

__all__ = ["main", "build_parser", "COMMANDS"]

PROG = "tapegrad"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_train(p: argparse.ArgumentParser) -> None:
    from .models import MODELS
    from .settings import DEFAULT_LR, DEFAULTS, OPTIMIZERS, SCHEDULES, arg_type

    d = DEFAULTS
    p.add_argument("--model", choices=MODELS,
                   help=f"architecture (default {d['model']}; lenet on mnist is Caffe's LeNet)")
    p.add_argument("--data", choices=("digits", "mnist"),
                   help=f"dataset (default {d['data']}: scikit-learn's bundled 8x8 digits)")
    p.add_argument("--data-dir", metavar="DIR",
                   help="folder with the MNIST IDX files (needed for --data mnist)")
    p.add_argument("--epochs", type=arg_type("epochs"), metavar="N",
                   help=f"total epochs (default {d['epochs']}; with --resume: train up to N)")
    p.add_argument("--batch-size", type=arg_type("batch_size"), metavar="N",
                   help=f"mini-batch size (default {d['batch_size']})")
    p.add_argument("--lr", type=arg_type("lr", float), metavar="LR",
                   help=f"learning rate (default {DEFAULT_LR['adam']:g} for adam, "
                        f"{DEFAULT_LR['sgd']:g} for sgd)")
    p.add_argument("--optimizer", choices=OPTIMIZERS,
                   help=f"default {d['optimizer']}")
    p.add_argument("--momentum", type=arg_type("momentum", float), metavar="M",
                   help=f"SGD momentum (default {d['momentum']:g})")
    p.add_argument("--weight-decay", type=arg_type("weight_decay", float), metavar="WD",
                   help=f"L2 weight decay (default {d['weight_decay']:g})")
    p.add_argument("--schedule", choices=SCHEDULES,
                   help=f"learning rate per epoch (default {d['schedule']}: cosine decay to 2%%)")
    p.add_argument("--device", metavar="DEV", help="cpu (default), cuda or cuda:N (needs CuPy)")
    p.add_argument("--threads", type=arg_type("threads"), metavar="N",
                   help="threads the layers split across (tapegrad.set_num_threads; default 0: "
                        "every core available, or OMP_NUM_THREADS)")
    p.add_argument("--seed", type=arg_type("seed"), help=f"random seed (default {d['seed']})")
    p.add_argument("--out", metavar="DIR",
                   help=f"run folder for model.npz, metrics.csv, curves.png (default {d['out']})")
    p.add_argument("--resume", action="store_true",
                   help="continue from OUT/model.npz (its settings apply unless given again)")
    p.add_argument("--train-samples", type=arg_type("train_samples"), metavar="N",
                   help="use only the first N training images (quick runs)")
    p.add_argument("--test-samples", type=arg_type("test_samples"), metavar="N",
                   help="use only the first N test images (quick runs)")
    p.add_argument("--debug-info", action="store_true",
                   help="Caffe's debug_info: each epoch, every layer's mean |output| and "
                        "|gradient|, saved bytes and times into OUT/debug_info.csv, plotted "
                        "over the epochs in OUT/debug_info.png (training runs slower)")
    p.add_argument("--nproc", type=arg_type("epochs"), metavar="N",
                   help="train data-parallel on N processes: runs this command under "
                        "mpirun -n N (needs tapegrad[mpi]; mpirun -n N tapegrad train ... "
                        "does the same, also across machines with a hostfile)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def _run_train(args) -> int:
    from .train import run

    return run(args)


def _add_eval(p: argparse.ArgumentParser) -> None:
    from .settings import arg_type

    p.add_argument("--checkpoint", required=True, metavar="PATH",
                   help="model.npz written by tapegrad train (or its run folder)")
    p.add_argument("--data-dir", metavar="DIR", help="MNIST folder, if not the one trained on")
    p.add_argument("--device", metavar="DEV", help="cpu, cuda or cuda:N (default: as trained)")
    p.add_argument("--batch-size", type=arg_type("batch_size"), metavar="N",
                   help="default 500")
    p.add_argument("--test-samples", type=arg_type("test_samples"), metavar="N",
                   help="use only the first N test images")


def _run_eval(args) -> int:
    from .evaluate import run

    return run(args)


def _add_check(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", metavar="DEV", help="cpu (default), cuda or cuda:N")
    p.add_argument("--only", metavar="NAME", help="only ops whose name contains NAME")


def _run_check(args) -> int:
    from .check import run

    return run(args)


def _add_caffe(p: argparse.ArgumentParser) -> None:
    from .caffe import add_arguments

    add_arguments(p)


def _run_caffe(args) -> int:
    from .caffe import run

    return run(args)


COMMANDS = {
    "train": (_add_train, _run_train,
              "train a model on digits or MNIST (default: a LeNet-style CNN on the bundled "
              "digits, >= 97%% test accuracy in well under a minute on a CPU)"),
    "eval": (_add_eval, _run_eval, "test accuracy and confusion matrix of a checkpoint"),
    "check": (_add_check, _run_check,
              "gradcheck every registered op on a device and print a pass/fail table"),
    "caffe": (_add_caffe, _run_caffe,
              "Caffe's tools: caffe train --solver S.prototxt, caffe test --model M "
              "--weights W (data layers fed from digits, MNIST or their HDF5 files)"),
}


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = _Parser(prog=PROG, description="tapegrad: tape-based autodiff on NumPy/CuPy.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (add, _, help_) in COMMANDS.items():
        add(sub.add_parser(name, help=help_, description=help_.replace("%%", "%")))
    return parser


def main(argv=None) -> int:
    """Entry point of the ``tapegrad`` console script; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    run = COMMANDS[args.command][1]
    try:
        return run(args)
    except TapegradError as exc:
        msg = " ".join(str(exc).split())  # one line, even for multi-line messages
        name = " ".join(filter(None, (args.command, getattr(args, "action", None))))
        print(f"{PROG} {name}: error: {msg}", file=sys.stderr)
        return getattr(exc, "exit_status", 2)  # 1: training diverged
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
