"""The environment names PyTorch scripts start with: ``tg.device(...)``, ``tg.cuda``,
``tg.accelerator``, ``tg.backends``, ``tg.hub``, ``tapegrad.utils.data``; on this
machine (no GPU), each answers as PyTorch's CPU build does (compared with torch where
it is installed) or raises a DeviceError saying what is missing."""

import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import ArgumentError, DeviceError

needs_no_gpu = pytest.mark.skipif(tg.cupy_available(), reason="checks the no-GPU answers")


def test_device_is_a_class_called_as_torch_device():
    d = tg.device("cpu")
    assert isinstance(d, tg.device) and d is tg.get_device("cpu") is tg.device(d)
    assert d == "cpu" and d.type == "cpu" and d.index is None
    assert str(d) == "cpu" and repr(d) == "device(type='cpu')"
    x = tg.zeros(2).to(d)
    assert x.device == d and x.is_cpu and not x.is_cuda and not x.is_xpu and not x.is_mps
    assert tg.ones(2, device=d).device.type == "cpu"


def test_the_device_package_stays_reachable_through_the_class():
    from tapegrad.device import get_device, threads

    assert tg.device.get_device is get_device and tg.device.threads is threads
    assert tg.device.cpu is tg.device("cpu") and "to_host" in dir(tg.device)
    with pytest.raises(AttributeError, match="tapegrad.device has no attribute 'nope'"):
        tg.device.nope  # noqa: B018


def test_the_package_patched_is_seen_through_the_class(monkeypatch):
    import tapegrad.device as package  # the class, as torch.device; the module: sys.modules

    module = sys.modules["tapegrad.device"]
    assert package is tg.device and module is not tg.device
    monkeypatch.setattr(module, "_cupy_error", "patched")
    assert tg.device._cupy_error == "patched"


@pytest.mark.parametrize("spec, message", [
    (("mps",), "runs on 'cpu' and 'cuda'"), (("cuda:0", 1), "index is given twice"),
    (("cuda", -1), "int >= 0"), ((2.5,), "expected a string"), (("tpu",), "unknown device"),
])
def test_bad_devices_are_named(spec, message):
    with pytest.raises(DeviceError, match=message):
        tg.device(*spec)


@needs_no_gpu
def test_cuda_without_a_gpu_answers_as_torch_cpu_build():
    assert tg.cuda.is_available() is False and tg.cuda.device_count() == 0
    assert not tg.cuda.is_initialized()
    tg.cuda.manual_seed(0), tg.cuda.manual_seed_all(0), tg.cuda.empty_cache()
    assert tg.cuda.memory_allocated() == tg.cuda.memory_reserved() == 0
    assert tg.cuda.max_memory_allocated() == 0
    for call in (tg.cuda.synchronize, tg.cuda.current_device, tg.cuda.get_device_name,
                 tg.cuda.get_device_capability, lambda: tg.cuda.set_device(0)):
        with pytest.raises(DeviceError, match="needs CuPy and a working NVIDIA GPU"):
            call()
    with pytest.raises(DeviceError, match="needs CuPy"):
        tg.device("cuda")
    assert tg.accelerator.is_available() is False and tg.accelerator.device_count() == 0
    assert tg.accelerator.current_accelerator() is None
    device = tg.device("cuda" if tg.cuda.is_available() else "cpu")  # the scripts' idiom
    assert device == "cpu"


@needs_no_gpu
def test_cuda_seeding_leaves_the_cpu_stream_alone():
    tg.manual_seed(3)
    a = tg.randn(4).numpy()
    tg.manual_seed(3)
    tg.cuda.manual_seed(99)  # nothing without a GPU; never reseeds the CPU
    np.testing.assert_array_equal(tg.randn(4).numpy(), a)


def test_backends_flags_are_kept_as_set():
    import tapegrad.backends.cudnn as cudnn

    assert cudnn.enabled and not cudnn.benchmark and not cudnn.deterministic
    assert cudnn.is_available() is False and cudnn.version() is None
    assert tg.backends.mps.is_available() is False and tg.backends.mps.is_built() is False


def test_hub_gives_tqdm_and_downloads_nothing():
    from tapegrad.hub import tqdm

    assert list(tqdm(range(3), disable=True)) == [0, 1, 2]
    for name in ("load", "load_state_dict_from_url", "download_url_to_file"):
        with pytest.raises(ArgumentError, match="downloads nothing"):
            getattr(tg.hub, name)("pytorch/vision", "resnet18")


def test_import_statements_of_the_scripts_work_in_a_fresh_interpreter():
    code = ("import tapegrad.utils.data, tapegrad.backends.cudnn as cudnn, tapegrad.cuda; "
            "from tapegrad.utils.data import DataLoader, TensorDataset; "
            "from tapegrad.hub import tqdm; import tapegrad as tg; cudnn.benchmark = True; "
            "assert tapegrad.utils.data.DataLoader is tg.data.DataLoader; "
            "print(tg.device('cpu'), tg.cuda.is_available() in (True, False))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cpu", "True"]


@needs_no_gpu
def test_the_same_answers_as_torch_cpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here")
    pairs = [(torch.cuda.is_available(), tg.cuda.is_available()),
             (torch.cuda.device_count(), tg.cuda.device_count()),
             (torch.cuda.memory_allocated(), tg.cuda.memory_allocated()),
             (torch.accelerator.is_available(), tg.accelerator.is_available()),
             (torch.accelerator.current_accelerator(), tg.accelerator.current_accelerator()),
             (torch.backends.cudnn.is_available(), tg.backends.cudnn.is_available()),
             (torch.backends.mps.is_available(), tg.backends.mps.is_available()),
             (repr(torch.device("cpu")), repr(tg.device("cpu"))),
             (torch.device("cpu").index, tg.device("cpu").index),
             (torch.zeros(1).is_cpu, tg.zeros(1).is_cpu)]
    for want, got in pairs:
        assert got == want
