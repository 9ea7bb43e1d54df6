"""`tapegrad train` / `tapegrad eval`: short runs, artifacts, resume, errors."""

import csv
import os
import subprocess
import sys

import numpy as np
import pytest

import tapegrad
from tapegrad.cli import main
from tapegrad.cli import train as train_mod

pytest.importorskip("sklearn")  # the digits dataset ships with scikit-learn

QUICK = ["-q", "--train-samples", "400", "--test-samples", "200"]


def _metrics(folder):
    with open(os.path.join(folder, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


def test_short_training_learns(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main(["train", "--out", out, "--epochs", "2", *QUICK]) == 0
    rows = _metrics(out)
    assert [int(r["epoch"]) for r in rows] == [1, 2]
    assert float(rows[1]["train_loss"]) < float(rows[0]["train_loss"])
    assert float(rows[1]["test_loss"]) < np.log(10)  # below chance-level cross-entropy
    assert float(rows[1]["test_acc"]) > 0.5  # chance is 0.1
    text = capsys.readouterr().out
    assert "epoch   2/2" in text and "test acc" in text and "img/s" in text
    assert "done: test accuracy" in text


def test_artifacts_resume_and_eval(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main(["train", "--out", out, "--epochs", "1", "--schedule", "constant",
                 *QUICK]) == 0
    ckpt = tapegrad.load(os.path.join(out, "model.npz"))
    assert int(ckpt["epoch"]) == 1
    assert ckpt["args"]["model"] == "lenet" and ckpt["args"]["data"] == "digits"
    assert "0.weight" in ckpt["model"] and "state" in ckpt["optimizer"]
    pytest.importorskip("matplotlib")
    assert os.path.getsize(os.path.join(out, "curves.png")) > 0

    # resume to epoch 3: settings come from the checkpoint
    assert main(["train", "--out", out, "--epochs", "3", "--resume", "-q"]) == 0
    assert [int(r["epoch"]) for r in _metrics(out)] == [1, 2, 3]
    assert int(tapegrad.load(os.path.join(out, "model.npz"))["epoch"]) == 3

    # an uninterrupted 3-epoch run gives the same numbers
    straight = str(tmp_path / "straight")
    assert main(["train", "--out", straight, "--epochs", "3", "--schedule", "constant",
                 *QUICK]) == 0
    for a, b in zip(_metrics(out), _metrics(straight)):
        for k in ("train_loss", "test_loss", "test_acc"):
            assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-5)

    capsys.readouterr()
    assert main(["eval", "--checkpoint", out, "--test-samples", "200"]) == 0
    text = capsys.readouterr().out
    acc = float(text.split("test accuracy ")[1].split("%")[0])
    assert acc == pytest.approx(100 * float(_metrics(out)[-1]["test_acc"]), abs=0.01)
    assert "confusion matrix" in text
    # the matrix's counts add up to the test samples evaluated
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()
            and len(line.split()) == 11]
    assert len(rows) == 10
    assert sum(int(v) for r in rows for v in r[1:]) == 200


def test_keyboard_interrupt_saves_checkpoint(tmp_path, capsys, monkeypatch):
    real = train_mod.train_epoch
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod, "train_epoch", interrupted)
    out = str(tmp_path / "run")
    assert main(["train", "--out", out, "--epochs", "5", *QUICK]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("interrupted during epoch 2")
    assert "holds the end of epoch 1" in err[0]
    assert int(tapegrad.load(os.path.join(out, "model.npz"))["epoch"]) == 1
    assert len(_metrics(out)) == 1


@pytest.mark.parametrize("argv, message", [
    (["train", "--model", "resnet"], "invalid choice: 'resnet'"),
    (["train", "--epochs", "-3"], "--epochs: must be a positive integer"),
    (["train", "--epochs", "two"], "expected a positive integer"),
    (["train", "--lr", "0"], "--lr: must be a finite number > 0"),
    (["train", "--lr", "inf"], "--lr: must be a finite number > 0, got inf"),
    (["train", "--lr", "nan"], "--lr: must be a finite number > 0, got nan"),
    (["train", "--momentum", "-1"], "--momentum: must be a finite number >= 0"),
    (["train", "--seed", "-1"], "--seed: must be an integer >= 0, got -1"),
    (["train", "--seed", "x"], "--seed: expected an integer >= 0, got 'x'"),
    (["train", "--out", "/dev/null/x"], "cannot create the run folder '/dev/null/x'"),
    (["train", "--out", "/dev/null"], "is a file, not a folder"),
    (["train", "--data", "mnist"], "--data mnist needs --data-dir"),
    (["train", "--data", "mnist", "--data-dir", "/no/such/dir"], "is not a folder"),
    (["train", "--resume", "--out", "/no/such/run"], "no checkpoint at"),
    (["eval", "--checkpoint", "/no/such/model.npz"], "no checkpoint at"),
    (["eval"], "--checkpoint"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_one_line_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_mnist_folder_without_files(tmp_path, capsys):
    assert main(["train", "--data", "mnist", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "train-images-idx3-ubyte" in err and "yann.lecun.com" in err
    assert len(err.splitlines()) == 1


def test_cuda_without_cupy(tmp_path, capsys):
    if tapegrad.cupy_available():
        pytest.skip("CuPy and a GPU are available here")
    assert main(["train", "--device", "cuda", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "CuPy" in err and len(err.splitlines()) == 1


def test_resume_with_other_model_refused(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main(["train", "--out", out, "--epochs", "1", *QUICK]) == 0
    capsys.readouterr()
    assert main(["train", "--out", out, "--epochs", "2", "--resume", "--model", "mlp"]) == 2
    assert "trained --model lenet" in capsys.readouterr().err
    assert main(["train", "--out", out, "--epochs", "1", "--resume"]) == 2
    assert "already trained 1 epoch" in capsys.readouterr().err


def test_python_dash_m_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tapegrad", "train", "--model", "nope"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "invalid choice" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "tapegrad", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "train" in proc.stdout and "eval" in proc.stdout


def _write_fake_mnist(folder, n_train=96, n_test=32):
    """Tiny IDX files in MNIST's layout: class k has a bright k-th row band."""
    import gzip
    import struct

    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 40, (n, 28, 28)).astype(np.uint8)
        for i, k in enumerate(labels):
            images[i, 2 + 2 * k:4 + 2 * k, 4:24] = 255
        for kind, arr in (("images-idx3-ubyte", images), ("labels-idx1-ubyte", labels)):
            head = struct.pack(">HBB", 0, 8, arr.ndim) + struct.pack(f">{arr.ndim}I",
                                                                      *arr.shape)
            (folder / f"{prefix}-{kind}.gz").write_bytes(gzip.compress(head + arr.tobytes()))


def test_mnist_caffe_lenet_from_local_idx(tmp_path, capsys):
    data = tmp_path / "mnist"
    data.mkdir()
    _write_fake_mnist(data)
    out = str(tmp_path / "run")
    assert main(["train", "-q", "--data", "mnist", "--data-dir", str(data), "--epochs", "2",
                 "--optimizer", "sgd", "--lr", "0.01", "--out", out]) == 0
    text = capsys.readouterr().out
    assert "431,080 parameters" in text and "96 train / 32 test" in text
    rows = _metrics(out)
    assert float(rows[1]["train_loss"]) < float(rows[0]["train_loss"])
    assert main(["eval", "--checkpoint", os.path.join(out, "model.npz")]) == 0
    assert "test accuracy" in capsys.readouterr().out


def test_progress_bar_only_on_a_terminal(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tqdm")

    class TTYErr:
        def __init__(self):
            self.parts = []

        def write(self, s):
            self.parts.append(s)

        def flush(self):
            pass

        def isatty(self):
            return True

    fake = TTYErr()
    monkeypatch.setattr(sys, "stderr", fake)
    argv = ["train", "--epochs", "1", "--train-samples", "64", "--test-samples", "20"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    assert "epoch 1/1" in "".join(fake.parts)  # the bar's description
    fake.parts.clear()
    assert main([*argv, "--quiet", "--out", str(tmp_path / "b")]) == 0
    assert "".join(fake.parts) == ""
    assert "epoch   1/1" in capsys.readouterr().out  # the per-epoch line is on stdout


# --- interrupts, divergence and resumed history (the "Hardening" issue) ------------------

SIGNAL_RUN = ["-q", "--epochs", "4", "--schedule", "constant", "--seed", "3",
              "--train-samples", "1000", "--test-samples", "100"]


def _spawn_train(out, *argv):
    import tapegrad as tg

    root = os.path.dirname(os.path.dirname(os.path.abspath(tg.__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-u", "-m", "tapegrad", "train", "--out", out,
                             *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _interrupt_after_epoch_1(out, n_signals=1, pause=0.05, gap=0.002):
    """Run `tapegrad train` in a subprocess, send SIGINT(s) once its `epoch 1/`
    line is out; ``(exit status, stderr)``. A hang is killed after 60 s."""
    import signal
    import threading
    import time

    proc = _spawn_train(out, *SIGNAL_RUN)
    timer = threading.Timer(60, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            if line.startswith("epoch   1/"):
                time.sleep(pause)  # let epoch 2 start: the signal lands mid-epoch
                for _ in range(n_signals):
                    proc.send_signal(signal.SIGINT)
                    time.sleep(gap)
                break
        proc.stdout.read()
        err = proc.stderr.read()
        return proc.wait(), err
    finally:
        timer.cancel()
        proc.kill()


def _ckpt_steps(ckpt):
    steps = {int(s["step"]) for s in ckpt["optimizer"]["state"].values()}
    assert len(steps) == 1
    return steps.pop(), int(ckpt["model"]["1.num_batches_tracked"].item())


def test_sigint_keeps_end_of_epoch_checkpoint_and_resume_repeats_the_run(tmp_path,
                                                                         onednn_defaults):
    # (onednn_defaults: the interrupted run is a child process, which runs oneDNN's
    # size rule as shipped; the in-process runs compared with it bit for bit must too)
    out = str(tmp_path / "run")
    rc, err = _interrupt_after_epoch_1(out)
    assert rc == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "holds the end of epoch 1" in err and "--resume" in err
    ckpt = tapegrad.load(os.path.join(out, "model.npz"))
    steps_per_epoch = -(-1000 // 32)
    # the state of the end of epoch 1, not of the step the signal hit
    assert ckpt["epoch"] == 1
    assert _ckpt_steps(ckpt) == (steps_per_epoch, steps_per_epoch)
    assert [int(r["epoch"]) for r in _metrics(out)] == [1]

    assert main(["train", "--out", out, "--epochs", "4", "--resume", "-q"]) == 0
    straight = str(tmp_path / "straight")
    assert main(["train", "--out", straight, *SIGNAL_RUN]) == 0
    a, b = _metrics(out), _metrics(straight)
    assert [int(r["epoch"]) for r in a] == [1, 2, 3, 4]
    for ra, rb in zip(a, b):
        for k in ("train_loss", "test_loss", "test_acc"):
            assert ra[k] == rb[k]
    wa = tapegrad.load(os.path.join(out, "model.npz"))
    wb = tapegrad.load(os.path.join(straight, "model.npz"))
    assert _ckpt_steps(wa) == _ckpt_steps(wb) == (4 * steps_per_epoch,) * 2
    for k, v in wb["model"].items():  # bit for bit
        assert np.array_equal(wa["model"][k].numpy(), v.numpy()), k


@pytest.mark.parametrize("gap", [0.0005, 0.02])
def test_double_sigint_no_traceback_and_a_consistent_checkpoint(tmp_path, gap):
    # the second Ctrl-C lands while the run shuts down (0.5 ms: while the interpreter
    # waits for BLAS threads, which once killed the process by SIGINT, exit status -2)
    out = str(tmp_path / "run")
    rc, err = _interrupt_after_epoch_1(out, n_signals=2, pause=0.0, gap=gap)
    assert rc == 130, err
    assert "Traceback" not in err and "Error" not in err
    # the whole message, once: the second signal does not cut it short
    assert err.count("\n") == 1 and err.rstrip().endswith("--resume"), err
    ckpt = tapegrad.load(os.path.join(out, "model.npz"))
    epoch = ckpt["epoch"]
    assert epoch >= 1 and len(ckpt["history"]) == epoch
    assert _ckpt_steps(ckpt) == (epoch * -(-1000 // 32),) * 2
    assert [int(r["epoch"]) for r in _metrics(out)] == list(range(1, epoch + 1))
    assert not [n for n in os.listdir(out) if ".tmp" in n]


def test_sigint_during_the_checkpoint_save_is_held_until_it_is_written(tmp_path, capsys,
                                                                       monkeypatch):
    import signal

    import tapegrad.serialization as ser

    real_save = ser.save

    def save_hit_twice(obj, f):  # two Ctrl-C while the checkpoint is being written
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        return real_save(obj, f)

    monkeypatch.setattr(ser, "save", save_hit_twice)
    out = str(tmp_path / "run")
    assert main(["train", "--out", out, "--epochs", "3", *QUICK]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and "holds the end of epoch 1" in err
    ckpt = tapegrad.load(os.path.join(out, "model.npz"))
    assert ckpt["epoch"] == 1 and [int(r["epoch"]) for r in _metrics(out)] == [1]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigint_in_the_first_epoch_saves_nothing(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_mod, "train_epoch", interrupted)
    out = str(tmp_path / "run")
    assert main(["train", "--out", out, "--epochs", "3", *QUICK]) == 130
    assert "no epoch completed, nothing saved" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(out, "model.npz"))


def test_non_finite_loss_stops_keeps_the_last_good_checkpoint_exit_1(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main(["train", "--out", out, "--epochs", "1", *QUICK]) == 0
    path = os.path.join(out, "model.npz")
    with open(path, "rb") as f:
        good = f.read()
    capsys.readouterr()
    assert main(["train", "--out", out, "--epochs", "3", "--resume", "--lr", "1e30",
                 "-q"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "diverged in epoch 2 (--lr 1e+30" in err and "at step" in err
    assert "--lr 1e+29" in err
    assert "holds the end of epoch 1 (unchanged)" in err and "lower --lr" in err
    with open(path, "rb") as f:
        assert f.read() == good
    assert [int(r["epoch"]) for r in _metrics(out)] == [1]

    fresh = str(tmp_path / "fresh")
    assert main(["train", "--out", fresh, "--epochs", "2", "--lr", "1e30", *QUICK]) == 1
    assert "nothing saved" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(fresh, "model.npz"))


def test_weights_non_finite_after_the_last_step_are_not_saved(tmp_path, capsys,
                                                             monkeypatch):
    real = train_mod.train_epoch

    def poisoned(model, *args, **kwargs):
        result = real(model, *args, **kwargs)
        next(iter(model.parameters())).array[...] = np.nan  # the last step overflowed
        return result

    monkeypatch.setattr(train_mod, "train_epoch", poisoned)
    out = str(tmp_path / "run")
    assert main(["train", "--out", out, "--epochs", "2", *QUICK]) == 1
    assert "became non-finite by the end of the epoch" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(out, "model.npz"))


def _two_epochs(tmp_path):
    out = str(tmp_path / "run")
    assert main(["train", "--out", out, "--epochs", "2", "--schedule", "constant",
                 *QUICK]) == 0
    return out


@pytest.mark.parametrize("damage", ["lagging", "empty"])
def test_resumed_history_is_continuous(tmp_path, damage):
    out = _two_epochs(tmp_path)
    before = _metrics(out)
    csv_path = os.path.join(out, "metrics.csv")
    with open(csv_path) as f:
        lines = f.readlines()
    # a kill between the checkpoint's rename and metrics.csv's (lagging), or the
    # truncated file an in-place rewrite left (empty), plus the killed writers' temps
    with open(csv_path, "w") as f:
        f.writelines(lines[:2] if damage == "lagging" else [])
    stale = ["metrics.csv.tmp999999999", "model.npz.tmp999999999"]
    for name in stale:
        with open(os.path.join(out, name), "w") as f:
            f.write("partial")
    assert main(["train", "--out", out, "--epochs", "4", "--resume", "-q"]) == 0
    after = _metrics(out)
    assert [int(r["epoch"]) for r in after] == [1, 2, 3, 4]
    assert after[:2] == before
    assert not set(stale) & set(os.listdir(out))


def test_resume_of_a_checkpoint_without_history_reads_metrics_csv(tmp_path):
    out = _two_epochs(tmp_path)
    path = os.path.join(out, "model.npz")
    ckpt = tapegrad.load(path)
    del ckpt["history"]  # as written before the history entry existed
    tapegrad.save(ckpt, path)
    before = _metrics(out)
    assert main(["train", "--out", out, "--epochs", "3", "--resume", "-q"]) == 0
    assert _metrics(out)[:2] == before and len(_metrics(out)) == 3


def test_resume_applies_hyperparameters_given_again(tmp_path):
    out = _two_epochs(tmp_path)
    assert main(["train", "--out", out, "--epochs", "3", "--resume", "-q",
                 "--weight-decay", "0.25"]) == 0
    groups = tapegrad.load(os.path.join(out, "model.npz"))["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.25]


def test_resume_with_another_optimizer_refused(tmp_path, capsys):
    out = _two_epochs(tmp_path)
    assert main(["train", "--out", out, "--epochs", "3", "--resume", "--optimizer",
                 "sgd"]) == 2
    assert "trained --optimizer adam, not sgd" in capsys.readouterr().err
