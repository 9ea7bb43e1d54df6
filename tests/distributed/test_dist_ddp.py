"""DistributedDataParallel: 2 ranks x 16 samples == 1 process x 32, and its checks."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_jobs import worker
from mpi_worker import model_and_data, reference

import tapegrad as tg
import tapegrad.distributed as dist
from tapegrad import nn


def _compare(tmp_path, dtype, micro, tol, sizes=()):
    out = tmp_path / "ddp.npz"
    proc, _ = worker(2, "equiv", dtype, str(micro), str(out), *sizes)
    assert proc.returncode == 0, proc.stderr
    got = np.load(out)
    assert bool(got["same_on_all_ranks"])
    ref = reference(dtype, micro)
    start, _, _ = model_and_data(np.dtype(dtype))
    moved = 0.0
    for k, want in ref.items():
        assert got[k].dtype == want.dtype, k
        np.testing.assert_allclose(got[k], want, rtol=0, atol=tol, err_msg=k)
        moved = max(moved, float(np.abs(want - start.state_dict()[k].numpy()).max()))
    assert moved > 1e-2  # the 5 steps really trained (and the running statistics moved)


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("float64", 1e-10)])
def test_two_ranks_equal_one_process(tmp_path, dtype, tol):
    _compare(tmp_path, dtype, 1, tol)


def test_no_sync_accumulation_equals_one_process(tmp_path):
    _compare(tmp_path, "float64", 2, 1e-10)


@pytest.mark.parametrize("sizes", ["20,12", "32,0"])
def test_unequal_per_rank_batches(tmp_path, sizes):
    # SyncBatchNorm over 20 + 12 samples (or all on rank 0, an empty batch on rank 1),
    # the loss weighted by the global count
    _compare(tmp_path, "float64", 1, 1e-10, (sizes,))


def test_shape_mismatch_names_rank_and_parameter():
    proc, seconds = worker(2, "mismatch", timeout=60)
    assert proc.returncode != 0 and seconds < 30
    assert ("rank 1's parameter '2.weight' has shape (3, 6) float32, rank 0's (4, 6) "
            "float32") in proc.stderr


def test_broadcast_at_wrap_and_unused_parameters(tmp_path):
    out = tmp_path / "u.npz"
    proc, _ = worker(2, "unused", str(out))
    assert proc.returncode == 0, proc.stderr
    g = np.load(out)
    assert bool(g["same_weights"]) and bool(g["rank0_weights"])  # broadcast at wrap time
    assert bool(g["comm_freed"])  # a dropped wrapper frees its communicator
    np.testing.assert_allclose(g["m.1.bias"], [2.0, 2.0])  # used by both: average
    np.testing.assert_allclose(g["m.2.bias"], [3.0, 3.0])  # rank 0's 6, rank 1's zeros
    assert np.isnan(g["m.3.bias"]).all()  # used by no rank: .grad stays None


def test_pytorch_semantics_on_two_ranks(tmp_path):
    out = tmp_path / "s.npz"
    proc, _ = worker(2, "semantics", str(out))
    assert proc.returncode == 0, proc.stderr
    got = np.load(out)
    cases = {k.split("|")[1] for k in got.files if k.endswith("|got")}
    assert cases == {"two_synced_backwards", "forward_outside_no_sync",
                     "forward_inside_no_sync", "two_forwards_find_unused",
                     "dataclass_output_find_unused"}
    for key in got.files:
        if key.endswith("|got"):  # every parameter of every case, on both ranks
            want = got[key[:-3] + "want"]
            np.testing.assert_allclose(got[key], want, rtol=1e-12, atol=1e-12, err_msg=key)
    # local gradients differ between the ranks (else averaging could not be seen)
    assert not np.allclose(got["rank0|forward_inside_no_sync|mid.bias|got"],
                           got["rank1|forward_inside_no_sync|mid.bias|got"])
    for r in (0, 1):
        assert "'extra.bias' (4,) got its gradient after its bucket was reduced" in \
            str(got[f"rank{r}|late_gradient_error"])
    np.testing.assert_array_equal(got["rank0|frozen_weight"], got["rank1|frozen_weight"])
    # eval mode after training: rank 0's BatchNorm running statistics on every rank
    np.testing.assert_array_equal(got["rank0|eval_output"], got["rank1|eval_output"])


@pytest.fixture
def world1(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(var, raising=False)
    dist.init_process_group("mpi")
    yield
    dist.destroy_process_group()


def test_one_rank_is_the_plain_module(world1):
    model, x, y = model_and_data(np.float64)
    twin, _, _ = model_and_data(np.float64)
    ddp = nn.parallel.DistributedDataParallel(twin)
    assert ddp.module is twin
    assert list(ddp.state_dict()) == [f"module.{k}" for k in model.state_dict()]
    ce = nn.CrossEntropyLoss()
    for half in (slice(0, 16), slice(16, 32)):  # the same accumulation without DDP
        ce(model(tg.tensor(x[half])), tg.tensor(y[half])).backward()
    with ddp.no_sync():
        ce(ddp(tg.tensor(x[:16])), tg.tensor(y[:16])).backward()
    ce(ddp(tg.tensor(x[16:])), tg.tensor(y[16:])).backward()
    for (k, p), q in zip(model.named_parameters(), twin.parameters()):
        np.testing.assert_array_equal(q.grad.numpy(), p.grad.numpy(), err_msg=k)
    ddp.module.load_state_dict(model.state_dict())  # the inner module's keys
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0)


def test_buckets_reverse_order_first_small(world1):
    from tapegrad.nn.parallel import _assign_buckets

    layers = nn.Sequential(nn.Linear(512, 512), nn.Linear(512, 1024), nn.Linear(1024, 8))
    params = list(layers.parameters())
    buckets = _assign_buckets(params, 4 * 1024 * 1024)
    order = [p for b in buckets for p in b.params]
    assert order == params[::-1]  # the last layer's gradients come first
    assert sum(p.array.nbytes for p in buckets[0].params) < 3 * 1024 * 1024
    assert len(buckets) == 2


def test_a_dropped_wrapper_leaves_no_hook_and_is_collected(world1):
    import gc
    import weakref

    from tapegrad import engine

    model = tg.nn.Linear(3, 2)
    ddp = tg.nn.parallel.DistributedDataParallel(model)
    ref = weakref.ref(ddp)
    assert engine._post_hooks[id(model.weight)][1]
    del ddp
    gc.collect()
    assert ref() is None
    assert not engine._post_hooks[id(model.weight)][1]
    model(tg.ones(4, 3)).sum().backward()  # plain backward still works
    assert model.weight.grad is not None
