"""PyTorch's Transformer layers: ``nn.TransformerEncoderLayer``/``DecoderLayer``, their
stacks ``nn.TransformerEncoder``/``Decoder`` and ``nn.Transformer``, with PyTorch's
parameter names, shapes and init, so state_dicts load both ways.

In eval mode with no gradient needed PyTorch takes fused inference paths whose answers
differ from its ordinary ones in a few places; tapegrad follows them where it can (a
fully masked query row gives NaN; ``TransformerEncoder``'s nested-tensor path gives 0 at
padded positions) and raises an ``ArgumentError`` where PyTorch's fused answer departs
from its own documented meaning (a float mask other than 0/-inf, tanh-GELU).
"""

from __future__ import annotations

import copy
import math

import numpy as np

from .. import ops
from ..creation import full
from ..errors import ArgumentError, ArgumentTypeError, ShapeError, describe
from ..tensor import Tensor
from . import init
from .activation import GELU, ReLU
from .attention import MultiheadAttention, canonical_mask, needs_grad
from .container import ModuleList
from .linear import Dropout, Linear
from .module import Module
from .normalization import LayerNorm

__all__ = ["Transformer", "TransformerEncoder", "TransformerDecoder",
           "TransformerEncoderLayer", "TransformerDecoderLayer"]


def _square_subsequent_mask(sz, device=None, dtype=None):
    return ops.triu(full((sz, sz), -math.inf, dtype=dtype, device=device or "cpu"), 1)


def _activation(who, activation):
    if isinstance(activation, str):
        if activation == "relu":
            return ops.relu
        if activation == "gelu":
            return ops.gelu
        raise ArgumentError(f"{who}: activation should be 'relu', 'gelu' or a callable, got "
                            f"{activation!r}")
    if not callable(activation):
        raise ArgumentTypeError(f"{who}: activation should be 'relu', 'gelu' or a callable, "
                                f"got {type(activation).__name__}")
    return activation


def _relu_or_gelu(activation) -> int:
    """PyTorch's ``activation_relu_or_gelu``: 1 relu, 2 gelu, 0 anything else."""
    if activation is ops.relu or isinstance(activation, ReLU):
        return 1
    if activation is ops.gelu or isinstance(activation, GELU):
        return 2
    return 0


def _check_fused_mask(who, name, mask):
    """PyTorch's fused paths read a float mask as bool (nonzero = masked out)."""
    if mask is None:
        return
    d = mask.array
    if bool(((d != 0) & ~mask.device.xp.isneginf(d)).any()):
        raise ArgumentError(
            f"{who}: {name} has values other than 0 and -inf; in eval mode with no gradient "
            "needed PyTorch takes a fused path that reads such a float mask as bool (nonzero "
            "= masked out) instead of adding it, so tapegrad refuses rather than give another "
            "answer: use a bool mask, or keep gradients enabled (or train mode)")


def _detect_is_causal_mask(mask, is_causal, size):
    """PyTorch's: ``is_causal`` if given, else whether ``mask`` is the (size, size)
    causal mask (-inf or True above the diagonal)."""
    if is_causal is not None or not isinstance(mask, Tensor):
        return is_causal is True
    sz = mask.shape[-2] if size is None else size
    if tuple(mask.shape) != (sz, sz):
        return False
    xp = mask.device.xp
    above = xp.triu(xp.ones((sz, sz), dtype=bool), 1)
    causal = above if mask.dtype == np.bool_ else xp.where(above, -np.inf, 0.0)
    return bool((mask.array == causal).all())


def _seq_len(src, batch_first):
    return src.shape[0] if src.ndim == 2 else src.shape[1 if batch_first else 0]


def _check_src(who, src):
    if not isinstance(src, Tensor):
        raise ArgumentTypeError(f"{who}: expected a Tensor, got {type(src).__name__}")


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with a residual and a LayerNorm
    (after, or before with ``norm_first``), as ``torch.nn.TransformerEncoderLayer``.

    >>> layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, batch_first=True)
    >>> layer(tapegrad.randn(32, 10, 512)).shape   # (32, 10, 512)
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation=ops.relu, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation("TransformerEncoderLayer", activation)
        self.activation_relu_or_gelu = _relu_or_gelu(self.activation)

    def _fused_path(self, src):
        """Whether PyTorch runs ``_transformer_encoder_layer_fwd`` on ``src``."""
        sa = self.self_attn
        if (src.ndim != 3 or self.training or not sa.batch_first or sa.in_proj_bias is None
                or not sa._qkv_same_embed_dim or not self.activation_relu_or_gelu
                or self.norm1.eps != self.norm2.eps or sa.num_heads % 2):
            return False
        return not needs_grad(src, sa.in_proj_weight, sa.in_proj_bias, sa.out_proj.weight,
                              sa.out_proj.bias, self.norm1.weight, self.norm1.bias,
                              self.norm2.weight, self.norm2.bias, self.linear1.weight,
                              self.linear1.bias, self.linear2.weight, self.linear2.bias)

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        who = "TransformerEncoderLayer"
        _check_src(who, src)
        kpm = canonical_mask(who, "src_key_padding_mask", src_key_padding_mask, src)
        mask = canonical_mask(who, "src_mask", src_mask, src)
        fused = self._fused_path(src)
        if fused:
            _check_fused_mask(who, "src_mask", mask)
            _check_fused_mask(who, "src_key_padding_mask", kpm)
            if getattr(self.activation, "approximate", "none") != "none":
                raise ArgumentError(f"{who}: in eval mode with no gradient needed PyTorch's "
                                    "fused path computes exact GELU, not the tanh form of "
                                    f"{self.activation!r}: use nn.GELU() or 'gelu', or keep "
                                    "gradients enabled")

        def sa(x):
            return self.dropout1(self.self_attn.attention(
                x, x, x, kpm, False, mask, True, is_causal, fused or None)[0])

        x = src
        if self.norm_first:
            x = x + sa(self.norm1(x))
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + sa(x))
        return self.norm2(x + self._ff_block(x))

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoderLayer(Module):
    """Self-attention, attention over ``memory``, then a feed-forward block, each with a
    residual and a LayerNorm, as ``torch.nn.TransformerDecoderLayer``.

    >>> layer = nn.TransformerDecoderLayer(d_model=512, nhead=8)
    >>> layer(tapegrad.randn(20, 32, 512), memory=tapegrad.randn(10, 32, 512)).shape
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation=ops.relu, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                            batch_first=batch_first, bias=bias, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout,
                                                 batch_first=batch_first, bias=bias, **kw)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation("TransformerDecoderLayer", activation)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False):
        def sa(x):
            return self.dropout1(self.self_attn(
                x, x, x, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask,
                is_causal=tgt_is_causal, need_weights=False)[0])

        def mha(x):
            return self.dropout2(self.multihead_attn(
                x, memory, memory, attn_mask=memory_mask,
                key_padding_mask=memory_key_padding_mask, is_causal=memory_is_causal,
                need_weights=False)[0])

        x = tgt
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + mha(self.norm2(x))
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + sa(x))
        x = self.norm2(x + mha(x))
        return self.norm3(x + self._ff_block(x))

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


def _nested_ok(layer) -> bool:
    """PyTorch's ``use_nested_tensor`` conditions on the encoder layer."""
    if not isinstance(layer, TransformerEncoderLayer):
        return False
    sa = layer.self_attn
    return (not layer.norm_first and sa.batch_first and sa._qkv_same_embed_dim
            and sa.in_proj_bias is not None and bool(layer.activation_relu_or_gelu)
            and layer.norm1.eps == layer.norm2.eps and sa.num_heads % 2 == 0)


class TransformerEncoder(Module):
    """``num_layers`` deep copies of ``encoder_layer`` (``layers.0`` ...), then ``norm``.

    As PyTorch, with ``enable_nested_tensor`` (and a layer PyTorch's nested path takes),
    eval mode with no gradient needed and a left-aligned ``src_key_padding_mask`` (and
    no ``mask``) gives 0 at the padded positions before ``norm``.

    >>> enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(512, 8), num_layers=6)
    """

    def __init__(self, encoder_layer, num_layers: int, norm=None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.use_nested_tensor = enable_nested_tensor and _nested_ok(encoder_layer)
        self.mask_check = mask_check

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        who = "TransformerEncoder"
        _check_src(who, src)
        kpm = canonical_mask(who, "src_key_padding_mask", src_key_padding_mask, src)
        mask = canonical_mask(who, "mask", mask, src)
        first = self.layers[0]
        pad = None
        if (self.use_nested_tensor and kpm is not None and kpm.ndim == 2 and mask is None
                and isinstance(first, TransformerEncoderLayer) and first._fused_path(src)):
            pad = kpm.array != 0  # (N, S): True at padding
            if not bool((pad[:, 1:] >= pad[:, :-1]).all()):  # not left-aligned
                if self.mask_check:
                    pad = None
                else:
                    raise ArgumentError(
                        f"{who}: src_key_padding_mask is not left-aligned (padding only at "
                        "the end); with mask_check=False PyTorch's nested path reads it as "
                        "lengths and gives another answer: pass mask_check=True")
            else:
                _check_fused_mask(who, "src_key_padding_mask", kpm)
        sa = getattr(first, "self_attn", None)
        is_causal = _detect_is_causal_mask(mask, is_causal,
                                           _seq_len(src, getattr(sa, "batch_first", False)))
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, is_causal=is_causal, src_key_padding_mask=kpm)
        if pad is not None:  # the nested tensor padded back with zeros
            out = ops.where(pad[:, :, None], 0.0, out)
        return out if self.norm is None else self.norm(out)


class TransformerDecoder(Module):
    """``num_layers`` deep copies of ``decoder_layer``, then ``norm``. A layer whose
    activation is a Module is refused: PyTorch's copies of it compute ReLU.

    >>> dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(512, 8), num_layers=6)
    """

    def __init__(self, decoder_layer, num_layers: int, norm=None):
        super().__init__()
        act = getattr(decoder_layer, "activation", None)
        if isinstance(act, Module):
            raise ArgumentError(
                f"TransformerDecoder: PyTorch's copies of a TransformerDecoderLayer whose "
                f"activation is a Module ({act!r}) compute ReLU instead (its __setstate__ resets "
                "the attribute), so tapegrad refuses rather than differ: pass activation as "
                "'relu', 'gelu' or a function (F.gelu)")
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False):
        _check_src("TransformerDecoder", tgt)
        sa = getattr(self.layers[0], "self_attn", None)
        tgt_is_causal = _detect_is_causal_mask(
            tgt_mask, tgt_is_causal, _seq_len(tgt, getattr(sa, "batch_first", False)))
        out = tgt
        for layer in self.layers:
            out = layer(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                        tgt_key_padding_mask=tgt_key_padding_mask,
                        memory_key_padding_mask=memory_key_padding_mask,
                        tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)
        return out if self.norm is None else self.norm(out)


class Transformer(Module):
    """``torch.nn.Transformer``: an encoder and a decoder stack, each ending in a
    LayerNorm; every parameter with more than one axis xavier_uniform_-initialised.

    >>> model = nn.Transformer(d_model=512, nhead=8)
    >>> tgt_mask = nn.Transformer.generate_square_subsequent_mask(20)
    >>> model(src, tgt, tgt_mask=tgt_mask).shape   # src (10, 32, 512), tgt (20, 32, 512)
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation=ops.relu, custom_encoder=None,
                 custom_decoder=None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None):
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                batch_first, norm_first, bias)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(*args, **kw), num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(*args, **kw), num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, src_is_causal=None, tgt_is_causal=None,
                memory_is_causal: bool = False):
        _check_src("Transformer", src)
        _check_src("Transformer", tgt)
        b = 0 if self.batch_first else 1
        if src.ndim == 3 and (tgt.ndim != 3 or src.shape[b] != tgt.shape[b]):
            raise ShapeError(f"Transformer: src {describe(src)} and tgt {describe(tgt)} need "
                             f"the same batch size (axis {b})")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ShapeError(f"Transformer(d_model={self.d_model}): src {describe(src)} and tgt "
                             f"{describe(tgt)} need d_model features on their last axis")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None):
        """The (sz, sz) float causal mask: -inf above the diagonal, 0 elsewhere.

        >>> nn.Transformer.generate_square_subsequent_mask(3)
        """
        return _square_subsequent_mask(sz, device, dtype)

    def _reset_parameters(self):
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)
