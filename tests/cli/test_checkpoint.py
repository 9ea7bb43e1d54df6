"""The checkpoint schema: every bad entry is one line naming the file and the field, exit 2."""

import os

import numpy as np
import pytest

import tapegrad
from tapegrad.cli import main

pytest.importorskip("sklearn")  # the digits dataset ships with scikit-learn

QUICK = ["-q", "--train-samples", "200", "--test-samples", "50"]


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("good"))
    assert main(["train", "--out", out, "--epochs", "1", *QUICK]) == 0
    return tapegrad.load(os.path.join(out, "model.npz"))


def _set(*keys, value):
    def edit(ckpt):
        node = ckpt
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return edit


def _drop(*keys):
    def edit(ckpt):
        node = ckpt
        for k in keys[:-1]:
            node = node[k]
        del node[keys[-1]]
    return edit


def _nan_weight(ckpt):
    ckpt["model"]["0.weight"] = np.full(ckpt["model"]["0.weight"].shape, np.nan, np.float32)


def _bad_adam_buffer(ckpt):
    ckpt["optimizer"]["state"][0]["exp_avg"] = np.zeros(1, np.float32)  # would broadcast


BAD = [
    (_set("epoch", value="three"), "epoch: expected an integer >= 0, got 'three'"),
    (_set("epoch", value=-1), "epoch: expected an integer >= 0, got -1"),
    (_set("epoch", value=True), "epoch: expected an integer >= 0, got True"),
    (_set("args", "lr", value="fast"), "args.lr: expected a number, got 'fast'"),
    (_set("args", "lr", value=float("inf")), "args.lr: must be a finite number > 0"),
    (_set("args", "model", value=3), "args.model: expected one of lenet, mlp, convnet"),
    (_set("args", "seed", value=-2), "args.seed: must be an integer >= 0"),
    (_set("args", "batch_size", value=2.5), "args.batch_size: expected a positive integer"),
    (_set("args", "schedule", value="step"), "args.schedule: expected one of cosine"),
    (_drop("args", "data"), "args.data: missing"),
    (_set("args", value=[1, 2]), "args: expected a dict of settings, got list"),
    (_set("history", value=[]), "history: expected a list of 1 per-epoch rows"),
    (_set("history", 0, "test_acc", value="high"), "history[0].test_acc: expected a finite"),
    (_nan_weight, "model['0.weight']: holds non-finite values"),
    (_set("optimizer", value=5), "optimizer: expected a dict with 'state' and 'param_groups'"),
    (_drop("epoch"), "no 'epoch' entry"),
]


def _write(good, edit, folder):
    """``good`` (a fresh copy through save/load), edited, as ``folder/model.npz``."""
    tapegrad.save(good, os.path.join(folder, "src.npz"))
    ckpt = tapegrad.load(os.path.join(folder, "src.npz"))
    edit(ckpt)
    tapegrad.save(ckpt, os.path.join(folder, "model.npz"))


@pytest.mark.parametrize("command", ["eval", "resume"])
@pytest.mark.parametrize("edit, field", BAD, ids=[b[1][:30] for b in BAD])
def test_bad_checkpoint_entry_one_line_exit_2(good, edit, field, command, tmp_path, capsys):
    _write(good, edit, str(tmp_path))
    argv = (["eval", "--checkpoint", str(tmp_path), "--test-samples", "20"]
            if command == "eval" else
            ["train", "--out", str(tmp_path), "--resume", "--epochs", "3", *QUICK])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert field in err and os.path.join(str(tmp_path), "model.npz") in err


def test_optimizer_buffer_of_the_wrong_shape_refused_on_resume(good, tmp_path, capsys):
    _write(good, _bad_adam_buffer, str(tmp_path))
    assert main(["train", "--out", str(tmp_path), "--resume", "--epochs", "3", *QUICK]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad checkpoint entry optimizer:" in err and "'exp_avg' has shape" in err \
        and "(32, 1, 5, 5)" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("content", [b"hello, not a checkpoint\n", b""])
def test_eval_of_a_file_that_is_not_a_checkpoint(tmp_path, capsys, content):
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    assert main(["eval", "--checkpoint", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a tapegrad train checkpoint" in err
    assert str(path) in err


def test_eval_of_a_plain_npz_or_another_object(tmp_path, capsys):
    plain = tmp_path / "plain.npz"
    np.savez(plain, a=np.zeros(3))
    assert main(["eval", "--checkpoint", str(plain)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    other = tmp_path / "other.npz"
    tapegrad.save([1, 2, 3], str(other))
    assert main(["eval", "--checkpoint", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds a list, not a dict" in err and len(err.splitlines()) == 1


def test_good_checkpoint_passes_the_schema(good, tmp_path, capsys):
    tapegrad.save(good, str(tmp_path / "model.npz"))
    assert main(["eval", "--checkpoint", str(tmp_path), "--test-samples", "20"]) == 0
    assert "1 epoch(s) trained" in capsys.readouterr().out
