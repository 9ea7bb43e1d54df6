"""tapegrad.save(model) / tapegrad.load(f, weights_only=False): whole modules without
pickle, the allow-list of classes, weights_only, and damaged module files."""

import io
import json
import sys
import zipfile

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import nn, ops, optim
from tapegrad.errors import ArgumentError, ArgumentTypeError
from tapegrad.serialization import (
    SerializationError,
    add_safe_globals,
    clear_safe_globals,
    get_safe_globals,
    safe_globals,
)


@pytest.fixture(autouse=True)
def _empty_allow_list():
    clear_safe_globals()
    yield
    clear_safe_globals()


# ------------------------------------------------------------------ user modules
class MLP(nn.Module):
    """A user module with a list of layer sizes and an activation by name."""

    def __init__(self, sizes=(4, 8, 3), activation="tanh"):
        super().__init__()
        self.sizes = list(sizes)
        self.activation = activation
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self.scale = nn.ParameterDict({"out": nn.Parameter(tg.ones(sizes[-1]))})
        self.register_buffer("calls", tg.zeros(1), persistent=False)
        self.meta = {"name": "mlp", "shape": (None, sizes[0]), "dtype": tg.float32,
                     "device": tg.device("cpu"), "eps": 1e-6, "flags": [True, False]}

    def forward(self, x):
        act = getattr(ops, self.activation)
        for layer in self.layers[:-1]:
            x = act(layer(x))
        return self.layers[-1](x) * self.scale["out"]


class Mixer(nn.Module):
    """Containers of every kind, a frozen parameter and a function attribute."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 2)})
        self.gains = nn.ParameterList([nn.Parameter(tg.randn(2)) for _ in range(2)])
        self.frozen = nn.Parameter(tg.randn(4), requires_grad=False)
        self.fn = ops.sigmoid
        self.kind = np.float64  # a scalar type, as a dtype argument

    def forward(self, x):
        x = self.fn(x + self.frozen)
        return sum(h(x) * g for h, g in zip(self.heads.values(), self.gains))


class Tied(nn.Module):
    """A shared submodule and a tied weight (a language model's embedding/decoder)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.block = nn.Linear(4, 4)
        self.stack = nn.Sequential(self.block, nn.ReLU(), self.block)
        self.decoder = nn.Linear(4, 10, bias=False)
        self.decoder.weight = self.embed.weight

    def forward(self, idx):
        return self.decoder(self.stack(self.embed(idx)))


class Holder(nn.Module):
    def __init__(self, value):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(2, 2))
        self.inner.thing = value


USER = [MLP, Mixer, Tied, Holder]


def _lstm():
    if not hasattr(nn, "LSTM"):
        pytest.skip("tapegrad.nn has no LSTM")
    return nn.LSTM(3, 5, num_layers=2, batch_first=True, bidirectional=True)


def _conv_bn():
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(),
                        nn.Linear(8, 3))
    net(tg.randn(4, 1, 4, 4))  # moves the running statistics
    return net.eval()


MODELS = {
    "sequential": (_conv_bn, lambda: tg.randn(2, 1, 4, 4)),
    "mlp": (lambda: MLP((4, 8, 8, 3), "relu"), lambda: tg.randn(5, 4)),
    "containers": (Mixer, lambda: tg.randn(3, 4)),
    "tied": (Tied, lambda: tg.tensor([[1, 2, 3], [4, 5, 9]])),
    "lstm": (_lstm, lambda: tg.randn(2, 4, 3)),
    "encoder_layer": (lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0),
                      lambda: tg.randn(3, 2, 8)),
    "encoder_gelu": (lambda: nn.TransformerEncoder(
        nn.TransformerEncoderLayer(8, 2, 16, activation="gelu", batch_first=True,
                                   norm_first=True), 2, norm=nn.LayerNorm(8)).eval(),
        lambda: tg.randn(2, 3, 8)),
    "attention": (lambda: nn.MultiheadAttention(8, 2, kdim=6, vdim=5, batch_first=True),
                  lambda: (tg.randn(2, 3, 8), tg.randn(2, 4, 6), tg.randn(2, 4, 5))),
    "transformer": (lambda: nn.Transformer(8, 2, 1, 1, 16, dropout=0.0),
                    lambda: (tg.randn(4, 2, 8), tg.randn(3, 2, 8))),
}


def _saved(obj):
    buf = io.BytesIO()
    tg.save(obj, buf)
    return buf.getvalue()


def _load(data, **kw):
    kw.setdefault("weights_only", False)
    return tg.load(io.BytesIO(data), **kw)


def _round_trip(obj, **kw):
    return _load(_saved(obj), **kw)


def _outputs(model, x):
    out = model(*x) if isinstance(x, tuple) else model(x)
    out = out[0] if isinstance(out, tuple) else out
    return out.numpy()


def _assert_same_module(back, model, check_repr=True):
    """Same classes, registries, flags and attributes; equal arrays; shared stays shared."""
    assert type(back) is type(model)
    if check_repr:  # the layers' extra_repr read their attributes
        assert repr(back) == repr(model)
    mods, bmods = dict(model.named_modules()), dict(back.named_modules())
    assert list(bmods) == list(mods)
    for name, m in mods.items():
        b = bmods[name]
        assert type(b) is type(m) and b.training == m.training, name
        for reg in ("_parameters", "_buffers", "_modules"):
            assert list(b.__dict__[reg]) == list(m.__dict__[reg]), (name, reg)
        assert b._non_persistent == m._non_persistent, name
        for k, v in m.__dict__.items():
            if k not in ("_parameters", "_buffers", "_modules", "_non_persistent") and \
                    not isinstance(v, (nn.Module, tg.Tensor)):
                assert type(b.__dict__[k]) is type(v) and b.__dict__[k] == v, (name, k)
    params, bparams = list(model.named_parameters()), list(back.named_parameters())
    assert [n for n, _ in bparams] == [n for n, _ in params]  # ties: counted once
    for (n, p), (_, q) in zip(params, bparams):
        assert type(q) is nn.Parameter and q.requires_grad == p.requires_grad, n
        assert q.dtype == p.dtype and q.grad is None, n
        np.testing.assert_array_equal(q.numpy(), p.numpy(), err_msg=n)
    for (n, b), (_, c) in zip(model.named_buffers(), back.named_buffers()):
        assert c.dtype == b.dtype, n
        np.testing.assert_array_equal(c.numpy(), b.numpy(), err_msg=n)


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("case", list(MODELS))
def test_round_trip_outputs_bitwise(case):
    build, inputs = MODELS[case]
    tg.manual_seed(0)
    model = build()
    x = inputs()
    with safe_globals(USER):
        back = _round_trip(model)
    _assert_same_module(back, model)
    np.testing.assert_array_equal(_outputs(back, x), _outputs(model, x))


def test_path_file_and_array_entry_names(tmp_path):
    tg.manual_seed(0)
    model = _conv_bn()
    path = tmp_path / "model.npz"
    tg.save(model, path)
    back = tg.load(path, weights_only=False)
    _assert_same_module(back, model)
    with np.load(path, allow_pickle=False) as raw:  # plain NumPy still reads the weights
        assert set(raw.files) == {"__tapegrad__", *model.state_dict()}
        np.testing.assert_array_equal(raw["4.weight"], model[4].weight.numpy())
        meta = json.loads(raw["__tapegrad__"].item())
    assert meta["version"] == 2 and meta["tree"]["$module"] == "tapegrad.nn.container.Sequential"
    with np.load(io.BytesIO(_saved(model.state_dict()))) as raw:  # older readers read these
        assert json.loads(raw["__tapegrad__"].item())["version"] == 1


def test_training_flags_frozen_parameters_and_ties():
    tg.manual_seed(0)
    model = Tied()
    model.stack[1].eval()  # a mode that differs from its parent's
    model.block.bias.requires_grad_(False)
    with safe_globals([Tied]):
        back = _round_trip(model)
    assert back.training and not back.stack[1].training and back.stack[0].training
    assert back.decoder.weight is back.embed.weight
    assert back.stack[0] is back.stack[2] is back.block
    assert not back.block.bias.requires_grad and back.block.weight.requires_grad
    assert len(list(back.parameters())) == len(list(model.parameters())) == 3


def test_optimizer_trains_the_loaded_model_as_the_original():
    tg.manual_seed(0)
    model = MLP((4, 6, 3))
    x, y = tg.randn(8, 4), tg.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    with safe_globals([MLP]):
        back = _round_trip(model)
    losses = {}
    for name, m in (("orig", model), ("loaded", back)):
        opt = optim.Adam(m.parameters(), lr=0.05)
        losses[name] = []
        for _ in range(5):
            opt.zero_grad()
            loss = nn.CrossEntropyLoss()(m(x), y)
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    assert losses["loaded"] == losses["orig"] and losses["loaded"][-1] < losses["loaded"][0]
    for p, q in zip(model.parameters(), back.parameters()):
        np.testing.assert_array_equal(q.numpy(), p.numpy())


def test_modules_inside_a_checkpoint_dict():
    tg.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(tg.randn(2, 3)).sum().backward()
    opt.step()
    back = _round_trip({"model": model, "optim": opt.state_dict(), "epoch": 3,
                        "dtype": tg.int64, "act": nn.functional.gelu})
    _assert_same_module(back["model"], model)
    assert back["epoch"] == 3 and back["dtype"] == np.int64 and back["act"] is ops.gelu
    opt2 = optim.SGD(back["model"].parameters(), lr=0.1, momentum=0.9)
    opt2.load_state_dict(back["optim"])


def test_map_location_moves_tensors_and_device_attributes():
    data = _edit(_saved(MLP()), lambda t: _set_attr(t, "meta", {"$dict": [
        ["device", {"$device": "cuda:999"}]]}))  # no machine has it
    with safe_globals([MLP]):
        with pytest.raises(SerializationError, match="map_location='cpu'"):
            _load(data)
        back = _load(data, map_location="cpu")
    assert back.meta["device"] is tg.device("cpu")


def test_a_model_on_a_device_loads_anywhere():
    from tapegrad.testing.fakedevice import FakeArray, fake_device

    dev = fake_device()
    tg.manual_seed(0)
    model = MLP((4, 5, 2))
    x = tg.randn(3, 4)
    expected = model(x).numpy()
    model.to(dev)
    data = _saved(model)
    with safe_globals([MLP]):
        on_cpu = _load(data)
        on_dev = _load(data, map_location=dev)
    np.testing.assert_array_equal(on_cpu(x).numpy(), expected)
    assert all(p.device is dev and isinstance(p.array, FakeArray) for p in on_dev.parameters())
    assert on_dev.meta["device"] is dev  # device attributes follow map_location
    np.testing.assert_array_equal(on_dev(x.to(dev)).cpu().numpy(), expected)
    model.meta["device"] = dev  # not a device a file can name
    with pytest.raises(SerializationError, match="neither 'cpu' nor 'cuda:N'"):
        tg.save(model, io.BytesIO())


@pytest.mark.gpu
def test_a_module_loads_onto_the_gpu():
    tg.manual_seed(0)
    model = _conv_bn()
    x = tg.randn(2, 1, 4, 4)
    back = _load(_saved(model), map_location="cuda")
    assert all(t.device.type == "cuda" for t in [*back.parameters(), *back.buffers()])
    np.testing.assert_allclose(back(x.to("cuda")).cpu().numpy(), model(x).numpy(),
                               rtol=1e-5, atol=1e-6)
    again = _load(_saved(back))  # saved from the GPU, loaded on the CPU
    np.testing.assert_array_equal(again(x).numpy(), model(x).numpy())


def test_hooks_are_not_saved(monkeypatch):
    model = nn.Linear(2, 2)
    model.__dict__["_forward_hooks"] = {1: lambda *a: None}  # as Module.__init__ would make
    monkeypatch.setattr("tapegrad.serialization_modules._INTERNAL",
                        frozenset({*nn.Module().__dict__, "_forward_hooks"}))
    back = _round_trip(model)
    assert "_forward_hooks" not in back.__dict__ and back.in_features == 2


# ------------------------------------------------------------------ the allow-list
def _saved_elsewhere(model, name="not_loaded_pkg.MLP"):
    """A file naming a class no loaded module defines (weights_only=False then finds
    it only through the allow-list)."""
    return _edit(_saved(model), lambda t: t.update({"$module": name}))


def test_unregistered_class_is_refused_and_registered_loads():
    data = _saved_elsewhere(MLP())
    with pytest.raises(SerializationError,
                       match=r"names class '.*MLP'.*add_safe_globals\(\[MLP\]\)"):
        _load(data)
    add_safe_globals([(MLP, "not_loaded_pkg.MLP")])
    assert type(_load(data)) is MLP
    clear_safe_globals()
    assert get_safe_globals() == []
    with pytest.raises(SerializationError, match="not in the allow-list"):
        _load(data)
    add_safe_globals([MLP])
    assert get_safe_globals() == [MLP]


def test_safe_globals_context_restores_the_list():
    add_safe_globals([Tied])
    data = _saved_elsewhere(MLP())
    with safe_globals([(MLP, "not_loaded_pkg.MLP"), (Mixer, "elsewhere.Mixer")]):
        assert get_safe_globals() == [Tied, (MLP, "not_loaded_pkg.MLP"),
                                      (Mixer, "elsewhere.Mixer")]
        assert type(_load(data)) is MLP
    assert get_safe_globals() == [Tied]
    with pytest.raises(SerializationError, match="MLP"):
        _load(data)


def test_weights_only_false_finds_module_classes_already_loaded_and_nothing_else():
    """torch.save(model) / torch.load(path, weights_only=False) in the script that
    defines the class works as in PyTorch; no name is imported, no non-Module taken."""
    model = MLP()
    back = _load(_saved(model), weights_only=False)
    assert type(back) is MLP
    x = tg.randn(2, 4)
    assert back(x).tolist() == model(x).tolist()
    data = _saved(MLP())
    for name in ("os.system", "collections.OrderedDict", "tapegrad_never_imported_xyz.Net",
                 f"{__name__}._load"):
        edited = _edit(data, lambda t, n=name: t.update({"$module": n}))
        with pytest.raises(SerializationError):
            _load(edited, weights_only=False)
    import sys
    assert "tapegrad_never_imported_xyz" not in sys.modules


def test_a_class_saved_under_another_name():
    data = _edit(_saved(Holder(3)), lambda t: t.update({"$module": "__main__.Holder"}))
    with pytest.raises(SerializationError, match=r"\(Holder, '__main__.Holder'\)"):
        _load(data)
    with safe_globals([(Holder, "__main__.Holder")]):
        assert _load(data).inner.thing == 3


def test_add_safe_globals_arguments():
    with pytest.raises(ArgumentTypeError, match="list"):
        add_safe_globals(MLP)
    with pytest.raises(ArgumentTypeError, match="not a class"):
        add_safe_globals(["tapegrad.nn.Linear"])
    with pytest.raises(ArgumentTypeError, match="not a class"):
        add_safe_globals([(MLP, 3)])
    assert get_safe_globals() == []


def test_names_are_never_imported(tmp_path, monkeypatch):
    (tmp_path / "planted_module.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('ran').write_text('x')\n"
        "class Evil:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("planted_module.Evil", "os.system", "builtins.eval", "subprocess.Popen"):
        data = _edit(_saved(nn.ReLU()), lambda t, name=name: t.update({"$module": name}))
        with pytest.raises(SerializationError, match="not in the allow-list"):
            _load(data)
        data = _edit(_saved(nn.TransformerEncoderLayer(4, 1, 4)),
                     lambda t, name=name: _set_attr(t, "activation", {"$global": name}))
        with pytest.raises(SerializationError, match="not in the allow-list"):
            _load(data)
    assert "planted_module" not in sys.modules and not (tmp_path / "ran").exists()


def test_an_allowed_name_that_is_not_a_module_class():
    data = _edit(_saved(nn.ReLU()), lambda t: t.update({"$module": "tapegrad.ops.activation.relu"}))
    with pytest.raises(SerializationError, match="not an nn.Module class"):
        _load(data)


# ------------------------------------------------------------------ weights_only
def test_weights_only_refuses_whole_modules():
    data = _saved(nn.Sequential(nn.Linear(2, 2)))
    for kw in ({}, {"weights_only": None}, {"weights_only": True}):
        with pytest.raises(SerializationError,
                           match="whole module.*weights_only=False.*state_dict"):
            tg.load(io.BytesIO(data), **kw)
    assert type(tg.load(io.BytesIO(data), weights_only=False)) is nn.Sequential
    # as PyTorch: registering every class the file names lets weights_only=True load it
    with safe_globals([nn.Sequential]), pytest.raises(SerializationError, match="Linear"):
        tg.load(io.BytesIO(data), weights_only=True)
    with safe_globals([nn.Sequential, nn.Linear]):
        assert type(tg.load(io.BytesIO(data), weights_only=True)) is nn.Sequential
    layer = _saved(nn.TransformerEncoderLayer(4, 1, 4))  # names ops.relu too
    with safe_globals([nn.TransformerEncoderLayer, nn.MultiheadAttention, nn.Linear,
                       nn.LayerNorm, nn.Dropout]):
        with pytest.raises(SerializationError, match="reference to 'tapegrad.ops.activation"):
            tg.load(io.BytesIO(layer))
        with safe_globals([ops.relu]):
            assert tg.load(io.BytesIO(layer)).activation is ops.relu


def test_weights_only_loads_plain_weights_either_way():
    sd = nn.Linear(3, 2).state_dict()
    data = _saved({"model": sd, "epoch": 1})
    for kw in ({}, {"weights_only": True}, {"weights_only": False}):
        back = tg.load(io.BytesIO(data), **kw)
        np.testing.assert_array_equal(back["model"]["weight"].numpy(), sd["weight"].numpy())


def test_torch_signature_arguments():
    data = _saved({"w": tg.ones(2)})
    assert tg.load(io.BytesIO(data), "cpu", None)["w"].shape == (2,)  # torch's positions
    for mmap in (None, False, True):
        assert tg.load(io.BytesIO(data), mmap=mmap, weights_only=True)["w"].shape == (2,)
    import pickle

    with pytest.raises(ArgumentError, match="never unpickled"):
        tg.load(io.BytesIO(data), pickle_module=pickle)
    with pytest.raises(ArgumentTypeError, match="weights_only"):
        tg.load(io.BytesIO(data), weights_only="no")
    with pytest.raises(ArgumentTypeError, match="mmap"):
        tg.load(io.BytesIO(data), mmap="r")


# ------------------------------------------------------------------ refused at save
class Opaque:
    pass


def _local_function(x):
    def inner(y):
        return y

    return inner


@pytest.mark.parametrize("value,match", [
    (lambda x: x, "<lambda> at key inner.thing: it is a lambda"),
    (_local_function(1), "inner at key inner.thing: it is a class or function defined inside"),
    (Opaque(), "cannot store a Opaque at key inner.thing"),
    ([1, {"a": Opaque()}], "cannot store a Opaque at key inner.thing.1.a"),
    (tg.ones(2).sum, r"\.sum at key inner.thing: it is a bound method"),
    ([].append, "list.append at key inner.thing: it is a bound method"),
    (np.dtype("O"), "dtype object at key inner.thing"),
    (open, None),  # a module-level builtin: stored by name, refused at load
])
def test_refused_at_save_with_the_attribute_path(value, match):
    model = Holder(value)
    if match is None:
        with safe_globals([Holder]), pytest.raises(SerializationError, match="names 'io.open'"):
            _round_trip(model)
        return
    with pytest.raises(SerializationError, match=match):
        tg.save(model, io.BytesIO())


def test_cycles_and_depth_are_refused_at_save():
    outer = nn.Sequential(nn.Linear(1, 1))
    outer[0].back = [outer]
    with pytest.raises(SerializationError, match="own ancestor"):
        tg.save(outer, io.BytesIO())
    deep = nn.Identity()
    for _ in range(120):
        deep = nn.Sequential(deep)
    with pytest.raises(SerializationError, match="MAX_DEPTH"):
        tg.save(deep, io.BytesIO())


def test_limits_apply_to_module_trees():
    deep = nn.Identity()
    for _ in range(30):
        deep = nn.Sequential(deep)
    data = _saved(deep)
    assert type(_load(data)) is nn.Sequential
    with pytest.raises(SerializationError, match="max_depth=20"):
        _load(data, max_depth=20)
    wide = nn.ModuleList(nn.ReLU() for _ in range(50))
    with pytest.raises(SerializationError, match="max_entries=40"):
        _load(_saved(wide), max_entries=40)
    assert len(_load(_saved(wide), max_entries=60)) == 50


# ------------------------------------------------------------------ malformed files
def _meta_of(data):
    with zipfile.ZipFile(io.BytesIO(data)) as z, z.open("__tapegrad__.npy") as fh:
        return json.loads(np.lib.format.read_array(fh).item())


def _rewrite(data, meta, drop=()):
    """``data`` with its metadata replaced by ``meta`` and the entries ``drop`` left out."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            if info.filename == "__tapegrad__.npy":
                buf = io.BytesIO()
                np.save(buf, np.array(json.dumps(meta)))
                dst.writestr(info.filename, buf.getvalue())
            elif info.filename[:-4] not in drop:
                dst.writestr(info.filename, src.read(info))
    return out.getvalue()


def _edit(data, change):
    meta = _meta_of(data)
    change(meta["tree"])
    return _rewrite(data, meta)


def _field(node, field, name):
    return next(item for item in node[field] if item[0] == name)


def _set_attr(node, name, value):
    _field(node, "attributes", name)[1] = value


def _linear_tree(t):
    return _field(t, "modules", "0")[1]


MALFORMED = [
    (lambda t: t.pop("training"), "unknown entry"),
    (lambda t: t.update({"training": 1}), "malformed module"),
    (lambda t: t.update({"$module": 3}), "malformed module"),
    (lambda t: t.update({"modules": {"0": 1}}), "malformed module.*modules"),
    (lambda t: t["modules"].append(["x"]), "malformed modules item"),
    (lambda t: t["modules"].append(["0", None]), "repeated name '0'"),
    (lambda t: t["modules"].append(["a.b", None]), "invalid or repeated name 'a.b'"),
    (lambda t: t["attributes"].append(["_parameters", 1]), "invalid .* name '_parameters'"),
    (lambda t: t["attributes"].append(["training", 1]), "invalid .* name 'training'"),
    (lambda t: t["parameters"].append(["w", {"$module_ref": 0}]), "parameters of the module.*"
     r"can only hold \$parameter/\$tensor_ref"),
    (lambda t: t["parameters"].append(["w", 1.5]), "can only hold"),
    (lambda t: t["modules"].append(["w", {"$parameter": "0.bias", "requires_grad": True}]),
     "modules of the module.*can only hold"),
    (lambda t: t["buffers"].append(["w", {"$module_ref": 0}]), "buffers of the module"),
    (lambda t: t["modules"].append(["w", {"$module_ref": 0}]), "not a complete module"),
    (lambda t: t["modules"].append(["w", {"$module_ref": 5}]), "not a complete module"),
    (lambda t: t["modules"].append(["w", {"$module_ref": True}]), "not a complete module"),
    (lambda t: t["modules"].insert(0, ["w", {"$module_ref": 1}]), "not a complete module"),
    (lambda t: t["attributes"].append(["w", {"$tensor_ref": "nope"}]), "comes nowhere"),
    (lambda t: t["parameters"].append(["w", {"$tensor_ref": "0.weight"}]), "comes nowhere"),
    (lambda t: t["attributes"].append(["w", {"$array": "0.weight"}]), "repeated array"),
    (lambda t: t["non_persistent"].append("weight"), "malformed non_persistent"),
    (lambda t: t.update({"non_persistent": "x"}), "malformed non_persistent"),
    (lambda t: _set_attr(_linear_tree(t), "in_features", {"$dtype": "object"}),
     "unknown entry"),
    (lambda t: _set_attr(_linear_tree(t), "in_features", {"$dtype": ["float32"]}),
     "unknown entry"),
    (lambda t: _set_attr(_linear_tree(t), "in_features", {"$dtype": "int8", "type": 1}),
     "unknown entry"),
    (lambda t: _set_attr(_linear_tree(t), "in_features", {"$device": "mps"}), "unknown entry"),
    (lambda t: _set_attr(_linear_tree(t), "in_features", {"$global": 7}), "unknown entry"),
    (lambda t: _field(_linear_tree(t), "parameters", "weight")[1].update(requires_grad=None),
     "unknown entry"),
    (lambda t: _field(_linear_tree(t), "parameters", "bias")[1].update(
        {"$parameter": "0.weight"}), "repeated array reference"),
    (lambda t: _field(t, "modules", "1")[1].update({"$module": "tapegrad.nn.linear.Lineer"}),
     "'tapegrad.nn.linear.Lineer' .*not in the allow-list"),
]


@pytest.mark.parametrize("change,match", MALFORMED)
def test_malformed_module_metadata(change, match):
    data = _saved(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
    _load(_edit(data, lambda t: None))  # the rewrite itself keeps the file loadable
    with pytest.raises(SerializationError, match=match):
        _load(_edit(data, change))


def test_a_parameter_missing_from_the_archive():
    data = _saved(nn.Sequential(nn.Linear(2, 2)))
    with pytest.raises(SerializationError, match="'0.bias' that the archive does not hold"):
        _load(_rewrite(data, _meta_of(data), drop={"0.bias"}))


def test_a_parameter_that_cannot_require_grad():
    model = nn.Linear(2, 2)
    model.index = nn.Parameter(tg.tensor([1, 2]), requires_grad=False)
    data = _saved(model)
    assert _load(data).index.dtype == np.int64
    bad = _edit(data, lambda t: _field(t, "parameters", "index")[1].update(requires_grad=True))
    with pytest.raises(SerializationError, match="'index' is a Parameter that requires grad"):
        _load(bad)


def test_tensor_references_keep_identity_and_their_kind():
    first = nn.Linear(2, 2)
    first.register_buffer("ref", tg.zeros(2))
    first.alias = [first.ref, first.weight]
    data = _saved(nn.Sequential(first, nn.Linear(2, 2)))
    back = _load(data)
    assert back[0].alias[0] is back[0].ref and type(back[0].ref) is tg.Tensor
    assert back[0].alias[1] is back[0].weight

    def plain_tensor_as_parameter(t):
        _field(_field(t, "modules", "1")[1], "parameters", "bias")[1] = {"$tensor_ref": "0.ref"}

    with pytest.raises(SerializationError, match="plain tensor as parameter 'bias'"):
        _load(_edit(data, plain_tensor_as_parameter))

    def tensor_in_parameter_slot(t):
        _field(_field(t, "modules", "1")[1], "parameters", "bias")[1]["$tensor"] = \
            _field(_field(t, "modules", "1")[1], "parameters", "bias")[1].pop("$parameter")

    with pytest.raises(SerializationError, match="can only hold"):
        _load(_edit(data, tensor_in_parameter_slot))

    def parameter_ref_as_parameter(t):  # a tie, written by hand: accepted
        _field(_field(t, "modules", "1")[1], "parameters", "weight")[1] = \
            {"$tensor_ref": "0.weight"}

    tied = _load(_edit(data, parameter_ref_as_parameter))
    assert tied[1].weight is tied[0].weight


# ------------------------------------------------------------------ fuzz
DATA = _saved(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)))
MODEL = _load(DATA)


def _load_or_none(data, **kw):
    try:
        return _load(data, **kw)
    except SerializationError:
        return None


@given(st.integers(0, len(DATA) - 1))
def test_truncated_module_files_are_refused(cut):
    assert _load_or_none(DATA[:cut]) is None


@given(st.lists(st.tuples(st.integers(0, len(DATA) - 1), st.integers(0, 7)), min_size=1,
                max_size=4))
def test_bit_flips_in_module_files_are_refused_or_harmless(flips):
    data = bytearray(DATA)
    for pos, bit in flips:
        data[pos] ^= 1 << bit
    back = _load_or_none(bytes(data))
    if back is not None:
        _assert_same_module(back, MODEL)


def _paths(node, path=()):
    """Every place in a JSON tree (as a key path), the root first."""
    yield path
    items = node.items() if isinstance(node, dict) else \
        enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        yield from _paths(v, (*path, k))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 6) | st.sampled_from(
        ["0", "weight", "0.weight", "2.bias", "x.y", "training", "float32", "cpu",
         "tapegrad.nn.linear.Linear", "tapegrad.nn.activation.ReLU", "builtins.eval"]),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(
        ["$module", "$module_ref", "$parameter", "$tensor_ref", "$tensor", "$global",
         "$dtype", "$device", "$dict", "$tuple", "requires_grad", "training", "parameters",
         "buffers", "modules", "attributes", "non_persistent", "type"]), c, max_size=4),
    max_leaves=8)
META = _meta_of(DATA)
PATHS = list(_paths(META["tree"]))


@given(st.sampled_from(PATHS), JSON, st.booleans())
def test_mutated_module_metadata(path, value, delete):
    meta = json.loads(json.dumps(META))
    if not path:
        meta["tree"] = value
    else:
        parent = meta["tree"]
        for k in path[:-1]:
            parent = parent[k]
        if delete and isinstance(parent, dict):
            del parent[path[-1]]
        elif delete:
            parent.pop(path[-1])
        else:
            parent[path[-1]] = value
    back = _load_or_none(_rewrite(DATA, meta))  # nothing but SerializationError escapes
    if back is not None:  # what load accepts, save writes and load reads back the same
        again = _load(_saved(back))
        assert type(again) is type(back)
        if isinstance(back, nn.Module):
            _assert_same_module(again, back, check_repr=False)
