"""Idioms of real PyTorch scripts that once behaved differently (torch-free: the
expected values are PyTorch 2.13's)."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import ArgumentTypeError, DeviceError


@pytest.mark.parametrize("reduce", [lambda x: x.sum(), lambda x: x.mean(), lambda x: x.max(),
                                    lambda x: x.prod(), lambda x: (x * x).sum()])
def test_a_full_reduction_is_a_0d_tensor_in_place_ops_write_into(reduce):
    total = reduce(tg.tensor([1.0, 2.0, 3.0]))  # was a NumPy scalar: "does not support item
    before = total.item()                        # assignment" / a GraphError on +=
    total += 1
    assert total.shape == () and total.item() == before + 1
    assert isinstance(total.array, np.ndarray)


def test_running_loss_accumulates_as_in_the_examples():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    running = 0.0
    for _ in range(3):
        loss = (x * x).sum()
        loss.backward()
        running += loss.item()
    assert running == 15.0 and x.grad.tolist() == [6.0, 12.0]


def test_cat_and_stack_promote_as_torch():
    assert tg.cat([tg.tensor([1]), tg.tensor([2.5])]).dtype == np.float32  # NumPy: float64
    assert tg.stack([tg.tensor(1), tg.tensor(2.5, dtype="float64")]).dtype == np.float64
    assert tg.cat([tg.tensor([True]), tg.tensor(np.array([3], np.uint8))]).dtype == np.uint8
    a = tg.tensor([1.0, 2.0], requires_grad=True, dtype="float64")
    y = tg.cat([a, tg.tensor([1.0], dtype="float32")])
    y.sum().backward()
    assert y.dtype == np.float64 and a.grad.tolist() == [1.0, 1.0]


def test_format_of_a_0d_tensor_is_its_number():
    assert f"{tg.tensor(2.5)} {tg.tensor(2.5):.2f} {tg.tensor(1.25):>6.1f}" == "2.5 2.50    1.2"
    assert "{}".format(tg.tensor(3)) == "3"  # noqa: UP032  (str.format is the idiom tested)
    assert f"{tg.tensor([1.0])}" == str(tg.tensor([1.0]))
    with pytest.raises(TypeError):  # as PyTorch: a spec on a dimensioned tensor
        f"{tg.tensor([1.0, 2.0]):.2f}"  # noqa: B018


def test_an_integer_tensor_is_an_index():
    seq = list(range(10))
    i = tg.tensor(2)
    assert seq[i] == 2 and seq[i:i + 3] == [2, 3, 4] and seq[tg.tensor([4])] == 4
    for bad in (tg.tensor(2.0), tg.tensor([1, 2])):
        with pytest.raises(ArgumentTypeError, match="one-element integer tensor"):
            seq[bad]


def test_softmax_takes_pytorchs_dtype():
    u = tg.tensor(np.array([1, 2, 3], np.uint8))  # torch refuses uint8 softmax without it
    import tapegrad.nn.functional as F

    y = F.softmax(u, 0, dtype=tg.float32)
    np.testing.assert_allclose(y.numpy(), [0.0900306, 0.2447285, 0.6652409], rtol=1e-6)
    assert F.log_softmax(u, dim=0, dtype=tg.float64).dtype == np.float64
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    F.log_softmax(x, 0, dtype=tg.float64)[0].backward()  # the cast is recorded
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(x.grad.numpy(), [0.7310586, -0.7310586], rtol=1e-6)


def test_ops_are_silent_about_inf_and_nan_as_torch_and_user_numpy_still_warns():
    import subprocess
    import sys

    code = ("import numpy as np, tapegrad as tg\n"
            "x = tg.tensor([0.0], requires_grad=True)\n"
            "y = tg.log(x) + x / x\n"  # NumPy would warn twice
            "y.sum().backward()\n"
            "print(y.tolist(), x.grad.tolist())\n"
            "try:\n    np.log(np.zeros(1))\nexcept RuntimeWarning:\n    print('user warned')\n")
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[nan] [nan]", "user warned"]


def test_a_generator_seeds_random_split_and_the_loader_as_torch_scripts_do():
    from tapegrad.data import DataLoader, TensorDataset, random_split

    ds = TensorDataset(tg.arange(10.0))
    a, b = random_split(ds, [0.8, 0.2], generator=tg.Generator().manual_seed(42))
    c, d = random_split(ds, [0.8, 0.2], generator=tg.Generator().manual_seed(42))
    assert list(a.indices) == list(c.indices) and len(b) == 2
    assert sorted(list(a.indices) + list(b.indices)) == list(range(10))
    first = [next(iter(DataLoader(ds, batch_size=4, shuffle=True,
                                  generator=tg.Generator().manual_seed(1))))[0].tolist()
             for _ in range(2)]
    assert first[0] == first[1]
    g = tg.Generator()
    assert g.initial_seed() == 67280421310721 and g.manual_seed(5) is g
    state = g.get_state()
    x = g.random()
    assert g.set_state(state).random() == x
    with pytest.raises(DeviceError):  # no GPU: its DeviceError; with one, "only CPU"
        tg.Generator("cuda")


# ------------------------------------------------------------- Tensor.data
def test_data_is_a_detached_tensor_sharing_memory():
    from tapegrad import nn
    m = nn.Linear(3, 2)
    d = m.weight.data
    assert type(d) is tg.Tensor and not d.requires_grad and d.is_leaf and d.grad_fn is None
    assert np.shares_memory(d.array, m.weight.array) and d.shape == (2, 3)
    m.weight.data.normal_(0.0, 0.02)      # the DCGAN weights_init idiom
    m.bias.data.fill_(0.01)
    assert np.all(m.bias.array == np.float32(0.01)) and abs(m.weight.array).max() < 0.2
    assert m.weight.requires_grad and m.bias.requires_grad and m.weight.grad_fn is None


def test_in_place_updates_through_data_are_not_recorded_nor_version_checked():
    w = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = (w * w).sum()
    loss.backward()
    w.data.add_(-0.1 * w.grad)                        # the hand-written SGD of the examples
    np.testing.assert_allclose(w.array, [0.8, 1.6, 2.4], rtol=1e-6)
    assert w.grad_fn is None and w.is_leaf and w.requires_grad
    y = w * w                                         # saves w
    w.data.mul_(2)                                    # PyTorch: not seen by the saved entry
    y.sum().backward()  # no "modified in place" error; 2 * w with w's new values, as torch
    np.testing.assert_allclose(w.grad.array, [2 + 3.2, 4 + 6.4, 6 + 9.6], rtol=1e-6)
    with pytest.raises(tg.errors.GraphError, match="modified in place"):  # detach() shares it
        z = w * w
        w.detach().mul_(2)
        z.sum().backward()


def test_data_of_results_and_reductions():
    x = tg.tensor([[1.0, 5.0], [7.0, 2.0]], requires_grad=True)
    out = x * 2
    _, predicted = tg.max(out.data, 1)                # the classification-accuracy idiom
    assert predicted.tolist() == [1, 0] and not out.data.requires_grad
    assert out.data.numpy().tolist() == [[2.0, 10.0], [14.0, 4.0]]
    total = out.sum()
    total.data += 1                                   # a full reduction: its scalar is shared
    assert total.item() == 31.0


def test_assigning_data():
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    w.data = tg.tensor([3.0, 4.0, 5.0], dtype="float64")  # PyTorch: shape and dtype follow
    assert w.shape == (3,) and w.dtype == np.float64 and w.requires_grad and w.is_leaf
    with pytest.raises(ArgumentTypeError, match=r"assign a Tensor.*\.array"):
        w.data = np.zeros(3)
    with pytest.raises(tg.errors.DTypeError, match="requires grad"):
        w.data = tg.tensor([1, 2])
    base = tg.tensor([1.0, 2.0, 3.0])
    view = base[:2]
    with pytest.raises(tg.errors.GraphError, match="view"):
        view.data = tg.zeros(2)
    with pytest.raises(tg.errors.GraphError, match="view"):
        base.data = tg.zeros(3)


def test_data_idioms_against_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x, t = rng.standard_normal((8, 3)), rng.standard_normal((8, 1))
    w0 = rng.standard_normal((1, 3))
    results = []
    for lib in (tg, torch):
        w = lib.tensor(w0.copy(), requires_grad=True)
        for _ in range(5):
            loss = ((lib.tensor(x) @ w.t() - lib.tensor(t)) ** 2).mean()
            loss.backward()
            w.data.add_(w.grad.data, alpha=-0.1) if lib is torch else \
                w.data.add_(w.grad.data * -0.1)
            w.grad.data.zero_()
        results.append(w.detach().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-12)
