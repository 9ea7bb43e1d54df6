"""Run-folder files: atomic writes, Ctrl-C held during them, stale temporaries."""

import os
import signal
import subprocess
import sys

import pytest

from tapegrad.cli.runfiles import RunFolderError, prepare_run_folder, sigint_held, write_atomic


def test_write_atomic_replaces_the_file(tmp_path):
    path = str(tmp_path / "metrics.csv")
    write_atomic(path, lambda fh: fh.write(b"old"))
    write_atomic(path, lambda fh: fh.write(b"new"))
    assert (tmp_path / "metrics.csv").read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["metrics.csv"]


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError])
def test_a_failed_write_keeps_the_old_file_and_no_temp(tmp_path, exc):
    path = str(tmp_path / "metrics.csv")
    write_atomic(path, lambda fh: fh.write(b"epoch 1..3"))

    def half(fh):
        fh.write(b"epo")
        raise exc

    with pytest.raises(exc):
        write_atomic(path, half)
    assert (tmp_path / "metrics.csv").read_bytes() == b"epoch 1..3"
    assert os.listdir(tmp_path) == ["metrics.csv"]


def test_unwritable_target_is_a_run_folder_error(tmp_path):
    with pytest.raises(RunFolderError, match="cannot write .*no_such_dir"):
        write_atomic(str(tmp_path / "no_such_dir" / "metrics.csv"), lambda fh: None)


def test_prepare_removes_only_dead_writers_artefact_temps(tmp_path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        names = [f"model.npz.tmp{dead.pid}", f"metrics.csv.tmp{dead.pid}",
                 f"curves.png.tmp{dead.pid}", f"metrics.csv.tmp{live.pid}",
                 f"notes.txt.tmp{dead.pid}", "model.npz"]
        for n in names:
            (tmp_path / n).write_bytes(b"x")
        removed = prepare_run_folder(str(tmp_path))
        assert sorted(removed) == sorted(names[:3])
        assert sorted(os.listdir(tmp_path)) == sorted(names[3:])
    finally:
        live.kill()
        live.wait()


def test_prepare_creates_the_folder(tmp_path):
    out = tmp_path / "a" / "b"
    assert prepare_run_folder(str(out)) == [] and out.is_dir()


def test_sigint_held_delivers_once_the_block_is_done():
    done = []
    with pytest.raises(KeyboardInterrupt), sigint_held():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        done.append("finished")  # not cut short
    assert done == ["finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigint_held_without_a_signal_is_transparent():
    with sigint_held():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
