"""tapegrad.save / tapegrad.load: round trips, no pickle, clear errors."""

import io
import math
import zipfile

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.errors import TapegradError
from tapegrad.serialization import SerializationError


def _net():
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8, 3))


def test_state_dict_round_trip(tmp_path):
    tg.manual_seed(0)
    net = _net()
    net(tg.randn(4, 1, 4, 4))  # moves the running statistics
    path = tmp_path / "model.npz"
    tg.save(net.state_dict(), path)
    sd = tg.load(path)
    assert list(sd) == list(net.state_dict())
    for k, v in net.state_dict().items():
        assert isinstance(sd[k], tg.Tensor) and sd[k].dtype == v.dtype, k
        np.testing.assert_array_equal(sd[k].numpy(), v.numpy(), err_msg=k)
    assert sd["1.num_batches_tracked"].dtype == np.int64
    tg.manual_seed(1)
    other = _net()
    other.load_state_dict(sd)
    x = tg.randn(2, 1, 4, 4)
    np.testing.assert_array_equal(other.eval()(x).numpy(), net.eval()(x).numpy())
    # readable by plain NumPy, with the parameter names, and without pickle
    with np.load(path, allow_pickle=False) as raw:
        assert "4.weight" in raw.files and "__tapegrad__" in raw.files
        np.testing.assert_array_equal(raw["4.weight"], net[4].weight.numpy())


def test_nested_metadata_round_trip(tmp_path):
    obj = {
        "epoch": 7, "best": 0.25, "name": "lenet", "flag": True, "none": None,
        "nan": float("nan"), "inf": -math.inf,
        "arr": np.arange(6, dtype=np.int32).reshape(2, 3),
        "tensor": tg.tensor([1.0, 2.0], requires_grad=True),
        "nested": {"a": {"b": [1, 2.5, "x", (3, 4)]}, 3: "int key"},
        "list_of_tensors": [tg.zeros(2), tg.ones(1, dtype=np.float64)],
        "weird/key.__name": tg.zeros(1),
        "__tapegrad__": 1,  # a user key that looks like ours
    }
    path = tmp_path / "meta.npz"
    tg.save(obj, str(path))
    back = tg.load(str(path))
    assert back["epoch"] == 7 and back["best"] == 0.25 and back["name"] == "lenet"
    assert back["flag"] is True and back["none"] is None and back["__tapegrad__"] == 1
    assert math.isnan(back["nan"]) and back["inf"] == -math.inf
    assert isinstance(back["arr"], np.ndarray) and back["arr"].dtype == np.int32
    np.testing.assert_array_equal(back["arr"], obj["arr"])
    assert isinstance(back["tensor"], tg.Tensor) and back["tensor"].requires_grad
    assert back["nested"] == {"a": {"b": [1, 2.5, "x", (3, 4)]}, 3: "int key"}
    assert back["list_of_tensors"][1].dtype == np.float64
    assert back["weird/key.__name"].shape == (1,)


def test_file_objects_and_atomic_write(tmp_path):
    buf = io.BytesIO()
    tg.save({"w": tg.ones(3)}, buf)
    buf.seek(0)
    np.testing.assert_array_equal(tg.load(buf)["w"].numpy(), np.ones(3))
    path = tmp_path / "ckpt"  # no .npz suffix is added
    tg.save({"x": 1}, path)
    assert path.exists() and [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_unsavable_objects_raise():
    with pytest.raises(SerializationError, match="state_dict"):
        tg.save({"model": nn.Linear(1, 1)}, io.BytesIO())
    with pytest.raises(SerializationError, match="object"):
        tg.save({"a": np.array([object()])}, io.BytesIO())
    with pytest.raises(SerializationError, match="key"):
        tg.save({(1, 2): 3}, io.BytesIO())


def test_truncated_file(tmp_path):
    path = tmp_path / "full.npz"
    tg.save({"w": tg.randn(64, 64), "b": tg.zeros(64)}, path)
    data = path.read_bytes()
    for cut in (len(data) // 2, len(data) - 30, 10):
        bad = tmp_path / f"cut{cut}.npz"
        bad.write_bytes(data[:cut])
        with pytest.raises(SerializationError, match="not a readable tapegrad checkpoint"):
            tg.load(bad)


def test_foreign_files(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello, I am not a checkpoint\n" * 10)
    plain = tmp_path / "plain.npz"
    np.savez(plain, a=np.zeros(3))
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, __tapegrad__=np.array(["x"]), evil=np.array([{"a": 1}], dtype=object))
    single = tmp_path / "single.npy"
    np.save(single, np.zeros(2))
    junk_meta = tmp_path / "junk.npz"
    np.savez(junk_meta, __tapegrad__=np.array("{not json"))
    for path in (text, plain, pickled, single, junk_meta):
        with pytest.raises(SerializationError) as e:
            tg.load(path)
        assert isinstance(e.value, TapegradError) and isinstance(e.value, ValueError)
        assert path.name in str(e.value)
    # a pickled object array referenced by valid metadata is refused too, not unpickled
    sneaky = tmp_path / "sneaky.npz"
    meta = '{"format": "tapegrad-npz", "version": 1, "tree": {"$array": "evil"}}'
    np.savez(sneaky, __tapegrad__=np.array(meta), evil=np.array([{"a": 1}], dtype=object))
    with pytest.raises(SerializationError, match="pickle"):
        tg.load(sneaky)
    with pytest.raises(FileNotFoundError):
        tg.load(tmp_path / "missing.npz")
    assert zipfile.is_zipfile(plain)


def test_optimizer_state_round_trip(tmp_path):
    tg.manual_seed(0)
    net = nn.Linear(3, 2)
    opt = optim.Adam(net.parameters(), lr=0.01, betas=(0.8, 0.95))
    net(tg.randn(4, 3)).sum().backward()
    opt.step()
    tg.save(opt.state_dict(), tmp_path / "opt.npz")
    back = tg.load(tmp_path / "opt.npz")
    assert back["param_groups"][0]["betas"] == (0.8, 0.95)
    assert back["param_groups"][0]["params"] == [0, 1]
    assert set(back["state"]) == {0, 1} and back["state"][0]["step"] == 1
    np.testing.assert_array_equal(back["state"][1]["exp_avg"], opt.state[net.bias]["exp_avg"])


@pytest.mark.gpu
def test_device_round_trip(tmp_path):
    t = tg.randn(3, device="cuda")
    tg.save({"t": t, "raw": t.data}, tmp_path / "g.npz")
    back = tg.load(tmp_path / "g.npz")
    assert back["t"].device.type == "cpu" and isinstance(back["raw"], np.ndarray)
    on_gpu = tg.load(tmp_path / "g.npz", device="cuda")
    assert on_gpu["t"].device.type == "cuda"
    np.testing.assert_array_equal(on_gpu["t"].numpy(), t.numpy())
