"""The device layer: names, interning, lazy CuPy, clear errors, kernel registry."""

import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.device import get_array_module, get_device, kernels
from tapegrad.errors import DeviceError


def test_cpu_device_and_array_module():
    dev = get_device("cpu")
    assert dev is get_device(None) is get_device(dev)
    assert dev.xp is np and get_array_module(tg.tensor([1.0])) is np
    assert get_array_module(np.zeros(1)) is np


def test_import_does_not_import_cupy():
    code = "import sys, tapegrad; tapegrad.tensor([1.0]) * 2; print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_bad_device_names():
    for bad in ("gpu", "cuda:x", "tpu:0"):
        with pytest.raises(DeviceError, match="unknown device"):
            get_device(bad)
    with pytest.raises(DeviceError, match="must be"):
        get_device(3)


@pytest.mark.skipif(tg.cupy_available(), reason="this machine has a GPU")
def test_cuda_without_cupy_says_what_to_install():
    with pytest.raises(DeviceError, match=r"tapegrad\[cuda\]"):
        tg.tensor([1.0], device="cuda")
    with pytest.raises(DeviceError, match="CuPy"):
        tg.tensor([1.0]).to("cuda:0")


def test_mixed_devices_error_names_op_and_shapes():
    from tapegrad.device import Device
    from tapegrad.tensor import _wrap

    fake = Device("cuda", 7, np)  # a stand-in second device: only identity matters
    a = tg.tensor([1.0, 2.0])
    b = _wrap(np.ones(2, np.float32), fake, None, 0, False)
    with pytest.raises(DeviceError, match=r"Add: inputs are on different devices.*\(2,\) on "
                                          r"cpu.*cuda:7.*\.to\(device\)"):
        a + b


def test_kernel_registry_is_lazy_and_cached():
    spec = kernels.elementwise("tg_test_scale", "T x", "T y", "y = x * 2")
    assert kernels.elementwise("tg_test_scale", "T x", "T y", "y = x * 2") is spec
    assert "tg_test_scale" in kernels.registered()
    assert spec._compiled == {}  # declaring compiles nothing
    if not tg.cupy_available():
        with pytest.raises(DeviceError, match="needs CuPy"):
            spec(np.ones(2))


@pytest.mark.gpu
def test_cuda_roundtrip_and_grad():
    x = tg.tensor(np.arange(4.0), device="cuda", requires_grad=True)
    y = (x * x).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.cpu().numpy(), 2 * np.arange(4.0))
    with pytest.raises(DeviceError, match=r"\.cpu\(\) to copy"):
        x.numpy()
    back = x.to("cpu")
    assert back.device == "cpu"
    spec = kernels.elementwise("tg_test_scale", "T x", "T y", "y = x * 2")
    np.testing.assert_allclose(spec(x.array).get(), 2 * np.arange(4.0))


def test_malloc_tuning_can_be_switched_off():
    code = ("import tapegrad.device.host_memory as h, tapegrad; "
            "print(h._applied)")
    import os

    env = dict(os.environ, TAPEGRAD_KEEP_MALLOC="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    assert out.stdout.strip() == "False"
