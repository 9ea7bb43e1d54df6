"""PyTorch's memory formats (``torch.contiguous_format``, ``channels_last``, ...).

A tensor's layout is its array's strides (``Tensor.stride()``, ``is_contiguous()``
read them). As in PyTorch, a channels-last tensor is a logical (N, C, H, W) tensor
whose memory runs N, H, W, C (channels fastest: a transposed view of a C-ordered
(N, H, W, C) array); ``channels_last_3d`` is the same for (N, C, D, H, W). The formats
are taken where PyTorch takes them, with its rules:

- ``x.contiguous(memory_format=f)``: x itself where it lies densely in ``f``, else a
  differentiable copy in ``f``; ``x.to(memory_format=f)`` the same, but x itself where
  its :func:`suggested` format is ``f`` (PyTorch's test);
- ``x.clone()``, ``x.to(dtype)`` and ``zeros_like(x)`` (etc.) default to
  ``preserve_format``: x's order of axes in memory, densely (x's own strides where x
  has no gaps: a channels-last or transposed x stays so; PyTorch's infer_dense_strides);
- ``x.is_contiguous(memory_format=f)``: whether x lies densely in ``f``'s order;
- ``Module.to(memory_format=f)``: 4-D (channels_last) or 5-D (channels_last_3d)
  parameters and buffers change layout in place;
- a leaf's ``.grad`` takes the leaf's strides where the leaf is dense (PyTorch's
  gradient layout contract), and elementwise ops keep their input's layout.

A channels-last format on a tensor of the wrong rank is a ShapeError, as in PyTorch.
Layouts never change a value: they change which memory is read fastest."""

from __future__ import annotations

import numpy as np

from .errors import ArgumentTypeError, ShapeError

__all__ = ["memory_format", "contiguous_format", "preserve_format", "channels_last",
           "channels_last_3d", "check_memory_format"]


class memory_format:  # noqa: N801 - PyTorch's name (torch.memory_format)
    """A memory format: one of the module's four instances."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"tapegrad.{self.name}"

    def __reduce__(self):  # pickles as the same instance
        return self.name


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")


def check_memory_format(who: str, fmt, ndim: int | None = None) -> None:
    """Accept None and the four formats, refusing anything else, naming ``who``; with
    ``ndim`` (the tensor's rank), also :func:`check_rank`."""
    if fmt is not None and not isinstance(fmt, memory_format):
        raise ArgumentTypeError(
            f"{who}: memory_format must be tapegrad.contiguous_format, preserve_format, "
            f"channels_last or channels_last_3d, got {fmt!r}")
    if ndim is not None:
        check_rank(who, fmt, ndim)


# ------------------------------------------------------------- arrays in a format
def _order(fmt, ndim):
    """The axes from slowest to fastest in memory under ``fmt`` for an ``ndim`` array:
    (0, 2, 3, 1) for channels_last (NHWC), (0, 2, 3, 4, 1) for channels_last_3d."""
    if fmt is channels_last or fmt is channels_last_3d:
        return (0,) + tuple(range(2, ndim)) + (1,)
    return tuple(range(ndim))


def check_rank(who: str, fmt, ndim: int) -> None:
    """PyTorch's rule: channels_last needs a 4-D tensor, channels_last_3d a 5-D one
    (PyTorch: "required rank 4 tensor to use channels_last format"); a ShapeError."""
    need = {channels_last: 4, channels_last_3d: 5}.get(fmt)
    if need is not None and ndim != need:
        raise ShapeError(f"{who}: memory_format=tapegrad.{fmt.name} needs a {need}-D "
                         f"tensor (N, C, {'H, W' if need == 4 else 'D, H, W'}), got a {ndim}-D "
                         f"one (PyTorch refuses it too); leave memory_format out (or pass "
                         f"tapegrad.contiguous_format) for a {ndim}-D tensor")


def is_strided_as(a, fmt) -> bool:
    """PyTorch's ``is_contiguous(memory_format=fmt)`` of array ``a``: its elements lie
    densely in ``fmt``'s order, axes of length 1 not counted (an empty array: in every
    format of its rank)."""
    if fmt is not contiguous_format and a.ndim != {channels_last: 4, channels_last_3d: 5}[fmt]:
        return False
    if a.size == 0:
        return True
    expected = a.itemsize
    for d in reversed(_order(fmt, a.ndim)):
        if a.shape[d] != 1:
            if a.strides[d] != expected:
                return False
            expected *= a.shape[d]
    return True


def suggested(a):
    """PyTorch's ``suggest_memory_format()`` of array ``a``: channels_last (or _3d) where
    its strides order the axes as NHWC (NDHWC), with PyTorch's tie-breaks (an empty axis,
    a zero channel stride or an ambiguous N111 tensor stay contiguous_format)."""
    fmt = {4: channels_last, 5: channels_last_3d}.get(a.ndim)
    if fmt is None or a.strides[1] == 0:
        return contiguous_format
    low = 0
    for d in (1,) + tuple(range(a.ndim - 1, 1, -1)) + (0,):
        if a.shape[d] == 0 or a.strides[d] < low or (d == 0 and low == a.strides[1]):
            return contiguous_format
        low = a.strides[d] * max(1, a.shape[d])
    return fmt


def empty(xp, shape, dtype, fmt):
    """An uninitialised array of ``shape`` whose memory lies in ``fmt``'s order."""
    return _empty_in(xp, shape, dtype, _order(fmt, len(shape)))


def _empty_in(xp, shape, dtype, order):
    """An uninitialised array of ``shape`` whose axes run ``order`` (slowest first)."""
    a = xp.empty(tuple(shape[d] for d in order), dtype)
    if list(order) == sorted(order):
        return a
    return a.transpose(tuple(order.index(d) for d in range(len(shape))))


def dense_strides(shape, fmt) -> tuple:
    """Element strides of a dense array of ``shape`` in ``fmt``'s order (as :func:`empty`
    allocates it): (C*H*W, 1, W*C, C) for an (N, C, H, W) channels_last one."""
    out, step = [0] * len(shape), 1
    for d in reversed(_order(fmt, len(shape))):
        out[d] = step
        step *= shape[d]
    return tuple(out)


def laid_out(xp, a, fmt):
    """An op's result ``a`` (or None) in its format ``fmt``: ``a`` as the kernel made it
    (any strides) for contiguous_format, else :func:`as_format`'s (copied where it is not
    dense in ``fmt``'s order)."""
    return a if a is None or fmt is contiguous_format else as_format(xp, a, fmt)


def as_format(xp, a, fmt):
    """``a`` itself where it lies in ``fmt``'s order, else a copy that does."""
    if is_strided_as(a, fmt):
        return a
    out = empty(xp, a.shape, a.dtype, fmt)
    out[...] = a
    return out


def steps(a) -> tuple:
    """Array ``a``'s strides in elements, as PyTorch gives them (``Tensor.stride()``):
    NumPy's 0 for an inserted axis of length 1 is PyTorch's next stride * size."""
    out = [s // a.itemsize for s in a.strides]
    for i in reversed(range(a.ndim)):
        if a.shape[i] == 1 and out[i] == 0:
            out[i] = out[i + 1] * a.shape[i + 1] if i + 1 < a.ndim else 1
    return tuple(out)


def dense(a) -> bool:
    """PyTorch's ``is_non_overlapping_and_dense`` of array ``a``, reading a NumPy
    reversed axis (a flip's view, stride < 0) by its stride's size: no gaps and no two
    elements at one address."""
    expected = 1
    for step, n in sorted((abs(s), n) for s, n in zip(steps(a), a.shape) if n != 1):
        if step != expected:
            return False
        expected *= n
    return True


def memory_order(a) -> list:
    """The axes of array ``a`` from slowest to fastest in memory, as PyTorch orders them
    for ``preserve_format`` (``infer_dense_strides``, TensorIterator's order): by stride,
    of two with one stride the shorter faster, an axis of stride 0 (expanded) left where
    it is. A NumPy reversed axis counts by its stride's size."""
    if a.flags.c_contiguous and 1 not in a.shape:  # the usual case, quickly
        return list(range(a.ndim))
    st = [abs(s) for s in steps(a)]
    perm = list(range(a.ndim))[::-1]  # fastest first, sorted by insertion as PyTorch's
    for i in range(1, a.ndim):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            s0, s1 = st[perm[d0]], st[perm[d1]]
            if s0 and s1 and s0 < s1:
                break
            if s0 and s1 and (s0 > s1 or a.shape[perm[d0]] > a.shape[perm[d1]]):
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
    return perm[::-1]


def empty_like(xp, a, fmt=preserve_format, dtype=None):
    """PyTorch's ``empty_like(a, memory_format=fmt)`` of array ``a`` (``dtype``: a's
    unless given): ``preserve_format`` keeps a's order of axes in memory
    (:func:`memory_order`: a's strides where ``a`` is dense), the other formats lay it
    out in their order."""
    dtype = a.dtype if dtype is None else np.dtype(dtype)
    if fmt is not preserve_format:
        return empty(xp, a.shape, dtype, fmt)
    return _empty_in(xp, a.shape, dtype, memory_order(a))
