"""Every op spec, nn layer, optimizer and a LeNet training step on the strict fake
device (tapegrad.testing.fakedevice): the CPU's results, and every result an
array of the device -- the CPU-side proof that nothing leaks host NumPy into
code that CuPy runs."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.testing.devicecases import (
    LAYER_CASES,
    OPTIMIZER_CASES,
    compare_results,
    run_layer,
    run_lenet_steps,
    run_optimizer,
)
from tapegrad.testing.devicecheck import RANDOM_OPS, compare_devices
from tapegrad.testing.fakedevice import FakeArray, fake_device
from tapegrad.testing.specs import (
    NOT_DIFFERENTIABLE,
    all_specs,
    check_not_differentiable,
    check_spec,
)

SPECS = [s for s in all_specs() if s.name not in RANDOM_OPS]
TWICE = [s for s in SPECS if s.twice]
DEV = fake_device()


@pytest.mark.parametrize("spec", SPECS, ids=[s.id for s in SPECS])
def test_spec_first_order_matches_cpu(spec):
    compare_devices(spec, DEV, orders=(1,), rtol=1e-9, atol=1e-12)  # the same NumPy underneath


@pytest.mark.parametrize("spec", TWICE, ids=[s.id for s in TWICE])
def test_spec_second_order_matches_cpu(spec):
    compare_devices(spec, DEV, orders=(2,), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("spec", [s for s in all_specs() if s.name in RANDOM_OPS or s.name in (
                                   "conv2d", "batch_norm", "max_pool2d")],
                         ids=lambda s: s.id)
def test_gradcheck_runs_on_the_device(spec):
    """check_spec itself (what `tapegrad check --device` runs) works off the host;
    dropout2d reseeds the device's own generator, so it is checked this way."""
    assert check_spec(spec, DEV, orders=(1,)) == {1: "pass"}


@pytest.mark.parametrize("name", sorted(NOT_DIFFERENTIABLE))
def test_not_differentiable_ops_on_the_device(name):
    check_not_differentiable(name, DEV)
    arrays = NOT_DIFFERENTIABLE[name](np.random.default_rng(0))
    cpu = getattr(ops, name)(*[tg.tensor(a) for a in arrays])
    dev = getattr(ops, name)(*[tg.tensor(a, device=DEV) for a in arrays])
    if isinstance(cpu, tg.Tensor):
        assert dev.device is DEV and isinstance(dev.array, FakeArray)
        np.testing.assert_array_equal(dev.cpu().numpy(), cpu.numpy())
    else:
        assert dev == cpu


def test_metrics_take_host_targets():
    x = tg.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]], device=DEV)
    assert ops.accuracy(x, np.array([1, 1, 1])) == pytest.approx(2 / 3)
    assert ops.topk_error(x, tg.tensor([0, 0, 0]), k=1) == pytest.approx(2 / 3)


@pytest.mark.parametrize("case", LAYER_CASES, ids=[c.name for c in LAYER_CASES])
def test_layer_matches_cpu(case):
    compare_results(run_layer(case, "cpu"), run_layer(case, DEV), 1e-5, 1e-6, case.name)


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CASES))
def test_optimizer_matches_cpu(name):
    compare_results(run_optimizer(name, "cpu"), run_optimizer(name, DEV), 1e-6, 1e-7, name)


@pytest.mark.parametrize("kw", [{}, {"data": "digits", "optimizer": "adam"}],
                         ids=["caffe lenet sgd", "digits lenet (bn) adam"])
def test_lenet_training_steps_match_cpu(kw):
    ref = run_lenet_steps("cpu", **kw)
    got = run_lenet_steps(DEV, **kw)
    compare_results(ref, got, 1e-5, 1e-6, "lenet")
    assert ref["losses"][1] != ref["losses"][0]  # the weights did change between the steps


def test_dropout_in_training_mode_stays_on_the_device():
    x = tg.ones(200, 10, device=DEV, requires_grad=True)
    tg.manual_seed(5)
    y = ops.dropout(x, 0.25)
    tg.manual_seed(5)
    y2 = ops.dropout(x, 0.25)
    assert isinstance(y.array, FakeArray)
    vals = np.unique(y.cpu().numpy())
    np.testing.assert_allclose(vals, [0.0, 1 / 0.75], rtol=1e-6)
    np.testing.assert_array_equal(y.cpu().numpy(), y2.cpu().numpy())  # manual_seed repeats
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.cpu().numpy(), y.cpu().numpy())


def test_every_kernel_reference_runs_on_its_samples():
    """What tests/device/test_gpu.py feeds each fused kernel is well formed: its
    sample runs through its NumPy reference for every dtype variant, one result
    per output parameter (so a GPU failure there is the kernel's, not the test's)."""
    from tapegrad import optim  # noqa: F401  (declares the optimizers' kernels)
    from tapegrad.device import kernels

    checked = 0
    for name, spec in sorted(kernels.registered().items()):
        if getattr(spec, "sample", None) is None or spec.reference is None:
            continue
        for variant in spec.types:
            dt = np.dtype(variant.get("T", next(iter(variant.values()))))
            out = spec.reference(*spec.sample(np.random.default_rng(0), dt))
            outs = out if isinstance(out, (tuple, list)) else (out,)
            assert len(outs) == len(spec.out_params.split(",")), name
            assert all(isinstance(o, np.ndarray) for o in outs), name
            checked += 1
    assert checked >= 1
