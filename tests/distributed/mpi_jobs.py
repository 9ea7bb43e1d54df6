"""Running ``mpirun -n N`` jobs from the tests: found next to the venv's python,
skipped cleanly without mpi4py or mpirun; every job has a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "mpi_worker.py")


def mpirun_path() -> str | None:
    for folder in (os.path.dirname(sys.executable), *os.environ.get("PATH", "").split(os.pathsep)):
        path = os.path.join(folder, "mpirun")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def need_mpi():
    """Skip the test unless mpi4py and mpirun are installed."""
    pytest.importorskip("mpi4py")
    if mpirun_path() is None:
        pytest.skip("mpirun not found (pip install 'tapegrad[mpi]')")


def run_mpi(n: int, args: list[str], timeout: float = 120, env=None):
    """``mpirun -n n python args...``; (CompletedProcess, seconds). The launcher's
    root and oversubscription switches come from tapegrad's own launcher."""
    from tapegrad.cli.launch import mpirun_command

    need_mpi()
    cmd = mpirun_command(n, [sys.executable, *args], mpirun=mpirun_path())
    full_env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                    **(env or {}))
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=full_env, cwd=os.path.dirname(os.path.dirname(HERE)))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} did not end within {timeout} s; output:\n"
                    f"{exc.stdout}\n{exc.stderr}")
    return proc, time.monotonic() - t0


def worker(n: int, *args: str, timeout: float = 120, env=None):
    return run_mpi(n, [WORKER, *args], timeout, env)
