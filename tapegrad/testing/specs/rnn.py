"""Specs of tapegrad/ops/rnn.py, with PyTorch's cell formulas in NumPy as references."""

import numpy as np

from ... import ops
from . import OpSpec, empty_batch

_PACKED = (3, 2, 2, 1)  # batch sizes of 4 time steps: lengths 4, 3, 1
_NO_EMPTY = "a packed sequence has at least one sequence of length >= 1"


def _x(*shapes):
    return lambda r: [r.normal(size=s) for s in shapes]


def _sig(a):
    return 1 / (1 + np.exp(-a))


def _rnn(xw, h, w, b=None, act=np.tanh):
    return act(xw + h @ w.T + (0 if b is None else b))


def _lstm(xw, h, c, w, b=None):
    i, f, g, o = np.split(xw + h @ w.T + (0 if b is None else b), 4, axis=1)
    c2 = _sig(f) * c + _sig(i) * np.tanh(g)
    return _sig(o) * np.tanh(c2), c2


def _gru(xw, h, w, b=None):
    hw = h @ w.T + (0 if b is None else b)
    (xr, xz, xn), (hr, hz, hn) = np.split(xw, 3, axis=1), np.split(hw, 3, axis=1)
    r, z = _sig(xr + hr), _sig(xz + hz)
    n = np.tanh(xn + r * hn)
    return (1 - z) * n + z * h


def _layer_ref(mode, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr=None, sizes=None, reverse=False):
    """rnn_layer as a direct loop over time steps (padded when ``sizes`` is None)."""
    packed = sizes is not None
    xs = np.split(x, np.cumsum(sizes)[:-1]) if packed else list(x)
    sizes = sizes if packed else (x.shape[1],) * x.shape[0]
    h, c = h0.copy(), (c0.copy() if c0 is not None else None)
    outs = [None] * len(xs)
    for t in (reversed(range(len(xs))) if reverse else range(len(xs))):
        b = sizes[t]
        xw = xs[t] @ w_ih.T + b_ih
        if mode == "lstm":
            hn, cn = _lstm(xw, h[:b], c[:b], w_hh, b_hh)
            h[:b], c[:b] = (hn if w_hr is None else hn @ w_hr.T), cn
        elif mode == "gru":
            h[:b] = _gru(xw, h[:b], w_hh, b_hh)
        else:
            h[:b] = _rnn(xw, h[:b], w_hh, b_hh)
        outs[t] = h[:b].copy()
    out = np.concatenate(outs) if packed else np.stack(outs)
    return (out, h, c) if mode == "lstm" else (out, h)


def _lstm_layer(packed, reverse=False, proj=False):
    def fn(x, h0, c0, w_ih, w_hh, b_ih, b_hh, *w_hr):
        out, (h, c) = ops.rnn_layer(x, (h0, c0), w_ih, w_hh, b_ih, b_hh, mode="lstm",
                                    weight_hr=w_hr[0] if w_hr else None,
                                    batch_sizes=_PACKED if packed else None, reverse=reverse)
        return out, h, c

    def ref(x, h0, c0, w_ih, w_hh, b_ih, b_hh, *w_hr):
        return _layer_ref("lstm", x, h0, c0, w_ih, w_hh, b_ih, b_hh, *w_hr,
                          sizes=_PACKED if packed else None, reverse=reverse)

    hout = 2 if proj else 3
    x = (sum(_PACKED), 2) if packed else (4, 3, 2)
    shapes = [x, (3, hout), (3, 3), (12, 2), (12, hout), (12,), (12,)] + ([(2, 3)] if proj else [])
    return fn, _x(*shapes), ref


def _layer(mode):
    def fn(x, h0, w_ih, w_hh, b_ih, b_hh):
        return ops.rnn_layer(x, h0, w_ih, w_hh, b_ih, b_hh, mode=mode)

    def ref(*arrays):
        return _layer_ref(mode, arrays[0], arrays[1], None, *arrays[2:])

    g = 3 if mode == "gru" else 1
    return fn, _x((4, 3, 2), (3, 3), (g * 3, 2), (g * 3, 3), (g * 3,), (g * 3,)), ref


def _padded_empty(inputs):  # batch axis 1 of x, axis 0 of the states
    return [inputs[0][:, :0]] + [a[:0] for a in inputs[1:3]] + inputs[3:]


def _gru_empty(inputs):
    return [inputs[0][:, :0], inputs[1][:0]] + inputs[2:]


def _spec_layer(label, fn_in_ref, **kw):
    fn, inputs, ref = fn_in_ref
    return OpSpec("rnn_layer", fn, inputs, label, reference=ref, **kw)


SPECS = [
    OpSpec("rnn_cell", ops.rnn_cell, _x((3, 4), (3, 4), (4, 4), (4,)), "tanh", reference=_rnn,
           zero_size=empty_batch(0, 1)),
    OpSpec("rnn_cell", lambda xw, h, w: ops.rnn_cell(xw, h, w, nonlinearity="relu"),
           _x((3, 4), (3, 4), (4, 4)), "relu, no bias",
           reference=lambda xw, h, w: _rnn(xw, h, w, act=lambda a: np.maximum(a, 0)),
           zero_size=empty_batch(0, 1)),
    OpSpec("lstm_cell", ops.lstm_cell, _x((2, 12), (2, 3), (2, 3), (12, 3), (12,)),
           reference=_lstm, zero_size=empty_batch(0, 1, 2)),
    OpSpec("lstm_cell", ops.lstm_cell, _x((2, 12), (2, 2), (2, 3), (12, 2)), "projected h",
           reference=_lstm, zero_size=empty_batch(0, 1, 2)),
    OpSpec("gru_cell", ops.gru_cell, _x((2, 9), (2, 3), (9, 3), (9,)), reference=_gru,
           zero_size=empty_batch(0, 1)),
    OpSpec("gru_cell", ops.gru_cell, _x((2, 9), (2, 3), (9, 3)), "no bias", reference=_gru,
           zero_size=empty_batch(0, 1)),
    _spec_layer("lstm", _lstm_layer(False), zero_size=_padded_empty),
    _spec_layer("lstm packed reverse", _lstm_layer(True, reverse=True), zero_size=None,
                zero_size_reason=_NO_EMPTY),
    _spec_layer("lstm packed proj", _lstm_layer(True, proj=True), zero_size=None,
                zero_size_reason=_NO_EMPTY),
    _spec_layer("gru", _layer("gru"), zero_size=_gru_empty),
    _spec_layer("rnn_tanh", _layer("rnn_tanh"), zero_size=_gru_empty),
]
