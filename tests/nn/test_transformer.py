"""F.scaled_dot_product_attention, nn.MultiheadAttention and the Transformer layers:
gradchecks (first and second order), parameter names, init and errors without torch;
outputs, attention weights and gradients of inputs and every parameter against
torch.nn with the same state_dict (float64) where torch is installed."""

import copy
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn
from tapegrad.errors import ArgumentError, DTypeError, ShapeError
from tapegrad.testing import gradcheck, gradgradcheck

SDPA = F.scaled_dot_product_attention


def _rng(seed=0):
    return np.random.default_rng(seed)


# ----------------------------------------------------------------- torch-free
def test_sdpa_gradcheck_first_and_second_order_with_masks():
    r = _rng()
    q, k, v = (r.standard_normal(s) for s in ((2, 3, 4), (2, 5, 4), (2, 5, 3)))
    keep = r.random((3, 5)) > 0.5
    keep[:, 0], keep[1] = True, False  # row 1 sees no key
    cases = [
        (lambda q, k, v: SDPA(q, k, v, attn_mask=tg.tensor(keep)), [q, k, v]),
        (lambda q, k, v, m: SDPA(q, k, v, attn_mask=m, scale=0.7), [q, k, v, r.random((3, 5))]),
        (lambda q, k, v: SDPA(q, k, v, is_causal=True), [q, k, v]),
        (lambda q, k, v: SDPA(q, k, v, enable_gqa=True),
         [r.standard_normal((1, 4, 3, 2)), r.standard_normal((1, 2, 5, 2)),
          r.standard_normal((1, 2, 5, 3))]),
    ]
    for fn, inputs in cases:
        assert gradcheck(fn, inputs)
        assert gradgradcheck(fn, inputs)


def test_sdpa_fully_masked_row_gives_zeros_and_zero_gradient():
    r = _rng(1)
    q, k, v = (tg.tensor(r.standard_normal(s), requires_grad=True)
               for s in ((2, 3, 4), (2, 5, 4), (2, 5, 4)))
    keep = np.ones((3, 5), bool)
    keep[1] = False
    add = np.where(keep, 0.0, -np.inf)
    for mask in (tg.tensor(keep), tg.tensor(add)):
        out = SDPA(q, k, v, attn_mask=mask)
        np.testing.assert_array_equal(out.numpy()[:, 1], 0.0)
        out.sum().backward()
        for t in (q, k, v):
            assert np.isfinite(t.grad.numpy()).all()
        np.testing.assert_array_equal(q.grad.numpy()[:, 1], 0.0)
        q.grad = k.grad = v.grad = None


def test_sdpa_equals_a_direct_computation_and_keeps_float32():
    r = _rng(2)
    q, k, v = (r.standard_normal(s).astype(np.float32) for s in ((3, 4, 8), (3, 6, 8), (3, 6, 5)))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(8)
    s = np.where(np.tril(np.ones((4, 6), bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    want = (w / w.sum(-1, keepdims=True)) @ v
    out = SDPA(tg.tensor(q), tg.tensor(k), tg.tensor(v), is_causal=True)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)


def test_sdpa_dropout_drops_weights_and_rescales():
    tg.manual_seed(0)
    r = _rng(3)
    q, k = tg.tensor(r.standard_normal((4, 30, 4))), tg.tensor(r.standard_normal((4, 40, 4)))
    eye = tg.tensor(np.broadcast_to(np.eye(40), (4, 40, 40)).copy())  # output = the weights
    w = SDPA(q, k, eye).numpy()
    dropped = SDPA(q, k, eye, dropout_p=0.25).numpy()
    assert dropped.shape == w.shape
    kept = dropped != 0
    np.testing.assert_allclose(dropped[kept], w[kept] / 0.75)
    assert 0.65 < kept.mean() < 0.85
    np.testing.assert_array_equal(SDPA(q, k, eye, dropout_p=1.0).numpy(), 0.0)


def test_sdpa_errors_name_the_function_and_the_fix():
    q, k, v = tg.randn(2, 3, 4), tg.randn(2, 5, 4), tg.randn(2, 5, 4)
    bad = [
        (dict(attn_mask=tg.ones(3, 5, dtype=tg.bool), is_causal=True), ArgumentError, "not both"),
        (dict(attn_mask=tg.ones(3, 5, dtype=tg.int64)), DTypeError, "attn_mask"),
        (dict(attn_mask=tg.ones(4, 5, dtype=tg.bool)), ShapeError, "broadcast"),
        (dict(dropout_p=1.5), ArgumentError, "dropout_p"),
    ]
    for kw, err, words in bad:
        with pytest.raises(err, match=words):
            SDPA(q, k, v, **kw)
    with pytest.raises(ShapeError, match="same last axis"):
        SDPA(q, tg.randn(2, 5, 3), v)
    with pytest.raises(ShapeError, match="same length S"):
        SDPA(q, k, tg.randn(2, 6, 4))
    with pytest.raises(DTypeError, match="one floating dtype"):
        SDPA(q, k.double(), v)
    with pytest.raises(ShapeError, match="enable_gqa"):
        SDPA(tg.randn(1, 3, 3, 4), tg.randn(1, 2, 5, 4), tg.randn(1, 2, 5, 4), enable_gqa=True)
    with pytest.raises(ShapeError, match="enable_gqa=True"):
        SDPA(tg.randn(1, 4, 3, 4), tg.randn(1, 2, 5, 4), tg.randn(1, 2, 5, 4))


def _fd_parameters(module, loss, eps=1e-6):
    """Each parameter's gradient against central differences along a random direction."""
    module.zero_grad()
    loss().backward()
    r = _rng(7)
    for name, p in module.named_parameters():
        d = r.standard_normal(p.shape)
        want = float((p.grad.numpy() * d).sum())
        orig = p.array.copy()
        with tg.no_grad():
            p.array[...] = orig + eps * d
            up = float(loss())
            p.array[...] = orig - eps * d
            down = float(loss())
        p.array[...] = orig
        assert abs((up - down) / (2 * eps) - want) <= 1e-6 + 1e-5 * abs(want), name


def test_multihead_attention_gradchecks_inputs_and_parameters():
    tg.manual_seed(0)
    r = _rng(4)
    mha = nn.MultiheadAttention(4, 2, add_bias_kv=True, dtype=np.float64)
    x, mem = r.standard_normal((3, 2, 4)), r.standard_normal((5, 2, 4))
    masked = r.random((3, 5)) > 0.5
    masked[:, 0] = False
    assert gradcheck(lambda x: mha(x, x, x)[0], [x])
    assert gradgradcheck(lambda x: mha(x, x, x, need_weights=False)[0], [x])
    assert gradgradcheck(lambda x, m: mha(x, m, m, attn_mask=tg.tensor(masked))[1], [x, mem])
    cross = nn.MultiheadAttention(4, 2, kdim=3, vdim=2, add_zero_attn=True, dtype=np.float64)
    xs, k, v = (tg.tensor(r.standard_normal(s)) for s in ((3, 2, 4), (5, 2, 3), (5, 2, 2)))
    for m, args in ((mha, (xs, xs, xs)), (cross, (xs, k, v))):
        _fd_parameters(m, lambda m=m, args=args: (m(*args)[0] ** 2).sum())


def test_multihead_attention_parameter_names_shapes_and_init():
    tg.manual_seed(0)
    m = nn.MultiheadAttention(8, 2)
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == {
        "in_proj_weight": (24, 8), "in_proj_bias": (24,), "out_proj.weight": (8, 8),
        "out_proj.bias": (8,)}
    assert m.q_proj_weight is None and m.bias_k is None and m.head_dim == 4
    np.testing.assert_array_equal(m.in_proj_bias.numpy(), 0.0)
    np.testing.assert_array_equal(m.out_proj.bias.numpy(), 0.0)
    assert np.abs(m.in_proj_weight.numpy()).max() <= np.sqrt(6 / (8 + 24))  # xavier_uniform_
    m = nn.MultiheadAttention(8, 2, bias=False, add_bias_kv=True, kdim=3, vdim=5)
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == {
        "q_proj_weight": (8, 8), "k_proj_weight": (8, 3), "v_proj_weight": (8, 5),
        "bias_k": (1, 1, 8), "bias_v": (1, 1, 8), "out_proj.weight": (8, 8)}
    assert m.in_proj_weight is None and m.in_proj_bias is None and m.out_proj.bias is None
    assert np.abs(m.bias_k.numpy()).max() > 0


def test_multihead_attention_unbatched_equals_a_batch_of_one_and_dropout_scales_weights():
    tg.manual_seed(0)
    m = nn.MultiheadAttention(6, 3, dropout=0.5)
    x = tg.randn(4, 6)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    m.eval()
    out, w = m(x, x, x, attn_mask=mask, average_attn_weights=False)
    out1, w1 = m(x[:, None], x[:, None], x[:, None], attn_mask=mask, average_attn_weights=False)
    assert out.shape == (4, 6) and w.shape == (3, 4, 4)
    np.testing.assert_allclose(out.numpy(), out1.numpy()[:, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.numpy(), w1.numpy()[0], rtol=1e-5, atol=1e-6)
    m.train()
    _, wd = m(x, x, x, attn_mask=mask, average_attn_weights=False)
    kept = wd.numpy() != 0
    np.testing.assert_allclose(wd.numpy()[kept], 2 * w.numpy()[kept], rtol=1e-5)
    assert m(x, x, x, need_weights=False)[1] is None


def test_encoder_clones_the_layer_and_names_parameters_as_pytorch():
    tg.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16)
    enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8))
    names = list(enc.state_dict())
    assert names[:4] == ["layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias",
                         "layers.0.self_attn.out_proj.weight", "layers.0.self_attn.out_proj.bias"]
    assert names[-2:] == ["norm.weight", "norm.bias"] and len(names) == 2 * 12 + 2
    a, b = enc.layers[0].linear1.weight, enc.layers[1].linear1.weight
    assert a is not b and a is not layer.linear1.weight
    np.testing.assert_array_equal(a.numpy(), layer.linear1.weight.numpy())
    t = nn.Transformer(8, 2, 1, 1, 16)
    assert "decoder.layers.0.multihead_attn.in_proj_weight" in t.state_dict()
    assert isinstance(copy.deepcopy(t).decoder.layers[0].norm3, nn.LayerNorm)
    mask = nn.Transformer.generate_square_subsequent_mask(3).numpy()
    np.testing.assert_array_equal(mask, [[0, -np.inf, -np.inf], [0, 0, -np.inf], [0, 0, 0]])
    assert mask.dtype == np.float32


def test_layer_errors_name_the_layer():
    with pytest.raises(ArgumentError, match="divisible"):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(ArgumentError, match="activation"):
        nn.TransformerEncoderLayer(4, 2, activation="tanh")
    m = nn.MultiheadAttention(4, 2)
    x = tg.randn(3, 2, 4)
    with pytest.raises(ShapeError, match=r"MultiheadAttention\(embed_dim=4.*attn_mask"):
        m(x, x, x, attn_mask=tg.zeros(3, 4))
    with pytest.raises(ShapeError, match="key_padding_mask"):
        m(x, x, x, key_padding_mask=tg.zeros(3, 3, dtype=tg.bool))
    with pytest.raises(ShapeError, match="4 features"):
        m(tg.randn(3, 2, 5), x, x)
    with pytest.raises(DTypeError, match="bool or floating"):
        m(x, x, x, attn_mask=tg.zeros(3, 3, dtype=tg.int64))
    with pytest.raises(ArgumentError, match="is_causal=True is a hint"):
        m(x, x, x, is_causal=True)
    with pytest.raises(ShapeError, match="batch size"):
        nn.Transformer(4, 2, 1, 1, 8)(tg.randn(3, 2, 4), tg.randn(3, 1, 4))


def test_fused_inference_answers_pytorch_cannot_give_are_refused():
    tg.manual_seed(0)
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True).eval()
    x = tg.randn(2, 3, 4)
    with tg.no_grad(), pytest.raises(ArgumentError, match="other than 0 and -inf"):
        layer(x, src_mask=tg.randn(3, 3))
    layer(x, src_mask=tg.randn(3, 3))  # gradients needed: PyTorch adds the mask, so do we
    tanh = nn.TransformerEncoderLayer(4, 2, 8, batch_first=True, activation=nn.GELU("tanh"))
    with tg.no_grad(), pytest.raises(ArgumentError, match="exact GELU"):
        tanh.eval()(x)
    enc = nn.TransformerEncoder(layer, 1, mask_check=False)
    with tg.no_grad(), pytest.raises(ArgumentError, match="left-aligned"):
        enc(x, src_key_padding_mask=tg.tensor([[False, True, False], [False, False, True]]))


# ------------------------------------------------------------- against torch
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else t.numpy()


def _close(a, b, what, atol=1e-9):
    a, b = _np(a), _np(b)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    np.testing.assert_allclose(b, a, rtol=1e-7, atol=atol, err_msg=what)


def _twins(torch, make_torch, make_tg, seed):
    """A torch module and a tapegrad one with the same random float64 state_dict."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's enable_nested_tensor notice
        tm, gm = make_torch().double(), make_tg().double()
    assert [(k, tuple(v.shape)) for k, v in tm.state_dict().items()] == \
           [(k, tuple(v.shape)) for k, v in gm.state_dict().items()]
    r = _rng(seed)
    state = {k: r.uniform(-0.6, 0.6, tuple(v.shape)) for k, v in tm.state_dict().items()}
    tm.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    gm.load_state_dict({k: tg.tensor(v) for k, v in state.items()})
    back = {k: torch.tensor(_np(v)) for k, v in gm.state_dict().items()}
    assert tm.load_state_dict(back, strict=True)  # and back again
    return tm, gm


def _run_both(torch, tm, gm, arrays, kwargs, modules=None):
    """Call both on the same inputs; compare outputs, the inputs' gradients and those of
    every parameter of ``modules`` (default: tm and gm themselves)."""
    ti = [torch.tensor(a, requires_grad=True) for a in arrays]
    gi = [tg.tensor(a, requires_grad=True) for a in arrays]
    tk = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    gk = {k: tg.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        to, go = tm(*ti, **tk), gm(*gi, **gk)
    to, go = (to, go) if isinstance(to, tuple) else ((to,), (go,))
    for a, b in zip(to, go):
        assert (a is None) == (b is None)
        if a is not None:
            _close(a, b, "output")
    cot = _rng(9).standard_normal(tuple(to[0].shape))
    (to[0] * torch.tensor(cot)).sum().backward()
    (go[0] * tg.tensor(cot)).sum().backward()
    for n, (a, b) in enumerate(zip(ti, gi)):
        _close(a.grad, b.grad, f"grad of input {n}")
    tmod, gmod = (tm, gm) if modules is None else modules
    if tmod is None:
        return
    gp = dict(gmod.named_parameters())
    for name, p in tmod.named_parameters():
        _close(p.grad if p.grad is not None else torch.zeros_like(p),
               gp[name].grad if gp[name].grad is not None else tg.zeros(*p.shape),
               f"grad of {name}")


def _bool_mask(r, shape):
    m = r.random(shape) < 0.3
    m[..., 0] = False  # every query keeps key 0: no fully masked row
    return m


def _float_mask(r, shape):
    m = r.standard_normal(shape)
    m[..., 1:][r.random(m[..., 1:].shape) < 0.2] = -np.inf
    return m


def _mask(r, kind, shape):
    if kind == "bool":
        return _bool_mask(r, shape)
    if kind == "float":
        return _float_mask(r, shape)
    return None


@given(lead=st.sampled_from([(), (2,), (2, 3)]), length=st.integers(1, 4),
       src=st.integers(1, 5), e=st.integers(1, 4), ev=st.integers(1, 4),
       mask=st.sampled_from(["none", "bool", "float", "causal"]),
       scale=st.sampled_from([None, 0.5]), gqa=st.booleans(), seed=st.integers(0, 99))
def test_sdpa_matches_torch(torch, lead, length, src, e, ev, mask, scale, gqa, seed):
    r = _rng(seed)
    gqa = gqa and len(lead) == 2
    kv_lead = (lead[0], 1) if gqa else lead
    arrays = [r.standard_normal(lead + (length, e)), r.standard_normal(kv_lead + (src, e)),
              r.standard_normal(kv_lead + (src, ev))]
    kw = dict(scale=scale, enable_gqa=gqa, is_causal=mask == "causal")
    m = _mask(r, mask, (length, src))
    if m is not None:
        kw["attn_mask"] = ~m if mask == "bool" else m  # SDPA's bool: True takes part

    _run_both(torch, torch.nn.functional.scaled_dot_product_attention, SDPA, arrays, kw,
              (None, None))


@given(n=st.integers(1, 3), length=st.integers(1, 4), src=st.integers(1, 4),
       heads=st.sampled_from([1, 2, 3]), head_dim=st.integers(1, 3), batch_first=st.booleans(),
       kind=st.sampled_from(["self", "kv", "cross", "kvdims"]), bias=st.booleans(),
       bias_kv=st.booleans(), zero_attn=st.booleans(),
       attn=st.sampled_from(["none", "bool", "float", "bool3", "float3", "causal"]),
       kpm=st.sampled_from(["none", "bool", "float"]), need_weights=st.booleans(),
       average=st.booleans(), unbatched=st.booleans(), train=st.booleans(),
       seed=st.integers(0, 99))
def test_multihead_attention_matches_torch(torch, n, length, src, heads, head_dim, batch_first,
                                           kind, bias, bias_kv, zero_attn, attn, kpm,
                                           need_weights, average, unbatched, train, seed):
    r = _rng(seed)
    e = heads * head_dim
    kdim, vdim = (e + 1, e + 2) if kind == "kvdims" else (None, None)
    kw = dict(bias=bias, add_bias_kv=bias_kv, add_zero_attn=zero_attn, kdim=kdim, vdim=vdim,
              batch_first=batch_first)
    tm, gm = _twins(torch, lambda: torch.nn.MultiheadAttention(e, heads, **kw),
                    lambda: nn.MultiheadAttention(e, heads, **kw), seed)
    tm.train(train)
    gm.train(train)  # dropout 0: train mode differs only by PyTorch's fused-path choice
    if kind == "self":
        src = length
    b = () if unbatched else (n,)

    def seq(steps, dim):
        return r.standard_normal(((steps,) + b if not batch_first else b + (steps,)) + (dim,))

    q = seq(length, e)
    k = q if kind == "self" else seq(src, kdim or e)
    v = k if kind in ("self", "kv") else seq(src, vdim or e)
    arrays = [q] if kind == "self" else [q, k] if kind == "kv" else [q, k, v]
    call = dict(need_weights=need_weights, average_attn_weights=average)
    nb = 1 if unbatched else n
    if attn == "causal":
        call["attn_mask"] = np.triu(np.full((length, src), -np.inf), 1)
        call["is_causal"] = True
    elif attn != "none":
        shape = (length, src) if attn in ("bool", "float") else (nb * heads, length, src)
        call["attn_mask"] = _mask(r, attn.rstrip("3"), shape)
    if kpm != "none":
        call["key_padding_mask"] = _mask(r, kpm, b + (src,))

    def qkv(m):  # one input is self-attention, two share key and value
        def fwd(*xs, **kw):
            return m(*(xs * 3 if len(xs) == 1 else (*xs, xs[1]) if len(xs) == 2 else xs), **kw)
        return fwd

    _run_both(torch, qkv(tm), qkv(gm), arrays, call, (tm, gm))


_ACTS = {"relu": ("relu", "relu"), "gelu": ("gelu", "gelu"),
         "gelu-module": (lambda torch: torch.nn.GELU(), lambda: nn.GELU()),
         "silu": (lambda torch: torch.nn.functional.silu, lambda: F.silu)}


def _activation(torch, name):
    t, g = _ACTS[name]
    return (t, g) if isinstance(t, str) else (t(torch), g())


@given(decoder=st.booleans(), layers=st.integers(1, 2), final_norm=st.booleans(),
       n=st.integers(1, 2), length=st.integers(1, 4), mem=st.integers(1, 4),
       heads=st.sampled_from([1, 2]), batch_first=st.booleans(), norm_first=st.booleans(),
       act=st.sampled_from(sorted(_ACTS)), bias=st.booleans(),
       mask=st.sampled_from(["none", "causal", "bool", "causal-bool"]), hint=st.booleans(),
       kpm=st.booleans(), train=st.booleans(), seed=st.integers(0, 99))
def test_encoder_and_decoder_stacks_match_torch(torch, decoder, layers, final_norm, n, length,
                                                mem, heads, batch_first, norm_first, act,
                                                bias, mask, hint, kpm, train, seed):
    r = _rng(seed)
    d = 2 * heads
    ta, ga = _activation(torch, act)
    opts = dict(dim_feedforward=5, dropout=0.0, layer_norm_eps=1e-4, batch_first=batch_first,
                norm_first=norm_first, bias=bias)
    kind = "Decoder" if decoder else "Encoder"

    def make(lib, a):
        layer = getattr(lib, f"Transformer{kind}Layer")(d, heads, activation=a, **opts)
        norm = lib.LayerNorm(d) if final_norm else None
        return getattr(lib, f"Transformer{kind}")(layer, layers, norm)

    if decoder and act == "gelu-module":  # torch's deep copies compute relu
        with pytest.raises(ArgumentError, match="compute ReLU"):
            make(nn, ga)
        return
    tm, gm = _twins(torch, lambda: make(torch.nn, ta), lambda: make(nn, ga), seed)
    tm.train(train)
    gm.train(train)

    def seq(steps):
        return r.standard_normal(((n, steps) if batch_first else (steps, n)) + (d,))

    arrays = [seq(length)] + ([seq(mem)] if decoder else [])
    pre = "tgt_" if decoder else "src_"
    m = None
    if mask.startswith("causal"):
        m = np.triu(np.ones((length, length), bool), 1)
        m = m if mask.endswith("bool") else np.where(m, -np.inf, 0.0)
    elif mask == "bool":
        m = _bool_mask(r, (length, length))
    call = {}
    if m is not None:
        call["tgt_mask" if decoder else "mask"] = m
        if hint and mask.startswith("causal"):
            call[pre + "is_causal" if decoder else "is_causal"] = True
    if kpm:
        call[pre + "key_padding_mask"] = _bool_mask(r, (n, length))
        if decoder:
            call["memory_key_padding_mask"] = _bool_mask(r, (n, mem))
    _run_both(torch, tm, gm, arrays, call)


def test_transformer_matches_torch(torch):
    make = dict(d_model=4, nhead=2, num_encoder_layers=2, num_decoder_layers=1,
                dim_feedforward=6, dropout=0.0, activation="gelu")
    tm, gm = _twins(torch, lambda: torch.nn.Transformer(**make), lambda: nn.Transformer(**make),
                    3)
    r = _rng(5)
    call = dict(tgt_mask=np.triu(np.full((4, 4), -np.inf), 1),
                src_key_padding_mask=_bool_mask(r, (2, 5)),
                memory_key_padding_mask=_bool_mask(r, (2, 5)), memory_mask=_bool_mask(r, (4, 5)))
    _run_both(torch, tm, gm, [r.standard_normal((5, 2, 4)), r.standard_normal((4, 2, 4))], call)


def _same_with_nans(a, b):
    a, b = _np(a), _np(b)
    np.testing.assert_array_equal(np.isnan(b), np.isnan(a))
    np.testing.assert_allclose(np.nan_to_num(b), np.nan_to_num(a), atol=1e-10)


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "grad"])
def test_fully_masked_rows_and_padding_match_torch_fused_paths(torch, grad):
    """Eval mode with no gradient: PyTorch's fused paths give NaN for a query row with
    every key masked (0 otherwise without need_weights) and 0 at nested padding."""
    r = _rng(6)
    x = r.standard_normal((2, 3, 4))
    row = np.zeros((3, 3), bool)
    row[1] = True  # torch.nn's bool: True = masked out
    pad = np.array([[False, False, True], [True, True, True]])
    mk = dict(dropout=0.0, batch_first=True)
    tl, gl = _twins(torch, lambda: torch.nn.TransformerEncoderLayer(4, 2, 8, **mk),
                    lambda: nn.TransformerEncoderLayer(4, 2, 8, **mk), 1)
    te, ge = _twins(torch, lambda: torch.nn.TransformerEncoder(tl, 2, torch.nn.LayerNorm(4)),
                    lambda: nn.TransformerEncoder(gl, 2, nn.LayerNorm(4)), 2)
    tmha, gmha = tl.self_attn, gl.self_attn
    cases = [(tmha, gmha, (x, x, x), dict(attn_mask=row, need_weights=False)),
             (tmha, gmha, (x, x, x), dict(attn_mask=row)),
             (tmha, gmha, (x, x, x), dict(key_padding_mask=pad, need_weights=False)),
             (tl, gl, (x,), dict(src_mask=row)), (tl, gl, (x,), dict(src_key_padding_mask=pad)),
             (te, ge, (x,), dict(src_key_padding_mask=pad))]
    for tm, gm, args, kw in cases:
        tm.eval()
        gm.eval()
        with warnings.catch_warnings(), torch.set_grad_enabled(grad), tg.set_grad_enabled(grad):
            warnings.simplefilter("ignore")
            tx = torch.tensor(args[0], requires_grad=grad)
            gx = tg.tensor(args[0], requires_grad=grad)
            to = tm(*(tx,) * len(args), **{k: torch.tensor(v) if isinstance(v, np.ndarray)
                                          else v for k, v in kw.items()})
            go = gm(*(gx,) * len(args), **{k: tg.tensor(v) if isinstance(v, np.ndarray)
                                          else v for k, v in kw.items()})
        to, go = (to, go) if isinstance(to, tuple) else ((to,), (go,))
        for a, b in zip(to, go):
            assert (a is None) == (b is None)
            if a is not None:
                _same_with_nans(a, b)
