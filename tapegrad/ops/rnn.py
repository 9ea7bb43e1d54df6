"""Recurrent cells (Elman RNN, LSTM, GRU) as fused ops, and one layer's step loop.

A cell takes the input projection ``xw = x @ W_ih^T + b_ih`` (computed for all
time steps at once by :func:`rnn_layer`: one GEMM per layer and direction) and
does the recurrent GEMM ``h @ W_hh^T`` and the gate math in one op, with the vjp
written out beside it. Gate order and formulas are PyTorch's: LSTM (i, f, g, o);
GRU (r, z, n) with ``n = tanh(xw_n + r * (h @ W_hn^T + b_hn))``. The first-order
vjps read the saved activations; under create_graph they are recomputed from the
inputs by recorded ops (the saved ones are constants there).

A padded sequence without projection runs as one op, :class:`Sequence`: the same
steps on raw arrays, and one vjp whose weight gradient is a single GEMM over all
steps. Packed sequences and LSTM projections record one cell op per step.
"""

from __future__ import annotations

import numpy as np

from ..device import pool
from ..dtypes import REFUSE, check_same_float, int_input
from ..errors import ArgumentError, ShapeError, describe
from ..tape import Function
from ..tensor import _wrap
from . import activation, linalg, reduction, shape

__all__ = ["rnn_cell", "lstm_cell", "gru_cell", "rnn_layer"]

MODES = ("rnn_tanh", "rnn_relu", "lstm", "gru")
_GATES = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}


def _sigmoid_(xp, a):
    """Sigmoid in place as ``0.5 * tanh(a / 2) + 0.5``: one transcendental pass,
    no overflow for large negative ``a``."""
    a *= 0.5
    xp.tanh(a, out=a)
    a *= 0.5
    a += 0.5


def _recurrent(h, w, b, w_t):
    """``h @ W_hh^T + b_hh`` as a fresh (B, G) array. ``w_t`` is W_hh^T made
    contiguous once per sequence by rnn_layer (OpenBLAS's transposed-B GEMM is
    ~1.7x slower at these sizes)."""
    out = pool.matmul(h, w.T if w_t is None else w_t)  # (B, Hin) @ (Hin, G) -> (B, G)
    if b is not None:
        out += b
    return out


def _weight_grads(d, h, w, nh, nw, nb):
    """Gradients of h (through the GEMM), W_hh and b_hh from ``d`` = d(h @ W^T + b)."""
    gh = pool.matmul(d, w) if nh else None  # (B, G) @ (G, Hin) -> (B, Hin)
    gw = pool.matmul(d.T, h) if nw else None  # (G, B) @ (B, Hin) -> (G, Hin)
    gb = d.sum(axis=0) if nb else None
    return gh, gw, gb


def _rnn_step(xp, xw, h, w, b, w_t, nonlinearity):
    out = _recurrent(h, w, b, w_t)
    out += xw
    if nonlinearity == "tanh":
        xp.tanh(out, out=out)
    else:
        xp.maximum(out, 0, out=out)
    return out


def _rnn_step_vjp(out, g, nonlinearity):
    """d(pre-activation): d tanh = 1 - out^2; d relu = [out > 0] (PyTorch's mask)."""
    return g * (1 - out * out) if nonlinearity == "tanh" else g * (out > 0)


class RNNCell(Function):
    """``h' = act(xw + h @ W_hh^T + b_hh)``, act tanh or relu; vjp from the output."""

    differentiable_twice = True
    int_inputs = REFUSE

    @staticmethod
    def forward(ctx, xw, h, w, b, nonlinearity, w_t=None):
        out = _rnn_step(ctx.xp, xw, h, w, b, w_t, nonlinearity)
        ctx.nonlinearity = nonlinearity
        ctx.save_for_backward(h, w, out)
        return out

    @staticmethod
    def backward(ctx, g):
        h, w, out = ctx.saved_tensors
        d = _rnn_step_vjp(out, g, ctx.nonlinearity)
        nx, nh, nw, nb, _ = ctx.needs_input_grad
        return (d if nx else None, *_weight_grads(d, h, w, nh, nw, nb), None)


_LSTM_HALF = ((0.5,), (0.5,), (1.0,), (0.5,))  # per gate (i, f, g, o), broadcast over H
_LSTM_SHIFT = ((0.5,), (0.5,), (0.0,), (0.5,))
_LSTM_TANH = ((0.0,), (0.0,), (1.0,), (0.0,))


def _lstm_step(xp, xw, h, c, w, b, w_t):
    """One step on raw arrays: (gate activations a (B, 4H), c', h')."""
    n = c.shape[1]
    a = _recurrent(h, w, b, w_t)  # (B, 4H) pre-activations, then activations
    a += xw
    # the four gates in one tanh over the contiguous array (on column slices NumPy's
    # tanh is ~4x slower): sigmoid(v) = 0.5 tanh(v / 2) + 0.5 for i, f, o
    half = xp.asarray(_LSTM_HALF, a.dtype)  # (4, 1): 0.5, 0.5, 1, 0.5
    gates = a.reshape(a.shape[0], 4, n)  # (B, 4H) -> (B, 4, H)
    gates *= half
    xp.tanh(a, out=a)
    gates *= half
    gates += xp.asarray(_LSTM_SHIFT, a.dtype)
    i, f, gg, o = a[:, :n], a[:, n:2 * n], a[:, 2 * n:3 * n], a[:, 3 * n:]
    c2 = f * c
    c2 += i * gg
    h2 = xp.tanh(c2)
    h2 *= o
    return a, c2, h2


def _lstm_step_vjp(xp, a, c, c2, gh, gc):
    """(d of the pre-activations (B, 4H), d of c) from the step's a, c, c' and the
    gradients of h' and c' (gc may be None)."""
    n = c.shape[1]
    i, f, gg, o = a[:, :n], a[:, n:2 * n], a[:, 2 * n:3 * n], a[:, 3 * n:]
    tc = xp.tanh(c2)
    up = xp.empty_like(a)  # the upstream of each gate's activation
    ups = up.reshape(a.shape[0], 4, n)  # (B, 4H) -> (B, 4, H)
    xp.multiply(gh, o, out=ups[:, 3])
    dc = 1 - tc * tc  # dc' = gh * o * (1 - tanh(c')^2) + gc
    dc *= ups[:, 3]
    if gc is not None:
        dc += gc
    xp.multiply(dc, gg, out=ups[:, 0])
    xp.multiply(dc, c, out=ups[:, 1])
    xp.multiply(dc, i, out=ups[:, 2])
    xp.multiply(gh, tc, out=ups[:, 3])
    # local derivatives: sigmoid a (1 - a), tanh (1 + a)(1 - a), in full-array passes
    d = (a.reshape(ups.shape) + xp.asarray(_LSTM_TANH, a.dtype)).reshape(a.shape)
    d *= 1 - a
    d *= up
    dc *= f
    return d, dc


class LSTMCell(Function):
    """``(h', c')`` of one LSTM step from ``xw`` (B, 4H), ``h`` (B, Hin), ``c`` (B, H)."""

    differentiable_twice = True  # under create_graph: _lstm_graph
    int_inputs = REFUSE

    @staticmethod
    def forward(ctx, xw, h, c, w, b, w_t=None):
        a, c2, h2 = _lstm_step(ctx.xp, xw, h, c, w, b, w_t)
        ctx.save_for_backward(xw, h, c, w, b, a, c2)  # xw and b for create_graph only
        return h2, c2

    @staticmethod
    def backward(ctx, gh, gc):
        xw, h, c, w, b, a, c2 = ctx.saved_tensors
        if ctx._graph:
            return _lstm_graph(ctx, xw, h, c, w, b, gh, gc)
        d, dc = _lstm_step_vjp(ctx.xp, a, c, c2, gh, gc)
        nx, nh, nc, nw, nb = ctx.needs_input_grad
        gh_prev, gw, gb = _weight_grads(d, h, w, nh, nw, nb)
        return (d if nx else None), gh_prev, (dc if nc else None), gw, gb


def _lstm_graph(ctx, xw, h, c, w, b, gh, gc):
    """LSTMCell's vjp as recorded ops on Tensors (create_graph)."""
    pre = xw + linalg.linear(h, w, b)
    i, f, gg, o = shape.split(pre, 4, axis=1)
    i, f, o, gg = activation.sigmoid(i), activation.sigmoid(f), activation.sigmoid(o), \
        activation.tanh(gg)
    tc = activation.tanh(f * c + i * gg)
    dc = gh * o * (1 - tc * tc) + gc
    d = shape.concatenate([dc * gg * (i - i * i), dc * c * (f - f * f), dc * i * (1 - gg * gg),
                           gh * tc * (o - o * o)], axis=1)
    nx, nh, nc, nw, nb = ctx.needs_input_grad
    return (d if nx else None, linalg.matmul(d, w) if nh else None, dc * f if nc else None,
            linalg.matmul(d.T, h) if nw else None, reduction.sum(d, axis=0) if nb else None)


class GRUCell(Function):
    """``h'`` of one GRU step from ``xw`` (B, 3H) and ``h`` (B, H)."""

    differentiable_twice = True  # under create_graph: _gru_graph
    int_inputs = REFUSE

    @staticmethod
    def forward(ctx, xw, h, w, b, w_t=None):
        a, new, hn, h2 = _gru_step(ctx.xp, xw, h, w, b, w_t)
        ctx.save_for_backward(xw, h, w, b, a, new, hn)  # xw and b for create_graph only
        return h2

    @staticmethod
    def backward(ctx, g):
        xw, h, w, b, a, new, hn = ctx.saved_tensors
        if ctx._graph:
            return _gru_graph(ctx, xw, h, w, b, g)
        d, dhw, direct = _gru_step_vjp(ctx.xp, h, a, new, hn, g)
        nx, nh, nw, nb = ctx.needs_input_grad
        gh, gw, gb = _weight_grads(dhw, h, w, nh, nw, nb)
        if gh is not None:
            gh += direct
        return (d if nx else None), gh, gw, gb


def _gru_step(xp, xw, h, w, b, w_t):
    """One step on raw arrays: (r and z (B, 2H), n, h @ W_hn^T + b_hn, h')."""
    n = h.shape[1]
    hw = _recurrent(h, w, b, w_t)  # (B, 3H): h @ W_hh^T + b_hh
    a = xw[:, :2 * n] + hw[:, :2 * n]  # (B, 2H): r, z
    _sigmoid_(xp, a)
    r, z = a[:, :n], a[:, n:]
    hn = hw[:, 2 * n:]
    new = r * hn
    new += xw[:, 2 * n:]
    xp.tanh(new, out=new)
    h2 = h - new  # h' = (1 - z) n + z h = n + z (h - n)
    h2 *= z
    h2 += new
    return a, new, hn, h2


def _gru_step_vjp(xp, h, a, new, hn, g):
    """(d of xw (B, 3H), d of h @ W^T + b (B, 3H), the direct part of d h: g z)."""
    n = h.shape[1]
    r, z = a[:, :n], a[:, n:]
    d = xp.empty((g.shape[0], 3 * n), g.dtype)  # d(xw): r, z, n pre-activations
    dn = d[:, 2 * n:]
    xp.multiply(new, new, out=dn)
    xp.subtract(1, dn, out=dn)
    dn *= 1 - z
    dn *= g
    xp.multiply(dn, hn, out=d[:, :n])
    d[:, :n] *= r - r * r
    xp.subtract(h, new, out=d[:, n:2 * n])
    d[:, n:2 * n] *= z - z * z
    d[:, n:2 * n] *= g
    dhw = d.copy()  # d(h @ W^T + b): the n part passes through r
    dhw[:, 2 * n:] *= r
    return d, dhw, g * z


def _gru_graph(ctx, xw, h, w, b, g):
    """GRUCell's vjp as recorded ops on Tensors (create_graph)."""
    hw = linalg.linear(h, w, b)
    x_r, x_z, x_n = shape.split(xw, 3, axis=1)
    h_r, h_z, hn = shape.split(hw, 3, axis=1)
    r, z = activation.sigmoid(x_r + h_r), activation.sigmoid(x_z + h_z)
    new = activation.tanh(x_n + r * hn)
    dn = g * (1 - z) * (1 - new * new)
    dr = dn * hn * (r - r * r)
    dz = g * (h - new) * (z - z * z)
    nx, nh, nw, nb = ctx.needs_input_grad
    dhw = shape.concatenate([dr, dz, dn * r], axis=1)
    return (shape.concatenate([dr, dz, dn], axis=1) if nx else None,
            g * z + linalg.matmul(dhw, w) if nh else None,
            linalg.matmul(dhw.T, h) if nw else None,
            reduction.sum(dhw, axis=0) if nb else None)


class Sequence(Function):
    """One layer and direction of an RNN / LSTM / GRU over a padded sequence (no
    projection) as one op: forward the step loop on raw arrays; the vjp the reversed
    loop, with the weight gradient as one GEMM over every step, (G, T*B) @ (T*B, H).
    Per-step cells run T GEMMs of K = B for it instead (at T = 35, B = 20, H = 200:
    2.6 ms against 1.3 ms, before the T accumulations into one gradient).

    xw (T, B, G) is the input projection, h0 (B, H), c0 (B, H) for an LSTM else None;
    returns (out (T, B, H), h_n) and c_n for an LSTM."""

    differentiable_twice = True  # under create_graph: _sequence_graph (the cells' vjps)
    int_inputs = REFUSE

    @staticmethod
    def forward(ctx, xw, h0, c0, w, b, mode, reverse, w_t):
        xp, (steps, batch, _), n = ctx.xp, xw.shape, h0.shape[1]
        out = xp.empty((steps, batch, n), xw.dtype)
        acts = cells = news = hns = None
        if mode == "lstm":
            acts, cells = xp.empty_like(xw), xp.empty_like(out)
        elif mode == "gru":
            acts = xp.empty((steps, batch, 2 * n), xw.dtype)
            news, hns = xp.empty_like(out), xp.empty_like(out)
        h, c = h0, c0
        for t in _order(steps, reverse):
            if mode == "lstm":
                acts[t], cells[t], out[t] = _lstm_step(xp, xw[t], h, c, w, b, w_t)
                c = cells[t]
            elif mode == "gru":
                acts[t], news[t], hns[t], out[t] = _gru_step(xp, xw[t], h, w, b, w_t)
            else:
                out[t] = _rnn_step(xp, xw[t], h, w, b, w_t, mode[4:])
            h = out[t]
        ctx.mode, ctx.reverse = mode, reverse
        ctx.save_for_backward(xw, h0, c0, w, b, out, acts, cells, news, hns)
        return (out, h.copy(), c.copy()) if mode == "lstm" else (out, h.copy())

    @staticmethod
    def backward(ctx, g_out, g_h, g_c=None):
        xw, h0, c0, w, b, out, acts, cells, news, hns = ctx.saved_tensors
        if ctx._graph:
            return _sequence_graph(ctx, xw, h0, c0, w, b, g_out, g_h, g_c)
        xp, mode = ctx.xp, ctx.mode
        steps = out.shape[0]
        nx, nh, nc, nw, nb = ctx.needs_input_grad[:5]
        fwd = _order(steps, ctx.reverse)
        d_pre = xp.empty(out.shape[:2] + (w.shape[0],), out.dtype)  # d(h @ W^T + b) (T, B, G)
        d_xw = xp.empty_like(d_pre) if mode == "gru" else d_pre
        dh, dc = g_h, g_c
        for k in range(steps - 1, -1, -1):
            t = fwd[k]
            h_prev = out[fwd[k - 1]] if k else h0
            gh = dh + g_out[t]
            if mode == "lstm":
                d_pre[t], dc = _lstm_step_vjp(xp, acts[t], cells[fwd[k - 1]] if k else c0,
                                              cells[t], gh, dc)
            elif mode == "gru":
                d_xw[t], d_pre[t], direct = _gru_step_vjp(xp, h_prev, acts[t], news[t], hns[t],
                                                          gh)
            else:
                d_pre[t] = _rnn_step_vjp(out[t], gh, mode[4:])
            if k or nh:
                dh = pool.matmul(d_pre[t], w)  # (B, G) @ (G, H) -> (B, H)
                if mode == "gru":
                    dh += direct
        gw = gb = None
        if nw:  # the inputs of every step's recurrent GEMM, in time order
            h_prev = xp.concatenate([out[1:], h0[None]] if ctx.reverse else [h0[None], out[:-1]])
            g = d_pre.shape[2]
            gw = pool.matmul(d_pre.reshape(-1, g).T, h_prev.reshape(-1, h0.shape[1]))
        if nb:
            gb = d_pre.sum(axis=(0, 1))
        return (d_xw if nx else None, dh if nh else None, dc if nc and mode == "lstm" else None,
                gw, gb, None, None)


def _cell(mode, xw, h, c, w, b, w_t=None):
    """One recorded step of ``mode``: ``(h', c')``, c' None but for an LSTM."""
    if mode == "lstm":
        return LSTMCell.apply(xw, h, c, w, b, w_t=w_t)
    if mode == "gru":
        return GRUCell.apply(xw, h, w, b, w_t=w_t), None
    return RNNCell.apply(xw, h, w, b, mode[4:], w_t=w_t), None


def _order(steps, reverse):
    return range(steps - 1, -1, -1) if reverse else range(steps)


class _Needs:  # what the cells' recorded vjps read of their ctx
    def __init__(self, *flags):
        self.needs_input_grad = flags


def _sequence_graph(ctx, xw, h0, c0, w, b, g_out, g_h, g_c):
    """Sequence's vjp as recorded ops (create_graph): the steps again as cells, then the
    cells' recorded vjps in reverse."""
    mode, (nx, nh, nc, nw, nb) = ctx.mode, ctx.needs_input_grad[:5]
    fwd = _order(xw.shape[0], ctx.reverse)
    hs, cs = [h0], [c0]
    for t in fwd:
        h, c = _cell(mode, xw[t], hs[-1], cs[-1], w, b)
        hs.append(h)
        cs.append(c)
    dxs, gw, gb, dh, dc = [None] * len(fwd), None, None, g_h, g_c
    for k in range(len(fwd) - 1, -1, -1):
        t = fwd[k]
        gh = dh + g_out[t]
        if mode == "lstm":
            dxs[t], dh, dc, dw, db = _lstm_graph(_Needs(True, True, True, nw, nb), xw[t],
                                                 hs[k], cs[k], w, b, gh, dc)
        elif mode == "gru":
            dxs[t], dh, dw, db = _gru_graph(_Needs(True, True, nw, nb), xw[t], hs[k], w, b, gh)
        else:
            d = _rnn_step_vjp(hs[k + 1], gh, mode[4:])
            dxs[t], dh = d, linalg.matmul(d, w)
            dw = linalg.matmul(d.T, hs[k]) if nw else None
            db = reduction.sum(d, axis=0) if nb else None
        gw = dw if gw is None else (gw if dw is None else gw + dw)
        gb = db if gb is None else (gb if db is None else gb + db)
    return (shape.stack(dxs) if nx else None, dh if nh else None,
            dc if nc and mode == "lstm" else None, gw, gb, None, None)


# ------------------------------------------------------------- public functions

def _check(op, gates, xw, h, w, b, c=None):
    """Shapes and dtypes of a cell's operands: xw (B, G*H), h (B, Hin), w (G*H, Hin),
    b (G*H,), c (B, H)."""
    check_same_float(op, xw, h, w, b, c)
    ok = xw.ndim == 2 and h.ndim == 2 and w.ndim == 2 and w.shape[0] % gates == 0
    hidden = w.shape[0] // gates if ok else None
    ok = ok and xw.shape == (h.shape[0], w.shape[0]) and h.shape[1] == w.shape[1]
    ok = ok and (b is None or b.shape == (w.shape[0],))
    if c is not None:
        ok = ok and c.shape == (h.shape[0], hidden)
    else:
        ok = ok and (gates == 4 or h.shape[1] == hidden)
    if not ok:
        cs = [c] if c is not None else []
        raise ShapeError(
            f"{op}: xw, h, {'c, ' if cs else ''}weight_hh, bias_hh are "
            f"{describe(xw, h, *cs, w, b)}; expected xw (B, {gates}*H), h (B, H), "
            f"{'c (B, H), ' if cs else ''}weight_hh ({gates}*H, H), bias_hh ({gates}*H,) or None")


def rnn_cell(xw, h, weight_hh, bias_hh=None, nonlinearity="tanh"):
    """One Elman RNN step: ``act(xw + h @ weight_hh.T + bias_hh)`` with ``xw`` the
    input projection ``x @ weight_ih.T + bias_ih`` (B, H); act ``"tanh"`` or ``"relu"``.

    >>> h = ops.rnn_cell(ops.linear(x, w_ih, b_ih), h, w_hh, b_hh)
    """
    if nonlinearity not in ("tanh", "relu"):
        raise ArgumentError(f"rnn_cell: nonlinearity must be 'tanh' or 'relu', got "
                            f"{nonlinearity!r}")
    xw, h, weight_hh, bias_hh = (int_input(RNNCell, a) for a in (xw, h, weight_hh, bias_hh))
    _check("rnn_cell", 1, xw, h, weight_hh, bias_hh)
    return RNNCell.apply(xw, h, weight_hh, bias_hh, nonlinearity)


def lstm_cell(xw, h, c, weight_hh, bias_hh=None):
    """One LSTM step from the input projection ``xw = x @ weight_ih.T + bias_ih``
    (B, 4H), gates (i, f, g, o) as PyTorch's; returns ``(h', c')``.

    >>> h, c = ops.lstm_cell(ops.linear(x, w_ih, b_ih), h, c, w_hh, b_hh)
    """
    xw, h, c, weight_hh, bias_hh = (int_input(LSTMCell, a)
                                    for a in (xw, h, c, weight_hh, bias_hh))
    _check("lstm_cell", 4, xw, h, weight_hh, bias_hh, c)
    return LSTMCell.apply(xw, h, c, weight_hh, bias_hh)


def gru_cell(xw, h, weight_hh, bias_hh=None):
    """One GRU step from the input projection ``xw = x @ weight_ih.T + bias_ih``
    (B, 3H), gates (r, z, n) as PyTorch's (b_hn inside ``r * (...)``); returns ``h'``.

    >>> h = ops.gru_cell(ops.linear(x, w_ih, b_ih), h, w_hh, b_hh)
    """
    xw, h, weight_hh, bias_hh = (int_input(GRUCell, a) for a in (xw, h, weight_hh, bias_hh))
    _check("gru_cell", 3, xw, h, weight_hh, bias_hh)
    return GRUCell.apply(xw, h, weight_hh, bias_hh)


_CELLS = {"rnn_tanh": RNNCell, "rnn_relu": RNNCell, "lstm": LSTMCell, "gru": GRUCell}


def _check_layer(mode, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, sizes):
    """Shapes of rnn_layer's operands; returns (hidden size, output size)."""
    g = _GATES[mode]
    gh, hid = w_hh.shape[0], w_hh.shape[0] // g if w_hh.ndim == 2 else 0
    out = w_hr.shape[0] if w_hr is not None else hid
    batch = sizes[0] if sizes else 0
    bad = []
    if w_ih.ndim != 2 or w_hh.ndim != 2 or gh % g or w_ih.shape[0] != gh:
        bad.append(f"weight_ih {describe(w_ih)} and weight_hh {describe(w_hh)} must be "
                   f"({g}*H, input_size) and ({g}*H, H_out)")
    elif x.shape[-1] != w_ih.shape[1]:
        bad.append(f"input {describe(x)} has {x.shape[-1]} features, weight_ih wants "
                   f"{w_ih.shape[1]}")
    elif w_hh.shape[1] != out or (w_hr is not None and w_hr.shape != (out, hid)):
        bad.append(f"weight_hh {describe(w_hh)} and weight_hr "
                   f"{describe(w_hr) if w_hr is not None else 'None'} do not fit: weight_hh "
                   f"({g}*H, H_out), weight_hr (H_out, H)")
    for name, b in (("bias_ih", b_ih), ("bias_hh", b_hh)):
        if b is not None and b.shape != (gh,):
            bad.append(f"{name} {describe(b)} must be ({gh},)")
    if h0 is not None and h0.shape != (batch, out):
        bad.append(f"h0 {describe(h0)} must be ({batch}, {out})")
    if c0 is not None and c0.shape != (batch, hid):
        bad.append(f"c0 {describe(c0)} must be ({batch}, {hid})")
    if bad:
        raise ShapeError(f"rnn_layer ({mode}): " + "; ".join(bad))
    return hid, out


def _sizes(x, batch_sizes):
    """The batch size of each time step: T times B for a padded (T, B, I) input;
    a packed (N, I) input's ``batch_sizes`` (positive, non-increasing, summing to N)."""
    if batch_sizes is None:
        if x.ndim != 3 or x.shape[0] == 0:
            raise ShapeError(f"rnn_layer: a padded input must be (T, B, input_size) with T > 0, "
                             f"got {describe(x)}")
        return (x.shape[1],) * x.shape[0]
    sizes = tuple(int(b) for b in np.asarray(batch_sizes).reshape(-1))
    if x.ndim != 2 or not sizes or sizes[-1] < 1 or sum(sizes) != x.shape[0] or \
            any(a < b for a, b in zip(sizes, sizes[1:])):
        raise ShapeError(f"rnn_layer: packed data {describe(x)} and batch_sizes {sizes} do not "
                         "fit: batch_sizes must be positive, non-increasing and sum to the "
                         "data's rows (use nn.utils.rnn.pack_padded_sequence)")
    return sizes


def rnn_layer(x, hx, weight_ih, weight_hh, bias_ih=None, bias_hh=None, *, mode="lstm",
              weight_hr=None, batch_sizes=None, reverse=False):
    """One layer and one direction of PyTorch's RNN / LSTM / GRU over a sequence.

    ``x`` is (T, B, I), or packed data (N, I) with ``batch_sizes`` (one per time step);
    ``hx`` is h0 (B, H_out), ``(h0, c0)`` for ``mode="lstm"``, or None (zeros).
    ``mode``: "rnn_tanh", "rnn_relu", "lstm", "gru"; ``weight_hr`` is the LSTM's
    projection (proj_size). One GEMM projects every step's input; each step then
    records one fused cell op. Returns ``(out, h_n)`` or ``(out, (h_n, c_n))`` with
    ``out`` (T, B, H_out) or (N, H_out); ``reverse`` runs the steps backwards.

    >>> out, (h, c) = ops.rnn_layer(x, None, w_ih, w_hh, b_ih, b_hh, mode="lstm")
    """
    if mode not in MODES:
        raise ArgumentError(f"rnn_layer: mode must be one of {MODES}, got {mode!r}")
    lstm = mode == "lstm"
    if lstm:
        h0, c0 = (None, None) if hx is None else hx
    elif isinstance(hx, (tuple, list)):
        raise ArgumentError(f"rnn_layer ({mode}): hx must be one tensor h0, got a "
                            f"{type(hx).__name__} (only an LSTM takes (h0, c0))")
    else:
        h0, c0 = hx, None
    if weight_hr is not None and not lstm:
        raise ArgumentError(f"rnn_layer ({mode}): weight_hr (proj_size) is for mode='lstm' only")
    cell = _CELLS[mode]
    x, h0, c0, weight_ih, weight_hh, bias_ih, bias_hh, weight_hr = (
        int_input(cell, a) for a in (x, h0, c0, weight_ih, weight_hh, bias_ih, bias_hh,
                                     weight_hr))
    check_same_float("rnn_layer", x, h0, c0, weight_ih, weight_hh, bias_ih, bias_hh, weight_hr)
    sizes = _sizes(x, batch_sizes)
    hid, n_out = _check_layer(mode, x, h0, c0, weight_ih, weight_hh, bias_ih, bias_hh,
                              weight_hr, sizes)
    batch, steps = sizes[0], len(sizes)
    if h0 is None:
        h0 = _wrap(x.device.xp.zeros((batch, n_out), x.dtype), x.device, None, 0, False)
    if lstm and c0 is None:
        c0 = _wrap(x.device.xp.zeros((batch, hid), x.dtype), x.device, None, 0, False)
    # b_hh stays in each step (folded into b_ih, the two would get one gradient array)
    xw = linalg.linear(x, weight_ih, bias_ih)  # (T, B, I) -> (T, B, G) or (N, I) -> (N, G)
    w_t = weight_hh.device.xp.ascontiguousarray(weight_hh.array.T)  # (G, H_out) -> (H_out, G)
    if batch_sizes is None and weight_hr is None:  # padded: the whole sequence as one op
        outs = Sequence.apply(xw, h0, c0 if lstm else None, weight_hh, bias_hh, mode, reverse,
                              w_t=w_t)
        return (outs[0], (outs[1], outs[2])) if lstm else tuple(outs)
    if batch_sizes is None:
        xw = xw.reshape(steps * batch, xw.shape[-1])  # (T, B, G) -> (T*B, G)
    cuts = np.cumsum(sizes)[:-1].tolist()
    xs = shape.split(xw, cuts, axis=0) if cuts else (xw,)
    outs = [None] * steps
    ends_h, ends_c = [], []
    rows = sizes[-1] if reverse else batch
    h, c = (h0, c0) if rows == batch else (h0[:rows], c0[:rows] if lstm else None)
    for t in _order(steps, reverse):
        b = sizes[t]
        if b < rows:  # forward: sequences rows b.. ended at step t - 1
            ends_h.append(h[b:])
            h = h[:b]
            if lstm:
                ends_c.append(c[b:])
                c = c[:b]
        elif b > rows:  # reverse: sequences rows.. start here from their h0
            h = shape.concatenate([h, h0[rows:b]])
            if lstm:
                c = shape.concatenate([c, c0[rows:b]])
        rows = b
        h, c = _cell(mode, xs[t], h, c, weight_hh, bias_hh, w_t)
        if weight_hr is not None:
            h = linalg.linear(h, weight_hr)
        outs[t] = h
    out = shape.stack(outs) if batch_sizes is None else shape.concatenate(outs)
    if ends_h:  # rows in order: the longest sequences first
        h = shape.concatenate([h, *reversed(ends_h)])
        if lstm:
            c = shape.concatenate([c, *reversed(ends_c)])
    return (out, (h, c)) if lstm else (out, h)
