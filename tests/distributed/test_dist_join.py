"""Uneven inputs (``ddp.join()``) and ranks that leave the job: 5 batches on rank 0,
4 on rank 1. Every job has a timeout; a failure must come in seconds, not at the
collective timeout (120 s in these workers)."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_jobs import worker
from mpi_worker import join_model, join_reference

import tapegrad.distributed as dist
from tapegrad import nn

FAST = 20  # seconds: a job that fails must fail well inside this (its timeout is 120 s)


@pytest.mark.parametrize("divide", [True, False])
def test_join_equals_the_arithmetic(tmp_path, divide):
    out = tmp_path / "j.npz"
    proc, _ = worker(2, "uneven", "join", str(out), "1" if divide else "0", timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = np.load(out)
    assert bool(got["same_on_all_ranks"])  # the final broadcast: parameters and buffers
    want = join_reference(divide)
    other = join_reference(not divide)
    start = {k: v.numpy() for k, v in join_model().state_dict().items()}
    for k, w in want.items():
        np.testing.assert_allclose(got[k], w, rtol=0, atol=1e-12, err_msg=k)
    # the 5th step (rank 0 alone, rank 1 shadowing) is in there, with its divisor
    assert max(float(np.abs(want[k] - other[k]).max()) for k in want) > 1e-3
    assert max(float(np.abs(want[k] - start[k]).max()) for k in want) > 1e-2


def test_join_throw_on_early_termination_raises_on_every_rank(tmp_path):
    out = tmp_path / "t.npz"
    proc, seconds = worker(2, "uneven", "throw", str(out), timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = np.load(out)
    assert "1 rank(s) exhausted their inputs" in str(got["rank0|error"])
    assert "rank 1 exhausted its inputs while rank(s) 0 still train" in str(got["rank1|error"])
    # both stopped after 4 steps: the same parameters (buffers differ, as in PyTorch)
    want = join_reference(True, counts=(4, 4))
    for k in ("0.weight", "0.bias", "3.weight", "3.bias"):
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-12, err_msg=k)


def test_uneven_without_join_names_the_rank_that_ended():
    proc, seconds = worker(2, "uneven", "noj_end", timeout=60)
    assert proc.returncode != 0 and seconds < FAST, (seconds, proc.stderr[-2000:])
    assert "RankExitedError" in proc.stderr
    assert "cannot finish on rank 0: rank 1 ended its process after starting 24 " \
           "collective(s) on group 'world.1'" in proc.stderr
    assert "with ddp.join():" in proc.stderr


def test_uneven_without_join_then_a_collective_is_a_deadlock(tmp_path):
    # rank 1 leaves its loop and gathers the results; rank 0 waits in its 5th step
    proc, seconds = worker(2, "uneven", "noj_gather", str(tmp_path / "x.npz"), timeout=60)
    assert proc.returncode != 0 and seconds < FAST, (seconds, proc.stderr[-2000:])
    assert "CollectiveDeadlock" in proc.stderr
    assert "rank 0 waits in DistributedDataParallel gradient bucket 0 (18 float64) #27 on " \
           "group 'world.1', which rank 1 never started (started 24 there" in proc.stderr
    assert "rank 1 waits in all_gather_object #1 on group 'world', which rank 0 never " \
           "started" in proc.stderr


def test_a_rank_that_exits_early_is_named_in_seconds():
    proc, seconds = worker(2, "leave_early", "sys_exit", timeout=60)
    assert proc.returncode != 0 and seconds < FAST, (seconds, proc.stderr[-2000:])
    assert "rank 1 ended its process after starting 5 collective(s) on group " \
           "'world.1'" in proc.stderr
    assert "rank 0 should not get here" not in proc.stdout


def test_a_rank_that_exits_without_finalising_ends_the_job():
    # os._exit skips MPI_Finalize: Open MPI's launcher ends the job, naming the rank
    proc, seconds = worker(2, "leave_early", "os_exit", timeout=60)
    assert proc.returncode != 0 and seconds < FAST, (seconds, proc.stderr[-2000:])
    assert "rank 1" in proc.stderr + proc.stdout
    assert "rank 0 should not get here" not in proc.stdout


@pytest.fixture
def world1(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(var, raising=False)
    dist.init_process_group("mpi")
    yield
    dist.destroy_process_group()


def test_join_on_one_rank_is_the_plain_loop(world1):
    import tapegrad as tg

    ddp = nn.parallel.DistributedDataParallel(join_model())
    with ddp.join():
        ddp(tg.ones(4, 3, dtype=tg.float64)).sum().backward()
    assert ddp._join is None and ddp.module[0].weight.grad is not None
    with ddp.join(enable=False):
        pass
