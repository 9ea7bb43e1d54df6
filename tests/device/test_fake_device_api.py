"""Moving tensors, modules, optimizer state and checkpoints between devices, and
the rules for mixing them, proven on the strict fake device; plus the fake
device's own strictness (it must refuse what CuPy refuses)."""

import copy
import importlib.util
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, ops, optim
from tapegrad.data import DataLoader, TensorDataset
from tapegrad.device import device_of_array, get_device, to_device, to_host
from tapegrad.errors import ArgumentError, DeviceError
from tapegrad.testing.fakedevice import FakeArray, fake_device

DEV = fake_device()


# ------------------------------------------------------------ the fake itself
def test_fake_refuses_what_cupy_refuses():
    a = DEV.xp.ones(3)
    with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
        a * np.ones(3)
    with pytest.raises(TypeError, match="Unsupported type"):
        np.ones(3) + a
    with pytest.raises(TypeError, match="Unsupported type"):
        DEV.xp.where(np.ones(3, bool), a, 0.0)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(a)
    with pytest.raises(AttributeError, match="errstate"):
        DEV.xp.errstate  # noqa: B018
    if importlib.util.find_spec("cupy") is not None:  # signatures come from CuPy itself
        with pytest.raises(TypeError, match="writeable"):  # not in CuPy's signature
            DEV.xp.lib.stride_tricks.as_strided(a, shape=(3,), strides=(8,), writeable=False)
        with pytest.raises(TypeError, match="initial"):  # cupy.ndarray.max has no initial=
            a.max(initial=0.0)
    for call in (lambda: DEV.xp.add(a, a, where=a > 0), lambda: np.add(a, a, where=a > 0)):
        with pytest.raises(TypeError, match="Wrong arguments"):  # CuPy's ufuncs: no where=
            call()


def test_fake_allows_what_cupy_allows():
    a = DEV.xp.arange(6.0).reshape(2, 3)
    assert type(np.exp(a)) is FakeArray and type(np.sum(a)) is FakeArray  # NEP 13/18 dispatch
    assert type(a.sum()) is FakeArray and float(a.sum()) == 15.0  # 0-d arrays, as CuPy's
    assert type(a * np.float32(2)) is FakeArray and type(a[np.array([1, 0])]) is FakeArray
    np.testing.assert_array_equal(DEV.xp.asarray(np.ones(2)).get(), [1.0, 1.0])  # explicit copy
    assert device_of_array(a) is DEV and type(to_host(a)) is np.ndarray
    b = DEV.xp.zeros((2, 3))
    assert np.add(a, a, out=b) is b and DEV.xp.multiply(a, 2, out=b) is b  # out= as CuPy
    np.testing.assert_array_equal(b.get(), 2 * np.arange(6.0).reshape(2, 3))


def test_fake_is_not_reachable_by_name_and_off_the_cpu_path():
    for name in ("fake", "fake:0"):
        with pytest.raises(DeviceError, match="unknown device"):
            get_device(name)
    code = ("import sys, tapegrad; tapegrad.tensor([1.0], requires_grad=True).sum().backward(); "
            "print('tapegrad.testing.fakedevice' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------- moving tensors
def test_to_cpu_and_back_is_differentiable():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x.to(DEV)
    assert y.device is DEV and isinstance(y.array, FakeArray) and y.to(DEV) is y
    z = (y * y).cpu()
    assert z.device == "cpu" and not z.is_cuda
    z.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    assert x.to("cpu") is x and x.to("cpu", copy=True) is not x


def test_numpy_refuses_device_tensors_like_pytorch():
    t = tg.tensor([1.0, 2.0], device=DEV)
    with pytest.raises(DeviceError, match=r"fake:0 tensor .* use Tensor\.cpu\(\) to copy"):
        t.numpy()
    with pytest.raises(DeviceError, match=r"\.cpu\(\)"):
        np.asarray(t)
    np.testing.assert_array_equal(t.cpu().numpy(), [1.0, 2.0])
    assert t.tolist() == [1.0, 2.0] and "device='fake:0'" in repr(t) and t[1].item() == 2.0


def test_cuda_method_needs_a_gpu_and_a_gpu_name():
    t = tg.tensor([1.0])
    if not tg.cupy_available():
        with pytest.raises(DeviceError, match=r"tapegrad\[cuda\]"):
            t.cuda()
    with pytest.raises(DeviceError, match="unknown device"):
        t.cuda("gpu")


def test_tensor_from_arrays_of_any_device():
    a = tg.tensor(DEV.xp.ones(2), dtype=np.float64)
    assert a.device == "cpu" and a.dtype == np.float64
    b = tg.tensor(np.arange(3), device=DEV, dtype=np.float32)
    assert b.device is DEV and b.dtype == np.float32
    assert to_device(b.array, "cpu").tolist() == [0.0, 1.0, 2.0]


# ---------------------------------------------------------------- mixing rules
def test_cpu_tensor_with_device_tensor_raises_naming_op_and_devices():
    x = tg.tensor([1.0, 2.0], device=DEV, requires_grad=True)
    with pytest.raises(DeviceError, match=r"Mul: inputs are on different devices.*fake:0.*cpu"):
        x * tg.tensor([1.0, 2.0])
    with pytest.raises(DeviceError, match="MSELoss"):
        ops.mse_loss(x, tg.tensor([0.0, 0.0]))


def test_host_constants_move_to_the_device():
    x = tg.tensor(np.arange(6.0).reshape(2, 3), device=DEV, requires_grad=True)
    for y in (x + np.ones(3), x[np.array([1, 0])], ops.where(np.array([True, False, True]), x, 0.0),
              ops.cross_entropy(x, np.array([0, 2]), weight=np.array([1.0, 2.0, 3.0])),
              ops.cross_entropy(x, tg.tensor([0, 2])), ops.mse_loss(x, np.zeros((2, 3)))):
        assert y.device is DEV and isinstance(y.array, FakeArray)
        y.sum().backward()
    assert isinstance(x.grad.array, FakeArray)


def test_batch_norm_running_stats_on_another_device_refused():
    x = tg.randn(4, 3, device=DEV)
    with pytest.raises(DeviceError, match="batch_norm: running_mean is on cpu but the input is "
                                          "on fake:0"):
        ops.batch_norm(x, tg.zeros(3), tg.ones(3), training=True)


# ------------------------------------------------ modules, optimizers, loading
def test_module_and_optimizer_state_move_with_the_model():
    tg.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    ref = copy.deepcopy(net)
    opt = optim.Adam(net.parameters(), lr=0.01)
    net(tg.randn(5, 3)).sum().backward()
    opt.step()
    net.to(DEV)
    assert all(isinstance(t.array, FakeArray) for t in net.state_dict().values())
    assert all(isinstance(p.grad.array, FakeArray) for p in net.parameters())
    moved = optim.Adam(net.parameters(), lr=0.01)
    moved.load_state_dict(opt.state_dict())  # CPU buffers onto the parameters' device
    assert all(isinstance(v, FakeArray) for s in moved.state.values() for v in s.values()
               if hasattr(v, "shape") and getattr(v, "ndim", 0))
    moved.step()
    net.cpu()
    ref.load_state_dict(net.state_dict())
    assert all(t.device == "cpu" for t in ref.state_dict().values())


def test_save_on_device_load_anywhere(tmp_path):
    t = tg.tensor([[1.0, 2.0]], device=DEV, requires_grad=True)
    tg.save({"t": t, "raw": t.array, "n": 3}, tmp_path / "c.npz")
    back = tg.load(tmp_path / "c.npz")
    assert back["t"].device == "cpu" and back["t"].requires_grad and back["n"] == 3
    assert type(back["raw"]) is np.ndarray
    for kw in ({"map_location": DEV}, {"device": DEV}):
        on = tg.load(tmp_path / "c.npz", **kw)
        assert on["t"].device is DEV and isinstance(on["t"].array, FakeArray)
        np.testing.assert_array_equal(on["t"].cpu().numpy(), [[1.0, 2.0]])
    assert tg.load(tmp_path / "c.npz", DEV)["t"].device is DEV  # positional, as torch.load
    with pytest.raises(ArgumentError, match="record no devices"):
        tg.load(tmp_path / "c.npz", map_location={"cuda:0": "cpu"})
    with pytest.raises(ArgumentError, match="disagree"):
        tg.load(tmp_path / "c.npz", map_location="cpu", device=DEV)


def test_manual_seed_repeats_device_random_numbers():
    tg.manual_seed(3)
    a = tg.randn(4, device=DEV)
    b = tg.rand(4, device=DEV)
    tg.manual_seed(3)
    np.testing.assert_array_equal(tg.randn(4, device=DEV).cpu().numpy(), a.cpu().numpy())
    np.testing.assert_array_equal(tg.rand(4, device=DEV).cpu().numpy(), b.cpu().numpy())
    assert isinstance(a.array, FakeArray)
    net = nn.Linear(3, 2).to(DEV)
    nn.init.normal_(net.weight)
    assert isinstance(net.weight.array, FakeArray)


def test_dataloader_batches_on_the_device():
    ds = TensorDataset(tg.tensor(np.arange(12.0).reshape(6, 2)), tg.tensor(np.arange(6)))
    batches = list(DataLoader(ds, 4, shuffle=True, seed=0, device=DEV))
    assert [len(y) for _, y in batches] == [4, 2]
    assert all(isinstance(t.array, FakeArray) for b in batches for t in b)


def test_train_command_on_the_device(tmp_path, capsys, monkeypatch):
    pytest.importorskip("sklearn")
    from tapegrad.cli import main

    real = tg.get_device
    monkeypatch.setattr(tg, "get_device", lambda d=None: DEV if d == "fake" else real(d))
    out = str(tmp_path / "run")
    assert main(["train", "--device", "fake", "--out", out, "--epochs", "1", "-q",
                 "--train-samples", "300", "--test-samples", "100"]) == 0
    text = capsys.readouterr().out
    assert "device fake:0" in text and "done: test accuracy" in text
    assert tg.load(f"{out}/model.npz")["model"]["0.weight"].device == "cpu"
    assert main(["eval", "--checkpoint", out, "--device", "fake", "--test-samples", "100"]) == 0
    assert "accuracy" in capsys.readouterr().out


def test_check_command_compares_with_the_cpu_off_the_host(capsys):
    from types import SimpleNamespace

    from tapegrad.cli import check

    assert check.run(SimpleNamespace(device=DEV, only="max_pool2d")) == 0
    out = capsys.readouterr().out
    assert "1st   2nd   cpu" in out and "compares results with the CPU's" in out
    row = next(line.split() for line in out.splitlines() if line.startswith("max_pool2d"))
    assert row[-4:-1] == ["pass", "pass", "pass"]  # 1st, 2nd, cpu; then ms
    assert out.strip().endswith("0 failed on fake:0")


def test_datasets_held_on_the_device():
    x = tg.tensor(np.arange(12.0).reshape(6, 2), device=DEV)
    ds = TensorDataset(x, tg.tensor(np.arange(6), device=DEV))
    (bx, by), = list(DataLoader(ds, 6, shuffle=True, seed=1, device=DEV))
    assert isinstance(bx.array, FakeArray) and sorted(by.tolist()) == list(range(6))

    class Plain:  # no get_batch: samples are collated one by one
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return x[i], i

    (px, py), = list(DataLoader(Plain(), 3, device=DEV))
    assert isinstance(px.array, FakeArray) and px.shape == (3, 2) and py.tolist() == [0, 1, 2]


def test_new_tensor_from_a_device_tensor():
    t = tg.tensor([1.0, 2.0], device=DEV)
    assert tg.tensor([0.0]).new_tensor(t).device == "cpu"
    n = t.new_tensor(t)
    assert n.device is DEV and n.array is not t.array and n.tolist() == [1.0, 2.0]


def test_backward_seed_on_another_device_refused_host_array_moved():
    x = tg.tensor([1.0, 2.0], device=DEV, requires_grad=True)
    with pytest.raises(DeviceError, match="backward: the gradient is on cpu but the root"):
        (x * 2).backward(tg.ones(2))
    (x * x).backward(np.ones(2, np.float32))  # a host array seed is moved
    assert isinstance(x.grad.array, FakeArray) and x.grad.tolist() == [2.0, 4.0]


def test_unrecorded_operators_follow_the_mixing_rule():
    x = tg.tensor([1.0, 2.0], device=DEV)
    for r in (x > np.array([1.5, 1.5]), x // np.array([1.0, 2.0]), np.array([3.0, 4.0]) % x,
              (x > 1) & np.array([True, True]), np.float32(1) < x):
        assert isinstance(r.array, FakeArray)
    assert (x > np.array([1.5, 1.5])).tolist() == [False, True]
    with pytest.raises(DeviceError, match="comparison: operands are on different devices"):
        x == tg.tensor([1.0, 2.0])  # noqa: B015
    with pytest.raises(DeviceError, match="&: operands are on different devices"):
        (x > 1) & tg.tensor([True, True])


def test_writes_copy_across_devices_as_in_pytorch():
    x = tg.zeros(3, device=DEV)
    x[0:2] = tg.tensor([1.0, 2.0])
    x.copy_(x + tg.tensor([1.0, 1.0, 1.0]).to(DEV))
    assert isinstance(x.array, FakeArray) and x.tolist() == [2.0, 3.0, 1.0]
    src = tg.tensor([5.0, 6.0, 7.0], requires_grad=True)
    y = tg.zeros(3, device=DEV)
    y.copy_(src)  # differentiable: the gradient goes back to the CPU source
    (y * y).sum().backward()
    assert src.grad.device == "cpu" and src.grad.tolist() == [10.0, 12.0, 14.0]


def test_grad_clipping_and_schedulers_on_the_device():
    m = nn.Linear(3, 2).to(DEV)
    m(tg.randn(4, 3, device=DEV)).sum().backward()
    total = nn.utils.clip_grad_norm_(m.parameters(), 0.1)
    assert total.device is DEV and isinstance(m.weight.grad.array, FakeArray)
    nn.utils.clip_grad_value_(m.parameters(), 0.01)
    assert float(abs(m.weight.grad).max()) <= 0.01
    opt = optim.SGD(m.parameters(), lr=0.1)
    sched = optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.05 and isinstance(m.weight.array, FakeArray)
