"""The default process group: ``init_process_group`` and its questions.

>>> import tapegrad.distributed as dist
>>> dist.init_process_group("mpi")     # under mpirun: MPI's ranks; alone: world size 1
>>> dist.get_rank(), dist.get_world_size()
"""

from __future__ import annotations

import sys

from . import failure
from .group import (
    DistributedError,
    LocalGroup,
    ProcessGroup,
    launched_world_size,
    timeout_from_env,
)

__all__ = ["init_process_group", "destroy_process_group", "is_initialized", "is_available",
           "get_rank", "get_world_size", "get_backend", "default_group", "resolve_group"]

BACKENDS = ("mpi", "nccl")
_default: ProcessGroup | None = None


def is_available() -> bool:
    """True: tapegrad.distributed is always importable (MPI is needed only for > 1 rank)."""
    return True


def init_process_group(backend: str = "mpi", timeout=None, *, world_size: int = -1,
                       rank: int = -1, init_method=None, abort_on_error: bool = True) -> None:
    """Join the job's default group: ``"mpi"`` (CPU ranks, mpi4py) or ``"nccl"``
    (CUDA ranks, NCCL through CuPy, bootstrapped over MPI). Started by
    ``mpirun -n N``, the ranks are MPI's; started alone, world size 1 (no MPI
    needed). ``timeout`` (seconds or a timedelta; default ``$TAPEGRAD_DIST_TIMEOUT``
    or 300 s) bounds every collective's wait, then names the missing ranks. With
    ``abort_on_error``, an uncaught exception on any rank aborts the whole job.

    >>> dist.init_process_group("mpi", timeout=60)
    """
    global _default
    if _default is not None:
        raise DistributedError("init_process_group: the default process group is already "
                               "initialized; call destroy_process_group() first")
    name = str(backend).lower()
    if name not in BACKENDS:
        raise DistributedError(f"init_process_group: unknown backend {backend!r}; tapegrad "
                               f"has {', '.join(BACKENDS)} (gloo's role, CPU ranks, is mpi's)")
    if init_method not in (None, "env://", "mpi://"):
        raise DistributedError(f"init_process_group: init_method {init_method!r}: tapegrad's "
                               "ranks always come from the MPI launcher (mpirun), not a URL")
    seconds = timeout_from_env(timeout)
    launched = launched_world_size()
    if launched is None and "mpi4py.MPI" not in sys.modules:
        boot: ProcessGroup = LocalGroup("mpi", seconds)  # one process: no MPI at all
    else:
        from .mpi import init_mpi

        boot = init_mpi(seconds)
    for what, want, got in (("world_size", world_size, boot.size), ("rank", rank, boot.rank)):
        if want not in (-1, None) and want != got:
            raise DistributedError(
                f"init_process_group: {what}={want} but the launcher started this process "
                f"as {what} {got}; drop {what}= (tapegrad takes it from mpirun -n)")
    if name == "nccl":
        from .nccl import NCCLGroup

        group: ProcessGroup = NCCLGroup(boot, seconds)
    else:
        group = boot
    _default = group
    if abort_on_error and group.size > 1:
        failure.install(group)


def destroy_process_group(group=None) -> None:
    """Leave the default group (PyTorch's name); a later init_process_group may rejoin."""
    global _default
    if group is not None and group is not _default:
        group.destroy()
        return
    if _default is not None:
        failure.uninstall()
        _default.destroy()
    _default = None


def is_initialized() -> bool:
    return _default is not None


def default_group() -> ProcessGroup:
    if _default is None:
        raise DistributedError("the default process group is not initialized: call "
                               "tapegrad.distributed.init_process_group('mpi') first")
    return _default


def resolve_group(group) -> ProcessGroup:
    """``group`` itself, or the default group for None."""
    return default_group() if group is None else group


def get_rank(group=None) -> int:
    """This process's rank (0 .. world size - 1)."""
    return resolve_group(group).rank


def get_world_size(group=None) -> int:
    """The number of ranks in the group."""
    return resolve_group(group).size


def get_backend(group=None) -> str:
    return resolve_group(group).backend
