"""nn.RNN / LSTM / GRU, their cells and nn.utils.rnn: parameter names, gradchecks
(first and second order) and errors without torch; outputs, final states and the
gradients of the input, the initial states and every parameter against torch.nn
with the same state_dict (float64), padded and packed, where torch is installed."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import nn
from tapegrad.errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError
from tapegrad.nn.utils import rnn as rnn_utils
from tapegrad.testing import gradcheck, gradgradcheck


def _rng(seed=0):
    return np.random.default_rng(seed)


# ----------------------------------------------------------------- torch-free
def test_parameter_names_and_shapes_are_pytorchs():
    m = nn.LSTM(3, 5, num_layers=2, bidirectional=True, proj_size=2)
    shapes = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    assert list(shapes)[:5] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                "weight_hr_l0"]
    assert shapes["weight_ih_l0"] == (20, 3) and shapes["weight_hh_l0"] == (20, 2)
    assert shapes["weight_ih_l1_reverse"] == (20, 4)  # 2 directions x proj_size 2
    assert shapes["weight_hr_l1_reverse"] == (2, 5)
    assert len(shapes) == 20
    g = nn.GRU(4, 6, bias=False)
    assert [k for k in g.state_dict()] == ["weight_ih_l0", "weight_hh_l0"]
    assert g.weight_ih_l0.shape == (18, 4)
    c = nn.LSTMCell(4, 3)
    assert sorted(c.state_dict()) == ["bias_hh", "bias_ih", "weight_hh", "weight_ih"]
    assert c.weight_hh.shape == (12, 3)
    r = nn.RNN(2, 3, 1, "relu")
    assert r.nonlinearity == "relu" and r.mode == "RNN_RELU"
    assert "nonlinearity=relu" in repr(nn.RNNCell(2, 3, nonlinearity="relu"))


def test_init_is_uniform_in_one_over_sqrt_hidden():
    tg.manual_seed(0)
    m = nn.GRU(7, 16, num_layers=2)
    for p in m.parameters():
        a = p.numpy()
        assert np.abs(a).max() <= 0.25 and np.abs(a).max() > 0.2


def test_layer_gradcheck_first_and_second_order():
    r = _rng(1)
    for mode in ("LSTM", "GRU", "RNN"):
        m = getattr(nn, mode)(2, 2, num_layers=2, bidirectional=True).double()
        inputs = [r.standard_normal((2, 1, 2)), r.standard_normal((4, 1, 2))]
        inputs += [p.numpy().copy() for p in m.parameters()]
        fn = _functional(m, mode)
        assert gradcheck(fn, inputs)
        assert gradgradcheck(fn, inputs[:6])  # x, h0 and layer 0's forward weights


def _functional(m, mode):
    """The module as a function of (x, h0, *its first len(ps) parameters)."""
    names = list(dict(m.named_parameters()))

    def fn(x, h0, *ps):
        saved = {n: getattr(m, n) for n in names[:len(ps)]}
        try:
            for n, p in zip(names, ps):
                object.__getattribute__(m, "_parameters")[n] = p
            hx = (h0, h0 * 0.5) if mode == "LSTM" else h0
            return m(x, hx)[0]
        finally:
            for n, p in saved.items():
                object.__getattribute__(m, "_parameters")[n] = p
    return fn


def test_packed_equals_padded_per_sequence():
    """A packed batch gives each sequence what it gives alone (its true last state)."""
    r = _rng(2)
    m = nn.LSTM(3, 4, num_layers=2, bidirectional=True).double()
    lengths = [5, 2, 4]
    seqs = [tg.tensor(r.standard_normal((n, 3))) for n in lengths]
    packed = rnn_utils.pack_sequence(seqs, enforce_sorted=False)
    out, (h, c) = m(packed)
    padded, lens = rnn_utils.pad_packed_sequence(out, batch_first=True)
    assert lens.tolist() == lengths
    for i, s in enumerate(seqs):
        o1, (h1, c1) = m(s)  # unbatched (L, H_in)
        np.testing.assert_allclose(padded.numpy()[i, :lengths[i]], o1.numpy(), rtol=1e-12)
        np.testing.assert_array_equal(padded.numpy()[i, lengths[i]:], 0.0)
        np.testing.assert_allclose(h.numpy()[:, i], h1.numpy(), rtol=1e-12)
        np.testing.assert_allclose(c.numpy()[:, i], c1.numpy(), rtol=1e-12)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("reverse", [False, True])
def test_whole_sequence_op_equals_the_step_cells_to_second_order(mode, reverse):
    """A padded sequence runs as one op (ops.rnn.Sequence); packed data with equal
    lengths runs the per-step cells: values, gradients and a Hessian-vector product
    agree."""
    r = _rng(5)
    g = {"lstm": 4, "gru": 3}.get(mode, 1)
    t, b, i, h = 4, 3, 2, 3
    arrays = [r.standard_normal(s) for s in ((t, b, i), (b, h), (b, h), (g * h, i), (g * h, h),
                                             (g * h,), (g * h,))]
    v = [r.standard_normal(s) for s in ((t, b, i), (g * h, h))]
    results = []
    for packed in (False, True):
        x, h0, c0, w_ih, w_hh, b_ih, b_hh = (tg.tensor(a, requires_grad=True) for a in arrays)
        xin = x.reshape(t * b, i) if packed else x
        hx = (h0, c0) if mode == "lstm" else h0
        out, hn = tg.ops.rnn_layer(xin, hx, w_ih, w_hh, b_ih, b_hh, mode=mode, reverse=reverse,
                                   batch_sizes=(b,) * t if packed else None)
        hn = hn[0] if mode == "lstm" else hn
        loss = (out.reshape(t, b, h) ** 2).sum() + (hn * hn).sum()
        gx, gw = tg.grad(loss, [x, w_hh], create_graph=True)
        hv = tg.grad((gx * tg.tensor(v[0])).sum() + (gw * tg.tensor(v[1])).sum(),
                     [x, h0, w_hh, b_hh])
        results.append([out.numpy().reshape(t, b, h), gx.numpy(), gw.numpy()] +
                       [a.numpy() for a in hv])
    for a, p in zip(*results):
        np.testing.assert_allclose(a, p, rtol=1e-11, atol=1e-12)


def test_eval_ignores_dropout_and_train_applies_it():
    tg.manual_seed(0)
    m = nn.GRU(3, 8, num_layers=2, dropout=0.5).double()
    x = tg.randn(4, 2, 3, dtype=tg.float64)
    m.eval()
    a, b = m(x)[0].numpy(), m(x)[0].numpy()
    np.testing.assert_array_equal(a, b)
    m.train()
    assert not np.allclose(m(x)[0].numpy(), a)
    with pytest.warns(UserWarning, match="dropout"):
        nn.LSTM(3, 4, dropout=0.2)


def test_errors_name_the_layer_and_the_shapes():
    m = nn.LSTM(3, 4)
    with pytest.raises(ShapeError, match="LSTM: input has 5 features"):
        m(tg.randn(2, 1, 5))
    with pytest.raises(ShapeError, match=r"h_0 of shape .*\(1, 1, 4\)"):
        m(tg.randn(2, 1, 3), (tg.zeros(2, 1, 4), tg.zeros(1, 1, 4)))
    with pytest.raises(ArgumentTypeError, match="tuple"):
        m(tg.randn(2, 1, 3), tg.zeros(1, 1, 4))
    with pytest.raises(DTypeError, match="float64"):
        m(tg.randn(2, 1, 3, dtype=tg.float64))
    with pytest.raises(ShapeError, match="empty"):
        m(tg.randn(0, 1, 3))
    with pytest.raises(ArgumentError, match="proj_size"):
        nn.RNNBase("GRU", 3, 4, proj_size=2)
    with pytest.raises(ArgumentError, match="proj_size"):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ArgumentError, match="nonlinearity"):
        nn.RNN(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ArgumentError, match="dropout"):
        nn.GRU(3, 4, dropout=1.5)
    with pytest.raises(ShapeError, match="hidden state"):
        nn.GRUCell(3, 4)(tg.randn(2, 3), tg.zeros(3, 4))
    with pytest.raises(ShapeError, match="exceeds the 3 time steps"):
        rnn_utils.pack_padded_sequence(tg.randn(3, 2, 1), [4, 1])


def test_pad_sequence_and_unpad():
    seqs = [tg.tensor([1.0, 2.0]), tg.tensor([3.0]), tg.tensor([4.0, 5.0, 6.0])]
    p = rnn_utils.pad_sequence(seqs, batch_first=True, padding_value=-1.0)
    np.testing.assert_array_equal(p.numpy(), [[1, 2, -1], [3, -1, -1], [4, 5, 6]])
    left = rnn_utils.pad_sequence(seqs, padding_side="left")
    np.testing.assert_array_equal(left.numpy().T, [[0, 1, 2], [0, 0, 3], [4, 5, 6]])
    back = rnn_utils.unpad_sequence(p, tg.tensor([2, 1, 3]), batch_first=True)
    for a, b in zip(back, seqs):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# ------------------------------------------------------------- against torch
torch = pytest.importorskip("torch")


def _pair(kind, kw, seed):
    torch.manual_seed(seed)
    tm = getattr(torch.nn, kind)(**kw).double()
    gm = getattr(nn, kind)(**kw).double()
    gm.load_state_dict({k: tg.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    return tm, gm


def _grads(tm, gm, inputs):
    for (n, p), q in zip(tm.named_parameters(), gm.parameters()):
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-9, atol=1e-11,
                                   err_msg=n)
    for t, g in inputs:
        np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-11)


@given(kind=st.sampled_from(["LSTM", "GRU", "RNN_tanh", "RNN_relu"]),
       layers=st.integers(1, 3), bidirectional=st.booleans(), batch_first=st.booleans(),
       bias=st.booleans(), proj=st.booleans(), with_hx=st.booleans(),
       steps=st.integers(1, 4), batch=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_layers_match_torch(kind, layers, bidirectional, batch_first, bias, proj, with_hx,
                            steps, batch, seed):
    kw = dict(input_size=3, hidden_size=4, num_layers=layers, bias=bias,
              batch_first=batch_first, bidirectional=bidirectional)
    if kind.startswith("RNN_"):
        kw["nonlinearity"] = kind[4:]
        kind = "RNN"
    if kind == "LSTM" and proj:
        kw["proj_size"] = 2
    tm, gm = _pair(kind, kw, seed)
    r = _rng(seed)
    x = r.standard_normal((batch, steps, 3) if batch_first else (steps, batch, 3))
    n = layers * (2 if bidirectional else 1)
    tx, gx = torch.tensor(x, requires_grad=True), tg.tensor(x, requires_grad=True)
    inputs = [(tx, gx)]
    th = gh = None
    if with_hx:
        h0 = r.standard_normal((n, batch, kw.get("proj_size") or 4))
        if kind == "LSTM":
            c0 = r.standard_normal((n, batch, 4))
            pairs = [(torch.tensor(a, requires_grad=True), tg.tensor(a, requires_grad=True))
                     for a in (h0, c0)]
            th, gh = tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
            inputs += pairs
        else:
            th, gh = torch.tensor(h0, requires_grad=True), tg.tensor(h0, requires_grad=True)
            inputs.append((th, gh))
    to, ts = tm(tx, th)
    go, gs = gm(gx, gh)
    np.testing.assert_allclose(go.numpy(), to.detach().numpy(), rtol=1e-10, atol=1e-12)
    ts, gs = (ts, gs) if kind == "LSTM" else ((ts,), (gs,))
    for a, b in zip(ts, gs):
        np.testing.assert_allclose(b.numpy(), a.detach().numpy(), rtol=1e-10, atol=1e-12)
    w = r.standard_normal(x.shape[:-1] + (to.shape[-1],))
    ((to * torch.tensor(w)).sum() + sum((s * s).sum() for s in ts)).backward()
    ((go * tg.tensor(w)).sum() + sum((s * s).sum() for s in gs)).backward()
    _grads(tm, gm, inputs)


@given(kind=st.sampled_from(["LSTM", "GRU", "RNN"]), bidirectional=st.booleans(),
       batch_first=st.booleans(), enforce_sorted=st.booleans(),
       lengths=st.lists(st.integers(1, 5), min_size=1, max_size=4), seed=st.integers(0, 999))
def test_packed_sequences_match_torch(kind, bidirectional, batch_first, enforce_sorted,
                                      lengths, seed):
    if enforce_sorted:
        lengths = sorted(lengths, reverse=True)
    tm, gm = _pair(kind, dict(input_size=2, hidden_size=3, num_layers=2,
                              bidirectional=bidirectional), seed)
    r = _rng(seed)
    x = r.standard_normal((len(lengths), max(lengths), 2))
    if not batch_first:
        x = x.transpose(1, 0, 2).copy()
    tx, gx = torch.tensor(x, requires_grad=True), tg.tensor(x, requires_grad=True)
    tp = torch.nn.utils.rnn.pack_padded_sequence(tx, torch.tensor(lengths), batch_first,
                                                 enforce_sorted)
    gp = rnn_utils.pack_padded_sequence(gx, tg.tensor(lengths), batch_first, enforce_sorted)
    np.testing.assert_array_equal(gp.batch_sizes.numpy(), tp.batch_sizes.numpy())
    np.testing.assert_array_equal(gp.data.numpy() if isinstance(gp.data, tg.Tensor)
                                  else gp.data, tp.data.detach().numpy())
    to, ts = tm(tp)
    go, gs = gm(gp)
    to, tl = torch.nn.utils.rnn.pad_packed_sequence(to, batch_first, total_length=6)
    go, gl = rnn_utils.pad_packed_sequence(go, batch_first, total_length=6)
    np.testing.assert_array_equal(gl.numpy(), tl.numpy())
    np.testing.assert_allclose(go.numpy(), to.detach().numpy(), rtol=1e-10, atol=1e-12)
    ts, gs = (ts, gs) if kind == "LSTM" else ((ts,), (gs,))
    for a, b in zip(ts, gs):
        np.testing.assert_allclose(b.numpy(), a.detach().numpy(), rtol=1e-10, atol=1e-12)
    (to.sum() + sum((s ** 2).sum() for s in ts)).backward()
    (go.sum() + sum((s ** 2).sum() for s in gs)).backward()
    _grads(tm, gm, [(tx, gx)])


@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "RNNCell"])
@pytest.mark.parametrize("unbatched", [False, True])
def test_cells_match_torch(kind, unbatched):
    tm, gm = _pair(kind, dict(input_size=3, hidden_size=4), 3)
    r = _rng(3)
    shape = (3,) if unbatched else (2, 3)
    x = r.standard_normal(shape)
    tx, gx = torch.tensor(x, requires_grad=True), tg.tensor(x, requires_grad=True)
    th, gh = None, None
    if kind != "LSTMCell":
        h = r.standard_normal(shape[:-1] + (4,))
        th, gh = torch.tensor(h, requires_grad=True), tg.tensor(h, requires_grad=True)
    to, go = tm(tx, th), gm(gx, gh)
    to, go = (to, go) if kind == "LSTMCell" else ((to,), (go,))
    for a, b in zip(to, go):
        np.testing.assert_allclose(b.numpy(), a.detach().numpy(), rtol=1e-12)
    sum((a * a).sum() for a in to).backward()
    sum((b * b).sum() for b in go).backward()
    _grads(tm, gm, [(tx, gx)] + ([(th, gh)] if th is not None else []))


def test_state_dicts_load_both_ways_in_float32():
    tm = torch.nn.LSTM(5, 6, num_layers=2, batch_first=True)
    gm = nn.LSTM(5, 6, num_layers=2, batch_first=True)
    tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in gm.state_dict().items()})
    x = _rng(4).standard_normal((3, 7, 5)).astype(np.float32)
    np.testing.assert_allclose(gm(tg.tensor(x))[0].numpy(),
                               tm(torch.tensor(x))[0].detach().numpy(), rtol=2e-5, atol=1e-6)
