"""The CUDA backend on a real GPU (``pytest -m gpu``; skipped without one).

Every op spec, nn layer, optimizer and a LeNet training step on ``cuda``
against the CPU (the same cases the fake-device tests run on every CI run),
the tensor API, and the facts the fake device assumes about CuPy. Each fused
kernel against its NumPy reference is in ``test_kernels.py``.
``benchmarks/gpu_check.sh`` runs all ``gpu`` tests first; the full gradcheck
table is ``tapegrad check --device cuda``.
"""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import DeviceError
from tapegrad.testing.devicecases import (
    LAYER_CASES,
    OPTIMIZER_CASES,
    compare_results,
    run_layer,
    run_lenet_steps,
    run_optimizer,
)
from tapegrad.testing.devicecheck import RANDOM_OPS, compare_devices
from tapegrad.testing.specs import all_specs, check_spec

pytestmark = pytest.mark.gpu

SPECS = [s for s in all_specs() if s.name not in RANDOM_OPS]
TWICE = [s for s in SPECS if s.twice]
# float64 on both sides: only summation order differs (cuBLAS, CuPy's reductions)
RTOL64, ATOL64 = 1e-7, 1e-9
# float32 layers and steps: GPU GEMMs (TF32 is off in CuPy by default) and reductions
RTOL32, ATOL32 = 2e-4, 2e-5


def _cupy():
    return tg.get_device("cuda").xp


@pytest.mark.parametrize("spec", SPECS, ids=[s.id for s in SPECS])
def test_spec_matches_cpu(spec):
    compare_devices(spec, "cuda", orders=(1,), rtol=RTOL64, atol=ATOL64)


@pytest.mark.parametrize("spec", TWICE, ids=[s.id for s in TWICE])
def test_spec_second_order_matches_cpu(spec):
    compare_devices(spec, "cuda", orders=(2,), rtol=RTOL64, atol=ATOL64 * 10)


@pytest.mark.parametrize("spec", [s for s in all_specs() if s.name in RANDOM_OPS],
                         ids=lambda s: s.id)
def test_random_spec_gradchecks_on_cuda(spec):
    assert check_spec(spec, "cuda", orders=(1,)) == {1: "pass"}


@pytest.mark.parametrize("case", LAYER_CASES, ids=[c.name for c in LAYER_CASES])
def test_layer_matches_cpu(case):
    compare_results(run_layer(case, "cpu"), run_layer(case, "cuda"), RTOL32, ATOL32, case.name)


@pytest.mark.parametrize("name", sorted(OPTIMIZER_CASES))
def test_optimizer_matches_cpu(name):
    compare_results(run_optimizer(name, "cpu"), run_optimizer(name, "cuda"), 1e-5, 1e-6, name)


@pytest.mark.parametrize("kw", [{}, {"data": "digits", "optimizer": "adam"}],
                         ids=["caffe lenet sgd", "digits lenet (bn) adam"])
def test_lenet_training_steps_match_cpu(kw):
    compare_results(run_lenet_steps("cpu", **kw), run_lenet_steps("cuda", **kw), 1e-3, 1e-4,
                    "lenet")


def test_cupy_refuses_what_the_fake_device_refuses():
    cp = _cupy()
    a = cp.ones(3)
    with pytest.raises(TypeError, match="Unsupported type"):
        a * np.ones(3)
    with pytest.raises(TypeError):
        np.asarray(a)
    assert not hasattr(cp, "errstate")
    assert type(np.exp(a)) is cp.ndarray and type(a.sum()) is cp.ndarray


def test_tensor_api_on_cuda(tmp_path):
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x.cuda()
    assert y.is_cuda and y.device == "cuda:0" and x.to("cuda") is not x
    with pytest.raises(DeviceError, match=r"use Tensor\.cpu\(\)"):
        y.numpy()
    (y * y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    with pytest.raises(DeviceError, match="different devices"):
        y + tg.tensor([1.0, 1.0])
    z = y + np.ones(2)  # a host constant moves to the GPU
    assert z.is_cuda
    tg.save({"y": y}, tmp_path / "y.npz")
    assert tg.load(tmp_path / "y.npz")["y"].device == "cpu"
    assert tg.load(tmp_path / "y.npz", map_location="cuda")["y"].is_cuda


def test_manual_seed_repeats_cuda_random_numbers():
    tg.manual_seed(1)
    a = tg.randn(5, device="cuda").cpu().numpy()
    d = ops.dropout(tg.ones(100, device="cuda"), 0.5).cpu().numpy()
    tg.manual_seed(1)
    np.testing.assert_array_equal(tg.randn(5, device="cuda").cpu().numpy(), a)
    np.testing.assert_array_equal(ops.dropout(tg.ones(100, device="cuda"), 0.5).cpu().numpy(),
                                  d)
    assert set(np.unique(d)) <= {0.0, 2.0} and 20 < (d == 0).sum() < 80


def test_train_command_on_cuda(tmp_path, capsys):
    pytest.importorskip("sklearn")
    from tapegrad.cli import main

    out = str(tmp_path / "run")
    assert main(["train", "--device", "cuda", "--out", out, "--epochs", "1", "-q",
                 "--train-samples", "400", "--test-samples", "200"]) == 0
    assert "device cuda:0" in capsys.readouterr().out
