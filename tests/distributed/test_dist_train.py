"""``mpirun -n 2 tapegrad train`` and ``tapegrad train --nproc 2`` on the digits."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest
from mpi_jobs import need_mpi, run_mpi

from tapegrad.cli import main

pytest.importorskip("sklearn")  # the digits dataset ships with scikit-learn

QUICK = ["-q", "--train-samples", "800", "--test-samples", "300"]


def _rows(folder):
    with open(os.path.join(folder, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


def test_two_processes_train_like_one(tmp_path, capsys):
    need_mpi()
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    assert main(["train", "--epochs", "2", "--out", one, *QUICK]) == 0
    capsys.readouterr()
    # epoch 1 through the launcher, epoch 2 resumed under mpirun itself
    proc = subprocess.run([sys.executable, "-m", "tapegrad", "train", "--nproc", "2",
                           "--epochs", "1", "--out", two, *QUICK], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("epoch   1/1") == 1  # rank 0 alone prints
    assert "data-parallel on 2 processes (mpi): global batch 32 = 2 x 16" in proc.stdout
    res, _ = run_mpi(2, ["-m", "tapegrad", "train", "--epochs", "2", "--out", two,
                         "--resume", "-q"])  # the sample counts come from the checkpoint
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("epoch   2/2") == 1
    rows_one, rows_two = _rows(one), _rows(two)
    assert [r["epoch"] for r in rows_two] == ["1", "2"]
    acc_one, acc_two = float(rows_one[-1]["test_acc"]), float(rows_two[-1]["test_acc"])
    assert acc_one > 0.85 and acc_two > 0.85 and abs(acc_one - acc_two) < 0.05
    assert sorted(os.listdir(two)) == sorted(os.listdir(one))  # no file from rank 1
    # the checkpoint holds the plain model: one process evaluates it
    assert main(["eval", "--checkpoint", two, "--test-samples", "300"]) == 0
    assert f"test accuracy {100 * acc_two:.2f}%" in capsys.readouterr().out


def test_batch_that_does_not_split(tmp_path):
    res, seconds = run_mpi(2, ["-m", "tapegrad", "train", "--epochs", "1", "--batch-size",
                               "33", "--out", str(tmp_path / "x"), "-q"], timeout=60)
    assert res.returncode == 2 and seconds < 30
    assert "--batch-size 33 is the global batch and must split evenly over the 2 " \
           "processes" in res.stderr


def test_launcher_command(monkeypatch):
    from tapegrad.cli import launch

    monkeypatch.setattr(launch, "_is_open_mpi", lambda path: True)
    cmd = launch.mpirun_command(3, ["python", "x.py"], mpirun="/opt/mpi/bin/mpirun")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    assert cmd == ["/opt/mpi/bin/mpirun", *root, "--oversubscribe", "-n", "3", "python",
                   "x.py"]
    monkeypatch.setattr(launch, "_is_open_mpi", lambda path: False)  # MPICH: plain
    assert launch.mpirun_command(2, ["a"], mpirun="/m") == ["/m", "-n", "2", "a"]


def test_launcher_passes_the_options_on():
    from tapegrad.cli import build_parser
    from tapegrad.cli.launch import _train_argv

    args = build_parser().parse_args(["train", "--nproc", "2", "--epochs", "3", "--lr", "0.1",
                                      "--resume", "-q", "--out", "runs/x"])
    argv = _train_argv(args)
    assert build_parser().parse_args(["train", *argv]) == \
        build_parser().parse_args(["train", "--epochs", "3", "--lr", "0.1", "--resume", "-q",
                                   "--out", "runs/x"])
    assert "--nproc" not in argv
