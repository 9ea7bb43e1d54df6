"""NumPy reference implementations of the layer ops: test oracles.

Direct loops over output pixels, positions and kernel offsets -- slow and
obviously right, written without tapegrad, in float64. The op specs
(:attr:`tapegrad.testing.specs.OpSpec.reference`) and the family tests compare
the ops against these; use them to test your own ops the same way::

    from tapegrad.testing.reference import ref_conv2d
    np.testing.assert_allclose(ops.conv2d(x, w, padding=1).numpy(),
                               ref_conv2d(x.numpy(), w.numpy(), padding=1))

Paddings follow the ops: an int, ``(ph, pw)`` or ``(top, bottom, left, right)``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ref_conv2d", "ref_conv_transpose2d", "ref_pool", "ref_batch_norm", "ref_lrn",
           "ref_spnorm", "class_positions", "ref_cross_entropy", "ref_vl_loss", "ref_pdist"]


def _pad4(p):
    if isinstance(p, int):
        return (p, p, p, p)
    return (p[0], p[0], p[1], p[1]) if len(p) == 2 else tuple(p)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def ref_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """Direct loops over output pixels and kernel offsets (slow, obviously right)."""
    sh, sw = _pair(stride)
    dh, dw = _pair(dilation)
    t, bo, le, r = _pad4(padding)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + t + bo, wd + le + r))
    xp[:, :, t:t + h, le:le + wd] = x
    ho = (h + t + bo - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + le + r - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    y = np.zeros((n, o, ho, wo))
    for gi in range(groups):
        for oi in range(og):
            oc = gi * og + oi
            for i in range(ho):
                for j in range(wo):
                    for p in range(kh):
                        for q in range(kw):
                            patch = xp[:, gi * cg:(gi + 1) * cg, i * sh + p * dh, j * sw + q * dw]
                            y[:, oc, i, j] += patch @ w[oc, :, p, q]
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def ref_conv_transpose2d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1,
                         dilation=1):
    """Scatter each input pixel times the kernel into the (padded) output, then crop."""
    sh, sw = _pair(stride)
    dh, dw = _pair(dilation)
    oph, opw = _pair(output_padding)
    t, bo, le, r = _pad4(padding)
    n, cin, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = cin // groups
    hp = (h - 1) * sh + dh * (kh - 1) + 1 + oph
    wp = (wd - 1) * sw + dw * (kw - 1) + 1 + opw
    out = np.zeros((n, og * groups, hp, wp))
    for gi in range(groups):
        for i in range(h):
            for j in range(wd):
                for p in range(kh):
                    for q in range(kw):
                        v = x[:, gi * cg:(gi + 1) * cg, i, j] @ w[gi * cg:(gi + 1) * cg, :, p, q]
                        out[:, gi * og:(gi + 1) * og, i * sh + p * dh, j * sw + q * dw] += v
    out = out[:, :, t:hp - bo, le:wp - r]
    if b is not None:
        out = out + b.reshape(1, -1, 1, 1)
    return out


def _pool_size(size, k, s, before, after, ceil):
    span = size + before + after - k
    if ceil:
        n = math.ceil(span / s) + 1
        if (n - 1) * s >= size + before:
            n -= 1
        return n
    return span // s + 1


def ref_pool(x, k, s, pad, ceil, method, include_pad=True):
    """Pooling (``method`` "max" or "avg"; kernel ``k``, stride ``s`` and
    ``pad`` as the ops take them) by loops over every output pixel: (output,
    arg-max (row, column)). The arg-max follows PyTorch's rule: start at the window's first cell
    inside the input, move on ``v > best or isnan(v)`` (ties keep the first;
    the last NaN wins)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (pt, pb, pl, pr) = _pair(k), _pair(s), _pad4(pad)
    ho = _pool_size(h, kh, sh, pt, pb, ceil)
    wo = _pool_size(w, kw, sw, pl, pr, ceil)
    out = np.zeros((n, c, ho, wo))
    arg = np.zeros((n, c, ho, wo, 2), int)
    for b in range(n):
        for ch in range(c):
            for i in range(ho):
                for j in range(wo):
                    r0, c0 = i * sh - pt, j * sw - pl
                    r1, c1 = r0 + kh, c0 + kw
                    best, where, total = -np.inf, (max(r0, 0), max(c0, 0)), 0.0
                    for r in range(max(r0, 0), min(r1, h)):
                        for q in range(max(c0, 0), min(c1, w)):
                            v = x[b, ch, r, q]
                            total += v
                            if v > best or np.isnan(v):
                                best, where = v, (r, q)
                    if method == "max":
                        out[b, ch, i, j] = best
                        arg[b, ch, i, j] = where
                    else:
                        if include_pad:  # cells inside the padded input
                            cnt = (min(r1, h + pb) - r0) * (min(c1, w + pr) - c0)
                        else:
                            cnt = (min(r1, h) - max(r0, 0)) * (min(c1, w) - max(c0, 0))
                        out[b, ch, i, j] = total / cnt
    return out, arg


def ref_batch_norm(x, rm, rv, w, b, training, momentum, eps):
    """Batch norm over all axes but 1: (y, new running mean, new running variance)."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
        m = x.size // x.shape[1]
        new_rm = (1 - momentum) * rm + momentum * mean
        new_rv = (1 - momentum) * rv + momentum * var * m / (m - 1)
    else:
        mean, var, new_rm, new_rv = rm, rv, rm, rv
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    return y * w.reshape(shape) + b.reshape(shape), new_rm, new_rv


def ref_lrn(x, size, alpha, beta, k, over_size):
    """Per-channel loops, truncated at the edges, with each convention's window:
    PyTorch's ``size // 2`` channels before with ``over_size`` (Caffe's for odd
    sizes), MatConvNet's ``(size - 1) // 2`` without."""
    c = x.shape[1]
    lo = size // 2 if over_size else (size - 1) // 2
    hi = size - 1 - lo
    a = alpha / size if over_size else alpha
    y = np.empty_like(x)
    for ch in range(c):
        s = sum(x[:, q] ** 2 for q in range(max(0, ch - lo), min(c, ch + hi + 1)))
        y[:, ch] = x[:, ch] / (k + a * s) ** beta
    return y


def ref_spnorm(x, ph, pw, alpha, beta):
    """MatConvNet's vl_nnspnorm by loops: average of x^2 over the part of the
    PH x PW neighbourhood inside the image."""
    n, c, h, w = x.shape
    top, left = (ph - 1) // 2, (pw - 1) // 2
    y = np.empty_like(x)
    for i in range(h):
        for j in range(w):
            r0, r1 = max(0, i - top), min(h, i - top + ph)
            c0, c1 = max(0, j - left), min(w, j - left + pw)
            n2 = (x[:, :, r0:r1, c0:c1] ** 2).mean(axis=(2, 3))
            y[:, :, i, j] = x[:, :, i, j] / (1 + alpha * n2) ** beta
    return y


def class_positions(x, t):
    """(logit vector, target) per position, in order: a direct loop."""
    n, c = x.shape[:2]
    xs = np.moveaxis(x, 1, -1).reshape(-1, c)
    return list(zip(xs, t.reshape(-1)))


def ref_cross_entropy(x, t, weight=None, ignore_index=-100, reduction="mean",
                      label_smoothing=0.0, normalization=None):
    """PyTorch's cross_entropy (or Caffe's SoftmaxWithLoss with ``normalization``)
    by a loop over positions."""
    c = x.shape[1]
    w = np.ones(c) if weight is None else np.asarray(weight, dtype=np.float64)
    losses, wsum, n_valid = [], 0.0, 0
    for v, k in class_positions(x.astype(np.float64), t):
        if k == ignore_index:
            losses.append(0.0)
            continue
        m = max(v)
        lse = m + math.log(sum(math.exp(a - m) for a in v))
        logp = [a - lse for a in v]
        nll = -w[k] * logp[k]
        smooth = -sum(w[j] * logp[j] for j in range(c)) / c
        losses.append((1 - label_smoothing) * nll + label_smoothing * smooth)
        wsum += w[k]
        n_valid += 1
    losses = np.array(losses).reshape(t.shape)
    total = float(losses.sum())
    if normalization is not None:
        # Caffe's normalizers are at least 1
        div = {"valid": max(n_valid, 1), "batch_size": max(t.shape[0], 1),
               "full": max(t.size, 1), "none": 1}[normalization.lower()]
        return total / div
    if reduction == "none":
        return losses
    if reduction == "sum":
        return total
    if t.size == 0:
        return math.nan  # the mean over an empty batch, as in PyTorch
    return total / (wsum if weight is not None else n_valid) if n_valid else 0.0  # all ignored


def ref_vl_loss(x, c, kind, iw=None, topk=5, threshold=0.0):
    """A direct loop over (n, h, w) [and d for binary kinds], MatConvNet's
    formulas with 0-based labels (negative = ignored) and ±1 binary labels
    (0 = ignored). Returns (loss, dloss/dx)."""
    n, d = x.shape[:2]
    sp = x.shape[2:]
    g = np.zeros_like(x)
    total = 0.0
    for i in range(n):
        for pos in np.ndindex(*sp):
            v = x[(i, slice(None)) + pos]
            if kind in ("binaryerror", "binarylog", "logistic", "hinge"):
                for k in range(d):
                    lab = c[(i, k) + pos]
                    wgt = 1.0 if iw is None else iw[(i, k) + pos]
                    if lab == 0:
                        continue
                    xv = v[k]
                    if kind == "binaryerror":
                        val, dv = float(np.sign(xv - threshold) != lab), 0.0
                    elif kind == "binarylog":
                        val = -math.log(lab * (xv - 0.5) + 0.5)
                        dv = -lab / (lab * (xv - 0.5) + 0.5)
                    elif kind == "logistic":
                        val = math.log1p(math.exp(-lab * xv))
                        dv = -lab / (1 + math.exp(lab * xv))
                    else:
                        val = max(0.0, 1 - lab * xv)
                        dv = -lab if lab * xv < 1 else 0.0
                    total += wgt * val
                    g[(i, k) + pos] += wgt * dv
                continue
            lab = c[(i,) + pos]
            wgt = 1.0 if iw is None else iw[(i,) + pos]
            if lab < 0:
                continue
            dv = np.zeros(d)
            if kind == "classerror":
                val = float(int(np.argmax(v)) != lab)
            elif kind == "topkerror":
                rank = sum(1 for q in range(d) if v[q] > v[lab])
                val = float(rank >= topk)
            elif kind == "log":
                val = -math.log(v[lab])
                dv[lab] = -1 / v[lab]
            elif kind == "softmaxlog":
                p = np.exp(v - v.max())
                p /= p.sum()
                val = -math.log(p[lab])
                dv = p.copy()
                dv[lab] -= 1
            elif kind == "mhinge":
                val = max(0.0, 1 - v[lab])
                dv[lab] = -1.0 if v[lab] < 1 else 0.0
            else:  # mshinge
                q = max((k for k in range(d) if k != lab), key=lambda k: v[k], default=None)
                best = -math.inf if q is None else v[q]
                val = max(0.0, 1 - v[lab] + best)
                if q is not None and v[lab] - v[q] < 1:
                    dv[lab] -= 1
                    dv[q] += 1
            total += wgt * val
            g[(i, slice(None)) + pos] += wgt * dv
    return total, g


def ref_pdist(x, x0, p, no_root=False, aggregate=False, iw=None):
    """A direct loop over (n, h, w): y = (sum_c |x - x0|^p)^(1/p)."""
    x0 = np.broadcast_to(x0, x.shape)
    y = np.zeros(x.shape[:1] + (1,) + x.shape[2:])
    for n in range(x.shape[0]):
        for pos in np.ndindex(*x.shape[2:]):
            s = sum(abs(x[(n, c) + pos] - x0[(n, c) + pos]) ** p for c in range(x.shape[1]))
            y[(n, 0) + pos] = s if no_root else s ** (1 / p)
    if iw is not None:
        y = y * iw
    return y.sum() if aggregate else y
