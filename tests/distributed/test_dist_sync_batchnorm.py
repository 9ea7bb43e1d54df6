"""SyncBatchNorm in one process: its Function is batch norm (values, gradients,
running statistics); the conversion keeps parameters, buffers and order. The
2-rank global-batch equality is in test_dist_ddp.py."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_jobs import worker

import tapegrad as tg
from tapegrad import nn, ops
from tapegrad.distributed.group import LocalGroup
from tapegrad.errors import GraphError
from tapegrad.nn.sync_batchnorm import SyncBatchNormFunction
from tapegrad.testing import gradcheck


def _sync(x, w, b, rm=None, rv=None):
    return SyncBatchNormFunction.apply(x, w, b, running_mean=rm, running_var=rv,
                                       momentum=0.1, eps=1e-5, group=LocalGroup())


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5), (3, 2, 4, 4)])
def test_function_is_batch_norm(shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape) * 3 + 100  # a large mean: the two-pass statistics
    c = shape[1]
    w, b = rng.standard_normal(c), rng.standard_normal(c)
    rm, rv = tg.zeros(c, dtype=tg.float64), tg.ones(c, dtype=tg.float64)
    rm2, rv2 = tg.zeros(c, dtype=tg.float64), tg.ones(c, dtype=tg.float64)
    xs = [tg.tensor(x, requires_grad=True) for _ in range(2)]
    ws = [tg.tensor(w, requires_grad=True) for _ in range(2)]
    bs = [tg.tensor(b, requires_grad=True) for _ in range(2)]
    g = tg.tensor(rng.standard_normal(shape))
    y1 = _sync(xs[0], ws[0], bs[0], rm, rv)
    y2 = ops.batch_norm(xs[1], rm2, rv2, ws[1], bs[1], training=True)
    np.testing.assert_allclose(y1.numpy(), y2.numpy(), atol=1e-12)
    (y1 * g).sum().backward()
    (y2 * g).sum().backward()
    for a, c2 in ((xs, "x"), (ws, "weight"), (bs, "bias")):
        np.testing.assert_allclose(a[0].grad.numpy(), a[1].grad.numpy(), atol=1e-10, err_msg=c2)
    np.testing.assert_allclose(rm.numpy(), rm2.numpy(), atol=1e-12)
    np.testing.assert_allclose(rv.numpy(), rv2.numpy(), atol=1e-12)


def test_gradcheck_and_float32():
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((5, 3, 2)), rng.standard_normal(3), rng.standard_normal(3)
    gradcheck(lambda x, w, b: _sync(x, w, b), [x, w, b])
    y = _sync(tg.tensor(x.astype(np.float32)), None, None)
    assert y.dtype == np.float32


def test_no_double_backward():
    x = tg.tensor(np.random.default_rng(2).standard_normal((4, 2)), requires_grad=True)
    (gx,) = tg.grad(_sync(x, None, None).sin().sum(), x)  # first order is fine
    assert gx.shape == (4, 2)
    with pytest.raises(GraphError, match="create_graph"):
        tg.grad(_sync(x, None, None).sin().sum(), x, create_graph=True)


def test_too_few_values():
    with pytest.raises(ValueError, match="more than one value"):
        _sync(tg.ones(1, 3), None, None)


def test_convert_keeps_parameters_buffers_and_order():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(),
                          nn.Sequential(nn.Flatten(), nn.BatchNorm1d(8)))
    model[1].running_mean.array[...] = 5.0
    model.eval()
    bn, bn1 = model[1], model[3][1]
    keys = list(model.state_dict())
    conv = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert conv is model  # converted in place below the top
    assert isinstance(model[1], nn.SyncBatchNorm) and isinstance(model[3][1], nn.SyncBatchNorm)
    assert model[1].weight is bn.weight and model[1].running_mean is bn.running_mean
    assert model[3][1].bias is bn1.bias
    assert not model[1].training
    assert [n for n, _ in model.named_children()] == ["0", "1", "2", "3"]
    assert list(model.state_dict()) == keys  # a BatchNorm checkpoint loads as it was
    single = nn.SyncBatchNorm.convert_sync_batchnorm(nn.BatchNorm1d(4, momentum=0.3))
    assert isinstance(single, nn.SyncBatchNorm) and single.momentum == 0.3


def test_module_without_group_is_batch_norm():
    tg.manual_seed(0)
    x = tg.randn(8, 3, 2, 2)
    a, b = nn.SyncBatchNorm(3), nn.BatchNorm2d(3)
    np.testing.assert_allclose(a(x).numpy(), b(x).numpy())
    np.testing.assert_allclose(a.running_var.numpy(), b.running_var.numpy())
    assert int(a.num_batches_tracked.array) == 1


def test_two_ranks_equal_torch_on_the_concatenated_batch(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "t.npz"
    proc, _ = worker(2, "sync_bn_vs_torch", str(out), timeout=180)
    assert proc.returncode == 0, proc.stderr
    worst = np.load(out)
    for opts in ("default", "momentum_none", "no_affine", "no_stats", "momentum_eps"):
        for dtype, tol in (("float64", 1e-11), ("float32", 2e-5)):
            keys = [k for k in worst.files if k.startswith(f"{opts}|{dtype}|")]
            assert {k.split("|")[2] for k in keys} >= {"y", "dx", "eval_dx"}
            for k in keys:
                assert float(worst[k]) <= tol, (k, float(worst[k]))
    assert "momentum_none|float64|running_var" in worst.files
    assert "no_affine|float64|dparams" not in worst.files


def test_checkpoint_recomputation_updates_running_stats_once(tmp_path):
    out = tmp_path / "c.npz"
    proc, _ = worker(2, "checkpointed_sync_bn", str(out))
    assert proc.returncode == 0, proc.stderr
    got = np.load(out)
    assert int(got["ckpt_num_batches_tracked"]) == 1
    for k in ("running_mean", "running_var", "grad"):
        np.testing.assert_allclose(got[f"ckpt_{k}"], got[f"plain_{k}"], rtol=0, atol=1e-12,
                                   err_msg=k)
