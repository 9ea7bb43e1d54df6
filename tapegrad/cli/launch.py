"""``tapegrad train --nproc N``: start the same command under ``mpirun -n N``.

Open MPI needs ``--allow-run-as-root`` as root and ``--oversubscribe`` for more
ranks than cores; MPICH's launcher takes neither, so the switches are added
only for Open MPI (told apart by ``mpirun --version``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys

from ..errors import ArgumentError

__all__ = ["find_mpirun", "mpirun_command", "launch_train"]


def find_mpirun() -> str | None:
    """mpirun next to this Python (the venv of ``pip install 'tapegrad[mpi]'``), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpirun")
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    return shutil.which("mpirun") or shutil.which("mpiexec")


@functools.lru_cache(maxsize=8)
def _is_open_mpi(mpirun: str) -> bool:
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    text = (out.stdout + out.stderr).lower()
    return "open mpi" in text or "open rte" in text or "prte" in text


def mpirun_command(n: int, command: list[str], mpirun: str | None = None) -> list[str]:
    """``[mpirun, (Open MPI switches), -n, n, *command]``."""
    mpirun = mpirun or find_mpirun()
    if mpirun is None:
        raise ArgumentError("--nproc needs mpirun: pip install 'tapegrad[mpi]' (mpi4py and "
                            "the Open MPI wheel), or put an MPI's mpirun on PATH")
    cmd = [mpirun]
    if _is_open_mpi(mpirun):
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd.append("--oversubscribe")
    return [*cmd, "-n", str(n), *command]


def _train_argv(args) -> list[str]:
    """The ``tapegrad train`` options given in ``args`` again, without --nproc: every
    option with a value, every switch that is on."""
    argv = []
    for key, v in vars(args).items():
        if key in ("command", "nproc") or v is None or v is False:
            continue
        flag = f"--{key.replace('_', '-')}"
        argv += [flag] if v is True else [flag, str(v)]
    return argv


def launch_train(args) -> int:
    """Run ``tapegrad train`` (these options) on ``args.nproc`` MPI ranks; its exit status."""
    n = args.nproc
    if os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE"):
        raise ArgumentError("--nproc: this process already runs under an MPI launcher; drop "
                            "--nproc (mpirun -n N tapegrad train ...) or run without mpirun")
    cmd = mpirun_command(n, [sys.executable, "-m", "tapegrad", "train", *_train_argv(args)])
    env = dict(os.environ)
    if sys.stderr.isatty():  # rank 0's stderr is mpirun's pipe: keep its progress bar
        env["TAPEGRAD_PROGRESS"] = "1"
    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:  # mpirun forwards the signal to the ranks and ends them
        return 130
