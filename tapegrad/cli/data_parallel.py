"""``mpirun -n N tapegrad train``: the ranks of one training run.

A :class:`Job` is what ``train.py`` asks about the ranks: it is one process
(``size == 1``, every method a pass-through) unless an MPI launcher started
this one. Then rank 0 alone reads the settings and checkpoint (broadcast to
the others, so ``--resume`` needs the run folder on rank 0's machine only),
prints, and writes the run folder; every rank trains a replica of the model
(BatchNorm converted to SyncBatchNorm, wrapped in DistributedDataParallel)
on its DistributedSampler shard, ``--batch-size`` being the global batch. The
loss each step and the test metrics are the same on every rank, so all ranks
take the same decisions (a non-finite loss stops them all); an error on any
rank ends the job at once (MPI_Abort) rather than leaving the others waiting.
"""

from __future__ import annotations

import contextlib
import os
import sys

import numpy as np

from ..errors import ArgumentError, TapegradError

__all__ = ["Job"]


class Job:
    def __init__(self, group=None):
        self.group = group
        self.size = 1 if group is None else group.size
        self.rank = 0 if group is None else group.rank
        self.lead = self.rank == 0

    @classmethod
    def start(cls) -> Job:
        """The job this process belongs to (world size 1 when not under mpirun)."""
        from .. import distributed as dist

        if dist.launched_world_size() in (None, 1):
            return cls()
        if not dist.is_initialized():
            dist.init_process_group("mpi")
        return cls(dist.default_group())

    def resolve(self, resolve, args):
        """``resolve(args)`` on rank 0, its result on every rank."""
        if self.size == 1:
            return resolve(args)
        got = resolve(args) if self.lead else None
        config, ckpt = self.group.broadcast_object(got, 0, "broadcast of the run's settings")
        self._check_batch(config)  # before any data is loaded
        return config, ckpt

    def _check_batch(self, config):
        batch = config["batch_size"]
        if batch % self.size:
            raise ArgumentError(f"--batch-size {batch} is the global batch and must split "
                                f"evenly over the {self.size} processes; use a multiple of "
                                f"{self.size}")

    def describe(self, config) -> str | None:
        if self.size == 1:
            return None
        return (f"data-parallel on {self.size} processes ({self.group.backend}): global batch "
                f"{config['batch_size']} = {self.size} x {config['batch_size'] // self.size}")

    def wrap(self, model):
        """The model each rank trains: ``model`` itself, or SyncBatchNorm + DDP around it."""
        if self.size == 1:
            return model
        from .. import nn

        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        # SyncBatchNorm keeps the running statistics equal on all ranks: no need for
        # DDP to broadcast the buffers before every forward
        return nn.parallel.DistributedDataParallel(model, process_group=self.group,
                                                   broadcast_buffers=False)

    def loader(self, dataset, config, device):
        """The training loader: the global ``--batch-size`` split evenly over the ranks."""
        from ..data import DataLoader, DistributedSampler

        batch = config["batch_size"]
        if self.size == 1:
            return DataLoader(dataset, batch, shuffle=True, seed=config["seed"], device=device)
        self._check_batch(config)
        sampler = DistributedSampler(dataset, self.size, self.rank, shuffle=True,
                                     seed=config["seed"])
        return DataLoader(dataset, batch // self.size, sampler=sampler, device=device)

    def average(self, value: float) -> float:
        """The mean of ``value`` over the ranks (the step's loss: one tiny allreduce)."""
        if self.size == 1:
            return value
        buf = np.array([value], np.float64)
        self.group.allreduce(buf, "sum", "the step's loss")
        return float(buf[0]) / self.size

    def seed(self, seed: int) -> int:
        """Per-rank dropout seeds (rank 0 keeps the single-process one)."""
        return seed + 7_919 * self.rank

    @contextlib.contextmanager
    def output(self):
        """Only rank 0 prints: the others' stdout goes to /dev/null (stderr stays)."""
        if self.lead:
            yield
            return
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            yield

    def end(self, status: int) -> int:
        """A rank that stops with a non-zero status takes the whole job down (Open MPI's
        MPI_Finalize would wait for the ranks still training)."""
        if status and self.size > 1:
            self.group.abort(status)
        return status

    def fail(self, exc: BaseException):
        """An exception escaping a rank: one line ``rank N: ...`` and MPI_Abort."""
        if self.size == 1 or (isinstance(exc, SystemExit) and not exc.code):
            raise exc
        from ..distributed import abort_job

        if isinstance(exc, TapegradError):
            msg, status = " ".join(str(exc).split()), getattr(exc, "exit_status", 2)
        elif isinstance(exc, KeyboardInterrupt):
            msg, status = "interrupted", 130
        else:
            import traceback

            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
            msg, status = f"{type(exc).__name__}: {exc}", 1
        abort_job(self.group, f"tapegrad train: error: {msg}", status)
