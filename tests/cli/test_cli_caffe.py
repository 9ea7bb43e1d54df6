"""`tapegrad caffe train` / `tapegrad caffe test`: Caffe's tools on a tiny net fed from
the MNIST-shaped digits (and from HDF5 files): snapshots, metrics.csv, Caffe's lines,
resuming from a solverstate, stopping at Ctrl-C, and the one-line errors."""

import csv
import os
import re
import signal

import numpy as np
import pytest

pytest.importorskip("google.protobuf")
pytest.importorskip("sklearn")

from tapegrad.cli import caffe as caffe_cli  # noqa: E402
from tapegrad.cli import main  # noqa: E402

NET = """name: "tiny"
layer { name: "d" type: "Data" top: "data" top: "label" include { phase: TRAIN }
  transform_param { scale: 0.00390625 } data_param { source: "train_lmdb" batch_size: 16 } }
layer { name: "d" type: "Data" top: "data" top: "label" include { phase: TEST }
  transform_param { scale: 0.00390625 } data_param { source: "test_lmdb" batch_size: 50 } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param { num_output: 4 kernel_size: 5 stride: 3 weight_filler { type: "xavier" } } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "ip" type: "InnerProduct" bottom: "conv" top: "ip"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy"
  include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def _solver(tmp_path, prefix="snap/tiny", net=NET, **fields):
    (tmp_path / "net.prototxt").write_text(net)
    settings = {"test_iter": 2, "test_interval": 10, "base_lr": 0.05, "momentum": 0.9,
                "lr_policy": '"fixed"', "display": 5, "max_iter": 20, "snapshot": 10,
                "snapshot_prefix": f'"{prefix}"', **fields}
    text = 'net: "net.prototxt"\n' + "".join(f"{k}: {v}\n" for k, v in settings.items()
                                              if v is not None)
    path = tmp_path / "solver.prototxt"
    path.write_text(text)
    return str(path)


def _rows(folder):
    with open(os.path.join(folder, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


def test_train_snapshots_metrics_and_test(tmp_path, capsys):
    solver, out = _solver(tmp_path), str(tmp_path / "run")
    assert main(["caffe", "train", "--solver", solver, "--out", out, "-q"]) == 0
    text = capsys.readouterr().out
    assert "CPU layers: " in text and "Solving tiny (SGD" in text
    assert re.search(r"^Iteration 5, loss = [\d.]+, lr = 0.05", text, re.M)
    assert re.search(r"^Iteration 10, Testing net \(#0\)\n    Test net output #0: accuracy = "
                     r"[\d.]+\n    Test net output #1: loss = [\d.]+ \(\* 1 = [\d.]+ loss\)",
                     text, re.M)
    assert f"Snapshotting to binary proto file {out}/tiny_iter_20.caffemodel" in text
    for it in (10, 20):
        for ext in ("caffemodel", "solverstate"):
            assert os.path.isfile(os.path.join(out, f"tiny_iter_{it}.{ext}"))
    rows = _rows(out)
    assert list(rows[0]) == ["iter", "loss", "lr", "test_accuracy", "test_loss"]
    assert [int(r["iter"]) for r in rows] == [0, 5, 10, 15, 20]
    assert [r["test_accuracy"] != "" for r in rows] == [True, False, True, False, True]
    assert float(rows[-1]["loss"]) < float(rows[0]["loss"])
    assert float(rows[-1]["test_accuracy"]) > 0.3  # chance is 0.1

    weights = os.path.join(out, "tiny_iter_20.caffemodel")
    assert main(["caffe", "test", "--model", str(tmp_path / "net.prototxt"), "--weights",
                 weights, "--iterations", "3"]) == 0
    text = capsys.readouterr().out
    batches = [float(v) for v in re.findall(r"^Batch \d, accuracy = ([\d.]+)$", text, re.M)]
    (mean,) = re.findall(r"^accuracy = ([\d.]+)$", text, re.M)
    assert len(batches) == 3 and float(mean) == pytest.approx(np.mean(batches), abs=1e-5)
    assert re.search(r"^Loss: [\d.]+\n", text, re.M)
    assert re.search(r"^loss = [\d.]+ \(\* 1 = [\d.]+ loss\)$", text, re.M)


def test_resume_from_a_solverstate_continues_the_iterations(tmp_path, capsys):
    solver, out = _solver(tmp_path), str(tmp_path / "run")
    assert main(["caffe", "train", "--solver", solver, "--out", out, "-q"]) == 0
    capsys.readouterr()
    state = os.path.join(out, "tiny_iter_10.solverstate")
    assert main(["caffe", "train", "--solver", solver, "--out", out, "--snapshot", state,
                 "-q", "--threads", "1"]) == 0
    text = capsys.readouterr().out
    its = [int(v) for v in re.findall(r"^Iteration (\d+), loss", text, re.M)]
    assert its == [10, 15, 20]  # none before the solverstate's iteration
    assert [int(r["iter"]) for r in _rows(out)] == [0, 5, 10, 15, 20]


def test_default_out_is_the_snapshot_folder_and_hdf5_reads_its_source(tmp_path, capsys):
    h5py = pytest.importorskip("h5py")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    with h5py.File(tmp_path / "train.h5", "w") as f:
        f["x"], f["y"] = x, x @ np.array([1.0, -2.0, 0.5], np.float32)[:, None]
    (tmp_path / "list.txt").write_text("train.h5\n")
    net = """name: "reg"
layer { name: "h" type: "HDF5Data" top: "x" top: "y" hdf5_data_param { source: "SRC"
  batch_size: 8 } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip"
  inner_product_param { num_output: 1 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "y" top: "loss" }
""".replace("SRC", str(tmp_path / "list.txt"))
    (tmp_path / "snaps").mkdir()
    solver = _solver(tmp_path, prefix=str(tmp_path / "snaps" / "reg"), net=net, test_iter=None,
                     test_interval=None, base_lr=0.1, snapshot=0, max_iter=30)
    assert main(["caffe", "train", "--solver", solver, "--data", "digits", "-q"]) == 0
    rows = _rows(tmp_path / "snaps")
    assert float(rows[-1]["loss"]) < 0.1 * float(rows[0]["loss"])
    assert os.path.isfile(tmp_path / "snaps" / "reg_iter_30.caffemodel")  # after training


def test_ctrl_c_stops_at_an_iteration_and_snapshots(tmp_path, capsys, monkeypatch):
    real = caffe_cli._feed
    calls = []

    def feed(net, args, seed, root=None):
        inner = real(net, args, seed, root)
        if net.model.phase != "train":
            return inner

        def interrupting():
            calls.append(1)
            if len(calls) == 7:
                os.kill(os.getpid(), signal.SIGINT)
            return inner()
        interrupting.shapes, interrupting.size = inner.shapes, inner.size
        return interrupting

    monkeypatch.setattr(caffe_cli, "_feed", feed)
    solver, out = _solver(tmp_path), str(tmp_path / "run")
    assert main(["caffe", "train", "--solver", solver, "--out", out, "-q"]) == 130
    err = capsys.readouterr().err
    (it,) = re.findall(r"interrupted at iteration (\d+)", err)
    assert 6 <= int(it) <= 8 and f"--snapshot {out}/tiny_iter_{it}.solverstate" in err
    assert os.path.isfile(os.path.join(out, f"tiny_iter_{it}.caffemodel"))


@pytest.mark.parametrize("argv, match", [
    (["--weights", "a.caffemodel", "--snapshot", "b.solverstate"],
     "argument --snapshot: not allowed with argument --weights"),
    (["--data", "mnist"], "--data mnist needs --data-dir"),
])
def test_usage_errors_exit_2_with_one_line(tmp_path, capsys, argv, match):
    solver = _solver(tmp_path)
    assert main(["caffe", "train", "--solver", solver, *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and err.count("\n") == 1


def test_missing_files_and_folders_exit_2(tmp_path, capsys):
    assert main(["caffe", "train", "--solver", str(tmp_path / "nope.prototxt")]) == 2
    assert "tapegrad caffe train: error: --solver" in capsys.readouterr().err
    solver = _solver(tmp_path, prefix="no/such/folder/x")
    assert main(["caffe", "train", "--solver", solver]) == 2
    assert "create it or pass --out DIR" in capsys.readouterr().err
    assert main(["caffe", "test", "--model", str(tmp_path / "net.prototxt"), "--weights",
                 str(tmp_path / "none.caffemodel")]) == 2
    assert "tapegrad caffe test: error: " in capsys.readouterr().err
    assert main(["caffe"]) == 2
    assert "required: ACTION" in capsys.readouterr().err


def test_a_diverging_run_exits_1(tmp_path, capsys):
    net = """name: "dummy"
layer { name: "d" type: "DummyData" top: "x" top: "y" dummy_data_param {
  shape { dim: 8 dim: 3 } shape { dim: 8 dim: 1 } data_filler { type: "gaussian" } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip"
  inner_product_param { num_output: 1 weight_filler { type: "gaussian" } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "y" top: "loss" }
"""
    solver = _solver(tmp_path, net=net, base_lr=1e3, test_iter=None, test_interval=None,
                     snapshot=0, max_iter=50)
    out = tmp_path / "run"
    assert main(["caffe", "train", "--solver", solver, "--out", str(out), "-q"]) == 1
    err = capsys.readouterr().err
    assert "tapegrad caffe train: error: the train loss is" in err and "diverged" in err
    assert _rows(out)[0]["iter"] == "0"  # the rows up to there are kept
