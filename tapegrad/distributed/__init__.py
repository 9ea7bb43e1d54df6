"""Data-parallel training across processes and machines (PyTorch's ``torch.distributed``).

Two backends, no home-made transport: ``"mpi"`` (CPU ranks, mpi4py; any MPI:
``pip install 'tapegrad[mpi]'`` brings Open MPI) and ``"nccl"`` (CUDA ranks,
NCCL through CuPy, bootstrapped over MPI; unverified). Run with
``mpirun -n 2 python train.py``; started alone, a script sees world size 1 and
needs no MPI at all.

>>> import tapegrad.distributed as dist
>>> dist.init_process_group("mpi")
>>> model = nn.parallel.DistributedDataParallel(model)       # gradients averaged
>>> sampler = tapegrad.data.DistributedSampler(dataset)     # a shard per rank

An uncaught exception on any rank prints ``rank N: <error>`` and aborts the
whole job; a collective that can never finish (a rank it needs has exited:
:class:`RankExitedError`; ranks wait in different collectives:
:class:`CollectiveDeadlock`) fails within seconds; one that waits past the
timeout names the ranks that did not arrive (see :mod:`tapegrad.distributed.mpi`).
Uneven inputs (ranks with different numbers of batches) need
``with ddp.join():`` around the training loop.
"""

from .collectives import (
    ReduceOp,
    Work,
    all_gather,
    all_gather_object,
    all_reduce,
    barrier,
    broadcast,
    broadcast_object_list,
)
from .failure import abort_job
from .group import (
    CollectiveDeadlock,
    CollectiveTimeout,
    DistributedError,
    ProcessGroup,
    RankExitedError,
    launched_world_size,
)
from .world import (
    default_group,
    destroy_process_group,
    get_backend,
    get_rank,
    get_world_size,
    init_process_group,
    is_available,
    is_initialized,
)

__all__ = [
    "init_process_group", "destroy_process_group", "is_initialized", "is_available",
    "get_rank", "get_world_size", "get_backend", "default_group", "all_reduce", "broadcast",
    "all_gather", "barrier", "all_gather_object", "broadcast_object_list", "ReduceOp", "Work",
    "ProcessGroup", "DistributedError", "CollectiveTimeout", "RankExitedError",
    "CollectiveDeadlock", "launched_world_size",
    "abort_job",
]
