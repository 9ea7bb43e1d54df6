"""tapegrad.distributed: one process without MPI, collectives on 2 ranks, failures."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_jobs import worker

import tapegrad as tg
import tapegrad.distributed as dist
from tapegrad.distributed.group import DEFAULT_TIMEOUT, timeout_from_env
from tapegrad.errors import DeviceError


@pytest.fixture
def single(monkeypatch):
    """World size 1 as a plain ``python script.py`` sees it (no launcher variables)."""
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS",
                "MV2_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    yield
    dist.destroy_process_group()


def test_world_size_one_needs_no_mpi(single):
    assert not dist.is_initialized()
    with pytest.raises(dist.DistributedError, match="init_process_group"):
        dist.get_rank()
    dist.init_process_group("mpi")
    assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "mpi")
    t = tg.tensor([1.0, 2.0])
    v = t.version
    dist.all_reduce(t, op="mean")
    dist.broadcast(t, 0)
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])
    assert t.version > v  # in place, as PyTorch: a saved copy would be refused
    parts = [tg.zeros(2)]
    dist.all_gather(parts, t)
    np.testing.assert_array_equal(parts[0].numpy(), [1.0, 2.0])
    dist.barrier()
    with pytest.raises(dist.DistributedError, match="already initialized"):
        dist.init_process_group("mpi")


def test_argument_errors(single):
    with pytest.raises(dist.DistributedError, match="unknown backend 'gloo'"):
        dist.init_process_group("gloo")
    with pytest.raises(dist.DistributedError, match="world_size=4"):
        dist.init_process_group("mpi", world_size=4)
    dist.init_process_group("mpi")
    with pytest.raises(ValueError, match="unknown op"):
        dist.all_reduce(tg.ones(2), op="median")
    with pytest.raises(TypeError, match="mean needs a floating-point"):
        dist.all_reduce(tg.tensor([1, 2]), op="mean")
    with pytest.raises(ValueError, match="one per rank"):
        dist.all_gather([tg.ones(2), tg.ones(2)], tg.ones(2))
    # another dtype is refused (as PyTorch does), never cast; nothing is written
    out = tg.zeros(2, dtype=tg.float64)
    with pytest.raises(ValueError, match=r"tensor_list\[0\] is float64, the input float32"):
        dist.all_gather([out], tg.ones(2, dtype=tg.float32))
    np.testing.assert_array_equal(out.numpy(), [0.0, 0.0])
    with pytest.raises(ValueError, match="src=3"):
        dist.broadcast(tg.ones(2), src=3)


def test_timeout_setting(monkeypatch):
    import datetime

    monkeypatch.delenv("TAPEGRAD_DIST_TIMEOUT", raising=False)
    assert timeout_from_env(None) == DEFAULT_TIMEOUT
    assert timeout_from_env(datetime.timedelta(minutes=2)) == 120.0
    monkeypatch.setenv("TAPEGRAD_DIST_TIMEOUT", "7.5")
    assert timeout_from_env(None) == 7.5
    monkeypatch.setenv("TAPEGRAD_DIST_TIMEOUT", "soon")
    with pytest.raises(dist.DistributedError, match="TAPEGRAD_DIST_TIMEOUT"):
        timeout_from_env(None)
    with pytest.raises(dist.DistributedError, match="positive"):
        timeout_from_env(0)


@pytest.mark.filterwarnings("ignore::UserWarning")  # CuPy's "nccl library could not be loaded"
def test_nccl_without_gpu_is_a_device_error(single):
    if tg.cupy_available():
        pytest.skip("a GPU is present: the NCCL path would run")
    with pytest.raises(DeviceError, match="nccl backend"):
        dist.init_process_group("nccl")
    assert not dist.is_initialized()


def test_collectives_on_two_ranks(tmp_path):
    out = tmp_path / "c.npz"
    proc, _ = worker(2, "collectives", str(out))
    assert proc.returncode == 0, proc.stderr
    got = np.load(out)
    assert bool(got["same_on_all_ranks"])
    x = np.array([1.0, -2.0, 3.0])
    np.testing.assert_allclose(got["sum"], x * 2 + x * 3)
    np.testing.assert_allclose(got["mean"], (x * 2 + x * 3) / 2)
    np.testing.assert_allclose(got["max"], np.maximum(x * 2, x * 3))
    np.testing.assert_allclose(got["min"], np.minimum(x * 2, x * 3))
    np.testing.assert_allclose(got["product"], x * 2 * x * 3)
    np.testing.assert_array_equal(got["int_sum"], [3, 20])
    assert got["half_sum"].dtype == np.float16
    np.testing.assert_array_equal(got["half_sum"], [1.5, 4.5])
    np.testing.assert_array_equal(got["bool_max"], [True, True, False])  # any
    np.testing.assert_array_equal(got["bool_min"], [False, True, False])  # all
    np.testing.assert_array_equal(got["broadcast"], np.arange(4.0) + 10)
    np.testing.assert_array_equal(got["all_gather"], [np.zeros((2, 2)), np.ones((2, 2))])
    np.testing.assert_array_equal(got["objects"], [0, 1])
    np.testing.assert_array_equal(got["bcast_object"], ["from 1"])


def test_exception_on_one_rank_ends_the_job():
    proc, seconds = worker(2, "raise", timeout=60)
    assert proc.returncode != 0
    assert seconds < 30
    assert "rank 1: RuntimeError: boom on purpose" in proc.stderr
    assert "rank 0 should not get here" not in proc.stdout


def test_timeout_names_where_the_missing_rank_waits():
    proc, seconds = worker(3, "timeout", timeout=60)
    assert proc.returncode != 0 and seconds < 30
    assert "CollectiveTimeout" in proc.stderr
    assert "all_reduce(sum) of (2,) float32 #1 on group 'world' timed out on rank 0" \
        in proc.stderr
    assert "rank(s) 1, 2 did not arrive; rank 1 is waiting in all_reduce(sum) of (2,) " \
           "float32 #1 on group 'world.1'; rank(s) 2 gave no answer" in proc.stderr


def test_ranks_in_different_collectives_fail_in_seconds():
    # rank 0 in an all_reduce, rank 1 in a barrier of another group: neither can go on;
    # found by the census after ~1 s, not at the 60 s timeout
    proc, seconds = worker(2, "deadlock", timeout=60)
    assert proc.returncode != 0 and seconds < 20, seconds
    assert "CollectiveDeadlock" in proc.stderr
    assert "rank 0 waits in all_reduce(sum) of (2,) float32 #1 on group 'world', which " \
           "rank 1 never started (started none there); rank 1 waits in barrier #1 on group " \
           "'world.1', which rank 0 never started" in proc.stderr


def test_timeout_names_a_silent_rank():
    proc, seconds = worker(2, "silent", timeout=60)
    assert proc.returncode != 0 and seconds < 30
    assert "rank(s) 1 did not arrive" in proc.stderr
    assert "rank(s) 1 gave no answer" in proc.stderr


def test_many_ranks_without_mpi4py_is_a_clear_error(single, monkeypatch):
    import sys

    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")  # as if started by mpirun -n 2
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # not installed
    monkeypatch.setitem(sys.modules, "mpi4py.MPI", None)
    with pytest.raises(dist.DistributedError, match=r"pip install 'tapegrad\[mpi\]'"):
        dist.init_process_group("mpi")
    assert not dist.is_initialized()


def test_lazy_attribute():
    assert tg.distributed is dist
