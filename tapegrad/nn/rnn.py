"""Recurrent layers: PyTorch's ``nn.RNN``, ``nn.LSTM``, ``nn.GRU`` and their cells.

Parameter names, shapes, gate order and initialisation are PyTorch's, so state
dicts load both ways. Each layer and direction is :func:`tapegrad.ops.rnn_layer`
(one input GEMM over the whole sequence, then one fused cell op per step).
"""

from __future__ import annotations

import math
import numbers
import warnings

from .. import ops
from ..args import int_at_least, is_int
from ..creation import zeros
from ..errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError
from ..tensor import Tensor
from . import init
from ._util import new_param
from .module import Module
from .utils.rnn import PackedSequence, _ints

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _positive_int(who, name, value, minimum=1):
    if not is_int(value):  # a TypeError, as PyTorch's for a float size
        raise ArgumentTypeError(f"{who}: {name} must be an int, got {type(value).__name__}")
    return int_at_least(who, name, value, minimum)


def _check_dtype(who, x, w):
    if x.dtype != w.dtype:
        raise DTypeError(f"{who}: input is {x.dtype} but the parameters are {w.dtype}; cast "
                         f"one of them (x.to({w.dtype}) or module.to(dtype={x.dtype}))")


def _reset(module, hidden_size):
    stdv = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
    for w in module.parameters():
        init.uniform_(w, -stdv, stdv)


class RNNBase(Module):
    """The common body of :class:`RNN`, :class:`LSTM` and :class:`GRU` (``mode``:
    "RNN_TANH", "RNN_RELU", "LSTM", "GRU"), as PyTorch's ``nn.RNNBase``."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 device=None, dtype=None):
        super().__init__()
        who = {"RNN_TANH": "RNN", "RNN_RELU": "RNN"}.get(mode, mode)
        if mode not in _GATES:
            raise ArgumentError(f"RNNBase: mode must be one of {tuple(_GATES)}, got {mode!r}")
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Number) or \
                not 0 <= dropout <= 1:
            raise ArgumentError(f"{who}: dropout must be a number in [0, 1] (the probability "
                                f"of zeroing an element), got {dropout!r}")
        self.mode = mode
        self.input_size = _positive_int(who, "input_size", input_size, 0)
        self.hidden_size = _positive_int(who, "hidden_size", hidden_size)
        self.num_layers = _positive_int(who, "num_layers", num_layers)
        self.proj_size = _positive_int(who, "proj_size", proj_size, 0)
        if self.proj_size and mode != "LSTM":
            raise ArgumentError(f"{who}: proj_size is only supported for LSTM")
        if self.proj_size >= self.hidden_size:
            raise ArgumentError(f"{who}: proj_size ({proj_size}) must be smaller than "
                                f"hidden_size ({hidden_size})")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"{who}: dropout={dropout} and num_layers=1: dropout is applied "
                          "between layers only, so it does nothing here", UserWarning,
                          stacklevel=2)
        self.bias, self.batch_first = bias, batch_first
        self.dropout, self.bidirectional = float(dropout), bool(bidirectional)
        gate = _GATES[mode] * hidden_size
        real_hidden = self.proj_size or hidden_size
        directions = 2 if bidirectional else 1
        self._all_weights = []
        for layer in range(num_layers):
            for direction in range(directions):
                sfx = f"_l{layer}" + ("_reverse" if direction else "")
                in_size = input_size if layer == 0 else real_hidden * directions
                shapes = {"weight_ih": (gate, in_size), "weight_hh": (gate, real_hidden)}
                if bias:
                    shapes.update(bias_ih=(gate,), bias_hh=(gate,))
                if self.proj_size:
                    shapes["weight_hr"] = (self.proj_size, hidden_size)
                for name, shape in shapes.items():
                    setattr(self, name + sfx, new_param(shape, device, dtype))
                self._all_weights.append([name + sfx for name in shapes])
        self._flat_weights_names = [n for names in self._all_weights for n in names]
        self.reset_parameters()

    def reset_parameters(self):
        """PyTorch's: every weight and bias U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        _reset(self, self.hidden_size)

    def flatten_parameters(self):
        """Nothing to do (PyTorch compacts the weights for cuDNN here)."""

    @property
    def all_weights(self):
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    @property
    def _flat_weights(self):
        return [getattr(self, n) for n in self._flat_weights_names]

    def _weights(self, k):
        p = dict(zip(("weight_ih", "weight_hh"), (getattr(self, n) for n in
                                                  self._all_weights[k][:2])))
        for n in self._all_weights[k][2:]:
            p[n.split("_l")[0]] = getattr(self, n)
        return p

    def _states(self, who, hx, batch, unbatched):
        """hx as (h0, c0-or-None) of shape (L*D, B, H), checked; None stays None."""
        lstm = self.mode == "LSTM"
        if hx is None:
            return None, None
        if lstm and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise ArgumentTypeError(f"{who}: hx must be a tuple (h_0, c_0), got "
                                    f"{type(hx).__name__}")
        if not lstm and not isinstance(hx, Tensor):
            raise ArgumentTypeError(f"{who}: hx must be a Tensor h_0, got {type(hx).__name__}")
        states = list(hx) if lstm else [hx]
        n = self.num_layers * (2 if self.bidirectional else 1)
        sizes = [self.proj_size or self.hidden_size, self.hidden_size]
        for k, (s, size, name) in enumerate(zip(states, sizes, ("h_0", "c_0"))):
            want = 2 if unbatched else 3
            if s.ndim != want:
                raise ShapeError(f"{who}: for {'unbatched 2-D' if unbatched else 'batched 3-D'}"
                                 f" input, {name} must be {want}-D, got shape {tuple(s.shape)}")
            s = s.unsqueeze(1) if unbatched else s
            if tuple(s.shape) != (n, batch, size):
                last = "proj_size" if k == 0 and self.proj_size else "hidden_size"
                raise ShapeError(f"{who}: expected {name} of shape (num_layers * num_directions,"
                                 f" batch, {last}) = {(n, batch, size)}, got {tuple(s.shape)}")
            states[k] = s
        return states[0], (states[1] if lstm else None)

    def forward(self, input, hx=None):
        """``(output, h_n)``, for LSTM ``(output, (h_n, c_n))``, as PyTorch's: input
        (L, N, H_in) (``batch_first``: (N, L, H_in)), unbatched (L, H_in), or a
        :class:`~tapegrad.nn.utils.rnn.PackedSequence` (then output is one too)."""
        who = type(self).__name__
        packed = isinstance(input, PackedSequence)
        if packed:
            x, batch_sizes, sorted_indices, unsorted_indices = input
            sizes = tuple(_ints(batch_sizes).tolist())
            if x.ndim != 2:
                raise ShapeError(f"{who}: packed data must be (sum of lengths, input_size), "
                                 f"got shape {tuple(x.shape)}")
            batch, unbatched = sizes[0], False
        else:
            if not isinstance(input, Tensor):
                raise ArgumentTypeError(f"{who}: input must be a Tensor or a PackedSequence, "
                                        f"got {type(input).__name__}")
            if input.ndim not in (2, 3):
                raise ShapeError(f"{who}: input must be (L, N, H_in), (N, L, H_in) with "
                                 f"batch_first, or unbatched (L, H_in); got shape "
                                 f"{tuple(input.shape)}")
            unbatched = input.ndim == 2
            x = input.unsqueeze(1) if unbatched else \
                (input.swapaxes(0, 1) if self.batch_first else input)
            if x.shape[0] == 0:
                raise ShapeError(f"{who}: the sequence is empty (input shape "
                                 f"{tuple(input.shape)}); it needs at least one time step")
            sizes, batch = None, x.shape[1]
        if x.shape[-1] != self.input_size:
            raise ShapeError(f"{who}: input has {x.shape[-1]} features (shape "
                             f"{tuple(x.shape)}), input_size is {self.input_size}")
        _check_dtype(who, x, self.weight_ih_l0)
        h0, c0 = self._states(who, hx, batch, unbatched)
        if packed and sorted_indices is not None and h0 is not None:
            h0 = h0[:, sorted_indices]
            c0 = c0[:, sorted_indices] if c0 is not None else None
        mode = self.mode.lower()
        directions = 2 if self.bidirectional else 1
        hs, cs = [], []
        for layer in range(self.num_layers):
            outs = []
            for d in range(directions):
                k = layer * directions + d
                state = None if h0 is None else (h0[k] if c0 is None else (h0[k], c0[k]))
                out, h = ops.rnn_layer(x, state, mode=mode, batch_sizes=sizes, reverse=d == 1,
                                       **self._weights(k))
                if mode == "lstm":
                    h, c = h
                    cs.append(c)
                hs.append(h)
                outs.append(out)
            x = outs[0] if directions == 1 else ops.concatenate(outs, axis=-1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = ops.dropout(x, self.dropout, True)
        h_n = ops.stack(hs)  # (num_layers * num_directions, N, H_out)
        c_n = ops.stack(cs) if cs else None
        if packed:
            if unsorted_indices is not None:
                h_n = h_n[:, unsorted_indices]
                c_n = c_n[:, unsorted_indices] if c_n is not None else None
            x = PackedSequence(x, batch_sizes, sorted_indices, unsorted_indices)
        elif unbatched:
            x, h_n = x.squeeze(1), h_n.squeeze(1)
            c_n = c_n.squeeze(1) if c_n is not None else None
        elif self.batch_first:
            x = x.swapaxes(0, 1)
        return (x, (h_n, c_n)) if c_n is not None else (x, h_n)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


class RNN(RNNBase):
    """Elman RNN, ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` with act tanh
    or relu (PyTorch's argument order: nonlinearity is the fourth).

    >>> out, h_n = nn.RNN(10, 20, 2)(tg.randn(5, 3, 10))   # (5, 3, 20), (2, 3, 20)
    """

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ArgumentError(f"RNN: nonlinearity must be 'tanh' or 'relu', got "
                                f"{nonlinearity!r}")
        super().__init__("RNN_" + nonlinearity.upper(), input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, 0, device, dtype)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """LSTM with PyTorch's gates (i, f, g, o) and optional projection (``proj_size``:
    ``h_t = W_hr (o * tanh(c_t))``).

    >>> out, (h_n, c_n) = nn.LSTM(10, 20, 2)(tg.randn(5, 3, 10))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device, dtype)


class GRU(RNNBase):
    """GRU with PyTorch's gates (r, z, n), ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``.

    >>> out, h_n = nn.GRU(10, 20, 2)(tg.randn(5, 3, 10))
    """

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, 0, device, dtype)


# ------------------------------------------------------------------------ cells

class RNNCellBase(Module):
    """weight_ih (G*H, input_size), weight_hh (G*H, H), bias_ih, bias_hh (G*H,)."""

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        who = type(self).__name__
        self.input_size = _positive_int(who, "input_size", input_size, 0)
        self.hidden_size = _positive_int(who, "hidden_size", hidden_size)
        self.bias = bias
        self.weight_ih = new_param((num_chunks * hidden_size, input_size), device, dtype)
        self.weight_hh = new_param((num_chunks * hidden_size, hidden_size), device, dtype)
        if bias:
            self.bias_ih = new_param((num_chunks * hidden_size,), device, dtype)
            self.bias_hh = new_param((num_chunks * hidden_size,), device, dtype)
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        _reset(self, self.hidden_size)

    def _prepare(self, input, states):
        """(input as (B, in), states as (B, H) or zeros, unbatched), checked."""
        who = type(self).__name__
        if not isinstance(input, Tensor) or input.ndim not in (1, 2):
            got = f"shape {tuple(input.shape)}" if isinstance(input, Tensor) else \
                type(input).__name__
            raise ShapeError(f"{who}: input must be a 1-D or 2-D Tensor, got {got}")
        if input.shape[-1] != self.input_size:
            raise ShapeError(f"{who}: input has {input.shape[-1]} features (shape "
                             f"{tuple(input.shape)}), input_size is {self.input_size}")
        _check_dtype(who, input, self.weight_ih)
        unbatched = input.ndim == 1
        x = input.unsqueeze(0) if unbatched else input
        out = []
        for s in states:
            if s is None:
                s = zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device)
            elif s.ndim != input.ndim or tuple(s.shape[-1:]) != (self.hidden_size,) or \
                    (not unbatched and s.shape[0] != x.shape[0]):
                raise ShapeError(f"{who}: hidden state of shape {tuple(s.shape)} does not fit "
                                 f"input {tuple(input.shape)}: expected "
                                 f"{tuple(input.shape[:-1]) + (self.hidden_size,)}")
            else:
                s = s.unsqueeze(0) if unbatched else s
            out.append(s)
        return ops.linear(x, self.weight_ih, self.bias_ih), out, unbatched

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(RNNCellBase):
    """One Elman RNN step: ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``.

    >>> h = nn.RNNCell(10, 20)(tg.randn(3, 10))   # (3, 20)
    """

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ArgumentError(f"RNNCell: nonlinearity must be 'tanh' or 'relu', got "
                                f"{nonlinearity!r}")
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        xw, (h,), unbatched = self._prepare(input, [hx])
        h = ops.rnn_cell(xw, h, self.weight_hh, self.bias_hh, self.nonlinearity)
        return h.squeeze(0) if unbatched else h


class LSTMCell(RNNCellBase):
    """One LSTM step; ``hx = (h, c)`` (zeros if None); returns ``(h', c')``.

    >>> h, c = nn.LSTMCell(10, 20)(tg.randn(3, 10))
    """

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        if hx is not None and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise ArgumentTypeError(f"LSTMCell: hx must be a tuple (h, c), got "
                                    f"{type(hx).__name__}")
        xw, (h, c), unbatched = self._prepare(input, [None, None] if hx is None else list(hx))
        h, c = ops.lstm_cell(xw, h, c, self.weight_hh, self.bias_hh)
        return (h.squeeze(0), c.squeeze(0)) if unbatched else (h, c)


class GRUCell(RNNCellBase):
    """One GRU step: ``h' = (1 - z) n + z h``.

    >>> h = nn.GRUCell(10, 20)(tg.randn(3, 10))
    """

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        xw, (h,), unbatched = self._prepare(input, [hx])
        h = ops.gru_cell(xw, h, self.weight_hh, self.bias_hh)
        return h.squeeze(0) if unbatched else h
