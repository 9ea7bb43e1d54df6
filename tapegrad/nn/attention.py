"""Scaled dot-product attention and ``nn.MultiheadAttention``, as PyTorch's.

Both are compositions of differentiable ops (matmul, softmax, where, dropout), so they
are twice differentiable and need no rule of their own.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .. import ops
from ..creation import as_tensor, zeros
from ..errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError, describe
from ..grad_mode import is_grad_enabled
from ..tensor import Tensor
from . import init
from ._util import new_param
from .linear import Linear
from .module import Module

__all__ = ["scaled_dot_product_attention", "MultiheadAttention"]

_SDPA = "scaled_dot_product_attention"


def needs_grad(*tensors) -> bool:
    """PyTorch's test for leaving its fused inference paths: some tensor needs a gradient."""
    return is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _as_mask(who, name, mask, like):
    """``mask`` as a Tensor on ``like``'s device; bool or floating."""
    if not isinstance(mask, Tensor):
        if not hasattr(mask, "shape"):
            raise ArgumentTypeError(f"{who}: {name} must be a bool or float Tensor, got "
                                    f"{type(mask).__name__}")
        mask = as_tensor(mask, device=like.device)
    if mask.dtype != np.bool_ and mask.dtype.kind != "f":
        raise DTypeError(f"{who}: {name} must be a bool or floating tensor, got "
                         f"{describe(mask)}")
    return mask


def canonical_mask(who, name, mask, like):
    """None, or ``mask`` as an additive float Tensor of ``like``'s dtype: a bool mask
    (True = masked out, ``torch.nn``'s convention) becomes -inf where True, 0 elsewhere."""
    if mask is None:
        return None
    mask = _as_mask(who, name, mask, like)
    if mask.dtype == np.bool_:
        xp = like.device.xp
        return as_tensor(xp.where(mask.array, -np.inf, 0.0).astype(like.dtype),
                         device=like.device)
    return mask if mask.dtype == like.dtype else mask.astype(like.dtype)


def _safe_softmax(scores):
    """Softmax over the last axis where a row of only -inf gives zeros, with a zero
    gradient (PyTorch's ``_safe_softmax``), instead of NaN."""
    empty = scores.device.xp.isneginf(scores.array).all(axis=-1, keepdims=True)
    if not bool(empty.any()):
        return ops.softmax(scores, -1)
    # those rows read 0 before the softmax, so no NaN reaches the forward or the backward
    return ops.where(empty, 0.0, ops.softmax(ops.where(empty, 0.0, scores), -1))


def attend(query, key, value, mask, keep, scale, dropout_p, safe):
    """``softmax(query @ key^T * scale + mask, keeping only keep) @ value`` and the
    weights. ``safe``: a row with no key left gives 0 (SDPA), else NaN (an explicit
    softmax, as ``nn.MultiheadAttention`` with ``need_weights``)."""
    # (..., L, E) @ (..., E, S) -> (..., L, S)
    scores = ops.matmul(query * scale, ops.swapaxes(key, -2, -1))
    if mask is not None:
        scores = scores + mask
    if keep is not None:
        scores = ops.where(keep, scores, -math.inf)
    if safe:
        weights = _safe_softmax(scores)
    else:
        with np.errstate(invalid="ignore"):  # a row of -inf: NaN, as PyTorch, unwarned
            weights = ops.softmax(scores, -1)
    if dropout_p > 0:
        weights = ops.dropout(weights, dropout_p, True)
    return ops.matmul(weights, value), weights


def _repeat_heads(t, heads):
    """Grouped-query attention: each of t's heads (axis -3) ``heads // Hk`` times in a row
    (``repeat_interleave``)."""
    hk = t.shape[-3]
    if hk == heads:
        return t
    # (..., Hk, S, E) -> (..., Hk, g, S, E) -> (..., Hk * g, S, E)
    lead, tail = tuple(t.shape[:-3]), tuple(t.shape[-2:])
    t = ops.broadcast_to(ops.expand_dims(t, -3), lead + (hk, heads // hk) + tail)
    return t.reshape(lead + (heads,) + tail)


def _check_qkv(query, key, value, enable_gqa):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor):
            raise ArgumentTypeError(f"{_SDPA}: {name} must be a Tensor, got {type(t).__name__}")
    where = f"query {describe(query)}, key {describe(key)}, value {describe(value)}"
    if min(query.ndim, key.ndim, value.ndim) < 2:
        raise ShapeError(f"{_SDPA}: query (..., L, E), key (..., S, E) and value (..., S, Ev) "
                         f"need at least 2 axes each; {where}")
    if not query.dtype == key.dtype == value.dtype or query.dtype.kind != "f":
        raise DTypeError(f"{_SDPA}: query, key and value must share one floating dtype; {where}")
    if query.shape[-1] != key.shape[-1]:
        raise ShapeError(f"{_SDPA}: query and key need the same last axis E; {where}")
    if key.shape[-2] != value.shape[-2]:
        raise ShapeError(f"{_SDPA}: key and value need the same length S (axis -2); {where}")
    if enable_gqa:
        if min(query.ndim, key.ndim, value.ndim) < 3 or any(
                query.shape[-3] % t.shape[-3] for t in (key, value)):
            raise ShapeError(f"{_SDPA}: enable_gqa needs heads on axis -3, the query's a "
                             f"multiple of the key's and the value's; {where}")
        key, value = _repeat_heads(key, query.shape[-3]), _repeat_heads(value, query.shape[-3])
    try:
        lead = np.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except ValueError:
        raise ShapeError(f"{_SDPA}: the leading (batch, head) axes do not broadcast; {where}"
                         + ("" if enable_gqa else "; for fewer key/value heads pass "
                            "enable_gqa=True")) from None
    return key, value, tuple(lead) + (query.shape[-2], key.shape[-2])


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, enable_gqa: bool = False):
    """PyTorch's ``F.scaled_dot_product_attention``:
    ``softmax(query @ key^T * scale + mask) @ value`` for query (..., L, E), key
    (..., S, E) and value (..., S, Ev); the leading axes broadcast.

    ``attn_mask`` broadcasts to (..., L, S): bool (True takes part) or float (added).
    ``is_causal`` keeps the top-left lower triangle of (L, S); with ``attn_mask`` too it
    raises, as PyTorch documents (its CPU kernel for Ev == E combines the two instead).
    A query row with no key left gives zeros and a zero gradient, as PyTorch. ``scale`` defaults to
    1/sqrt(E). ``dropout_p`` drops attention weights whenever it is > 0 (pass 0.0 in
    eval mode). ``enable_gqa`` repeats each key/value head (axis -3) for its group of
    query heads.

    >>> F.scaled_dot_product_attention(q, k, v, is_causal=True).shape   # (N, H, L, Ev)
    """
    key, value, shape = _check_qkv(query, key, value, enable_gqa)
    if (isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real)
            or not 0.0 <= dropout_p <= 1.0):
        raise ArgumentError(f"{_SDPA}: dropout_p must be a number in [0, 1], got {dropout_p!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
        raise ArgumentTypeError(f"{_SDPA}: scale must be a number or None, got {scale!r}")
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if is_causal and attn_mask is not None:
        raise ArgumentError(f"{_SDPA}: pass attn_mask or is_causal=True, not both (as PyTorch); "
                            "for both, combine them into one bool mask")
    mask = keep = None
    if attn_mask is not None:
        m = _as_mask(_SDPA, "attn_mask", attn_mask, query)
        if m.dtype not in (np.bool_, np.float32, query.dtype):
            raise DTypeError(f"{_SDPA}: attn_mask must be bool, float32 or the query's dtype "
                             f"({query.dtype}), as PyTorch; got {describe(m)}")
        try:
            np.broadcast_shapes(m.shape, shape)
        except ValueError:
            raise ShapeError(f"{_SDPA}: attn_mask {describe(m)} does not broadcast to the "
                             f"attention scores (..., L, S) = {shape}") from None
        if m.dtype == np.bool_:
            keep = m.array
        else:
            mask = m if m.dtype == query.dtype else m.astype(query.dtype)
    if is_causal:
        xp = query.device.xp
        keep = xp.tril(xp.ones(shape[-2:], dtype=bool))
    return attend(query, key, value, mask, keep, scale, float(dropout_p), safe=True)[0]


class MultiheadAttention(Module):
    """PyTorch's ``nn.MultiheadAttention``: ``num_heads`` heads of size
    ``embed_dim // num_heads``, with PyTorch's parameter names, shapes and init.

    Inputs are (L, N, E) (``batch_first``: (N, L, E)) or unbatched (L, E).
    ``key_padding_mask`` (N, S) and ``attn_mask`` (L, S) or (N * num_heads, L, S):
    bool (True = masked out) or float (added). Returns ``(output, weights)``;
    weights (N, L, S), per head (N, num_heads, L, S) without ``average_attn_weights``,
    None without ``need_weights``. A query row with every key masked gives NaN with
    ``need_weights`` and 0 without, as PyTorch; NaN also in eval mode with no gradient
    needed where PyTorch takes its fused path (batch_first self-attention, bool masks,
    even heads, biases).

    >>> mha = nn.MultiheadAttention(64, 8, batch_first=True)
    >>> out, w = mha(x, x, x, attn_mask=nn.Transformer.generate_square_subsequent_mask(10))
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        for name, v in (("embed_dim", embed_dim), ("num_heads", num_heads), ("kdim", kdim),
                        ("vdim", vdim)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)
                                  or v <= 0):
                raise ArgumentError(f"MultiheadAttention: {name} must be a positive int, "
                                    f"got {v!r}")
        if embed_dim % num_heads:
            raise ArgumentError(f"MultiheadAttention: embed_dim={embed_dim} must be divisible "
                                f"by num_heads={num_heads}")
        if not 0.0 <= dropout <= 1.0:
            raise ArgumentError(f"MultiheadAttention: dropout must be in [0, 1], got {dropout}")
        e = self.embed_dim = int(embed_dim)
        self.kdim = e if kdim is None else int(kdim)
        self.vdim = e if vdim is None else int(vdim)
        self._qkv_same_embed_dim = self.kdim == e and self.vdim == e
        self.num_heads = int(num_heads)
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = e // self.num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = new_param((3 * e, e), device, dtype)
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = new_param((e, e), device, dtype)
            self.k_proj_weight = new_param((e, self.kdim), device, dtype)
            self.v_proj_weight = new_param((e, self.vdim), device, dtype)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = new_param((3 * e,), device, dtype)
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(e, e, bias=bias, device=device, dtype=dtype)
        if add_bias_kv:
            self.bias_k = new_param((1, 1, e), device, dtype)
            self.bias_v = new_param((1, 1, e), device, dtype)
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        """PyTorch's: xavier_uniform_ projections, zero biases, xavier_normal_ bias_k/v."""
        for w in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight,
                  self.v_proj_weight):
            if w is not None:
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)
        for b in (self.bias_k, self.bias_v):
            if b is not None:
                init.xavier_normal_(b)

    def extra_repr(self):
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"batch_first={self.batch_first}")

    def _who(self):
        return f"MultiheadAttention(embed_dim={self.embed_dim}, num_heads={self.num_heads})"

    def _fused_path(self, query, key, value):
        """Whether PyTorch takes its fused inference path (``_native_multi_head_attention``)
        for these inputs, float masks aside."""
        if (self.training or not self.batch_first or query.ndim != 3
                or not (query is key and key is value) or self.in_proj_weight is None
                or self.in_proj_bias is None or self.num_heads % 2 or self.bias_k is not None
                or self.add_zero_attn or query.dtype != self.in_proj_weight.dtype):
            return False
        return not needs_grad(query, self.in_proj_weight, self.in_proj_bias,
                              self.out_proj.weight, self.out_proj.bias)

    def forward(self, query, key, value, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        return self.attention(query, key, value, key_padding_mask, need_weights, attn_mask,
                              average_attn_weights, is_causal)

    def attention(self, query, key, value, key_padding_mask=None, need_weights=True,
                  attn_mask=None, average_attn_weights=True, is_causal=False, fused=None):
        """:meth:`forward`; ``fused`` (None: decide here) says whether PyTorch would take a
        fused inference path, where a fully masked row gives NaN and ``is_causal`` is
        only a hint (``attn_mask`` is used)."""
        who = self._who()
        batched = self._check(query, key, value, key_padding_mask, attn_mask)
        floats = any(np.dtype(getattr(m, "dtype", "O")).kind == "f"
                     for m in (attn_mask, key_padding_mask))
        kpm = canonical_mask(who, "key_padding_mask", key_padding_mask, query)
        mask = canonical_mask(who, "attn_mask", attn_mask, query)
        if fused is None:
            fused = not floats and self._fused_path(query, key, value)
        if is_causal and mask is None:
            raise ArgumentError(f"{who}: is_causal=True is a hint that needs attn_mask, the "
                                "causal mask itself (nn.Transformer."
                                "generate_square_subsequent_mask(L)), as PyTorch")
        # PyTorch drops the mask for its causal kernel only here; elsewhere the mask is used
        causal = is_causal and kpm is None and not need_weights and not fused
        self_attention, shared_kv = query is key and key is value, key is value
        if not batched:  # (L, E) -> (L, 1, E)
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
            kpm = None if kpm is None else kpm.unsqueeze(0)
        elif self.batch_first:  # (N, L, E) -> (L, N, E)
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        out, weights = self._heads(query, key, value, kpm, None if causal else mask, causal,
                                   need_weights or fused, self_attention, shared_kv)
        if not need_weights:
            weights = None
        elif average_attn_weights:
            weights = weights.mean(axis=1)
        if not batched:
            out = out.squeeze(1)
            weights = None if weights is None else weights.squeeze(0)
        elif self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def _check(self, query, key, value, kpm, mask):
        who = self._who()
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, Tensor):
                raise ArgumentTypeError(f"{who}: {name} must be a Tensor, got "
                                        f"{type(t).__name__}")
        where = f"query {describe(query)}, key {describe(key)}, value {describe(value)}"
        nd = query.ndim
        if nd not in (2, 3) or key.ndim != nd or value.ndim != nd:
            raise ShapeError(f"{who}: query, key and value must all be 3-D (batched) or all 2-D "
                             f"(unbatched); {where}")
        for name, dim, t in (("query", self.embed_dim, query), ("key", self.kdim, key),
                             ("value", self.vdim, value)):
            if t.shape[-1] != dim:
                raise ShapeError(f"{who}: {name} needs {dim} features on its last axis; {where}")
        bax, lax = (0, 1) if self.batch_first and nd == 3 else (1, 0)
        if key.shape[lax] != value.shape[lax] or (nd == 3 and not
                                                   query.shape[bax] == key.shape[bax]
                                                   == value.shape[bax]):
            raise ShapeError(f"{who}: key and value need the same length S and all three the "
                             f"same batch size; {where}")
        n = query.shape[bax] if nd == 3 else 1
        length, s = query.shape[lax], key.shape[lax]
        if kpm is not None and tuple(kpm.shape) != ((n, s) if nd == 3 else (s,)):
            raise ShapeError(f"{who}: key_padding_mask must be {(n, s) if nd == 3 else (s,)} "
                             f"(batch, S), got {tuple(kpm.shape)}; {where}")
        if mask is not None and tuple(mask.shape) not in ((length, s),
                                                          (n * self.num_heads, length, s)):
            raise ShapeError(f"{who}: attn_mask must be (L, S) = {(length, s)} or "
                             f"(N * num_heads, L, S) = {(n * self.num_heads, length, s)}, got "
                             f"{tuple(mask.shape)}; {where}")
        return nd == 3

    def _project(self, query, key, value, self_attention, shared_kv):
        """The input projections, packed as PyTorch packs them."""
        e, b = self.embed_dim, self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else b.split(e)
        if not self._qkv_same_embed_dim:
            return (ops.linear(query, self.q_proj_weight, bq),
                    ops.linear(key, self.k_proj_weight, bk),
                    ops.linear(value, self.v_proj_weight, bv))
        w = self.in_proj_weight
        if self_attention:  # one (L, N, 3E) product
            return tuple(ops.linear(query, w, b).split(e, axis=-1))
        wq, wk, wv = w.split(e)
        if shared_kv:
            k, v = ops.linear(key, w[e:], None if b is None else b[e:]).split(e, axis=-1)
            return ops.linear(query, wq, bq), k, v
        return ops.linear(query, wq, bq), ops.linear(key, wk, bk), ops.linear(value, wv, bv)

    def _heads(self, query, key, value, kpm, mask, causal, explicit, self_attention, shared_kv):
        """Attention over (L, N, E) inputs -> (L, N, E) output, (N, H, L, S) weights."""
        length, n, e = query.shape
        h, hd = self.num_heads, self.head_dim
        q, k, v = self._project(query, key, value, self_attention, shared_kv)
        if self.bias_k is not None:  # one more key and value: (S, N, E) -> (S + 1, N, E)
            k = ops.concatenate([k, ops.broadcast_to(self.bias_k, (1, n, e))], 0)
            v = ops.concatenate([v, ops.broadcast_to(self.bias_v, (1, n, e))], 0)
            mask, kpm = _pad_key(mask), _pad_key(kpm)
        # (L, N, E) -> (L, N, H, hd) -> (N, H, L, hd)
        q, k, v = (t.reshape(t.shape[0], n, h, hd).permute(1, 2, 0, 3) for t in (q, k, v))
        if self.add_zero_attn:  # a zero key and value: (N, H, S, hd) -> (N, H, S + 1, hd)
            z = zeros(n, h, 1, hd, dtype=q.dtype, device=q.device)
            k, v = ops.concatenate([k, z], 2), ops.concatenate([v, z], 2)
            mask, kpm = _pad_key(mask), _pad_key(kpm)
        s = k.shape[2]
        # (L, S) -> (1, 1, L, S); (N * H, L, S) -> (N, H, L, S); kpm (N, S) -> (N, 1, 1, S)
        if mask is not None:
            mask = mask.reshape(((1, 1) if mask.ndim == 2 else (n, h)) + (length, s))
        if kpm is not None:
            kpm = kpm.reshape(n, 1, 1, s)
            mask = kpm if mask is None else mask + kpm
        keep = None
        if causal:
            xp = q.device.xp
            keep = xp.tril(xp.ones((length, s), dtype=bool))
        p = self.dropout if self.training else 0.0
        out, weights = attend(q, k, v, mask, keep, 1.0 / math.sqrt(hd), p, safe=not explicit)
        # (N, H, L, hd) -> (L, N, H, hd) -> (L, N, E)
        out = out.permute(2, 0, 1, 3).reshape(length, n, e)
        return ops.linear(out, self.out_proj.weight, self.out_proj.bias), weights


def _pad_key(mask):
    """A float mask with one more key (a 0 column last), for bias_k or add_zero_attn."""
    if mask is None:
        return None
    return ops.pad(mask, ((0, 0),) * (mask.ndim - 1) + ((0, 1),))
