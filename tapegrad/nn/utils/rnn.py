"""Padded and packed sequence batches (PyTorch's ``torch.nn.utils.rnn``).

A :class:`PackedSequence` holds the time steps of a batch of sequences sorted by
decreasing length, step after step: ``data`` (sum of lengths, *), and
``batch_sizes[t]``, how many sequences are longer than ``t``. Packing and
unpacking are one gather each (differentiable: the backward is a scatter).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ... import ops
from ...creation import full
from ...device import to_host
from ...errors import ArgumentError, ArgumentTypeError, ShapeError
from ...tensor import Tensor

__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence",
           "pack_sequence", "unpad_sequence", "unpack_sequence", "invert_permutation"]


def _ints(x) -> np.ndarray:
    """A host int64 vector of a Tensor, array or list."""
    if isinstance(x, Tensor):
        x = x.array
    return np.asarray(to_host(x) if hasattr(x, "shape") else x, dtype=np.int64).reshape(-1)


def _index_tensor(a, device):
    return Tensor(np.asarray(a, dtype=np.int64), device=device)


def invert_permutation(permutation):
    """The inverse permutation (an int64 Tensor), or None for None.

    >>> invert_permutation(tg.tensor([2, 0, 1]))   # tensor([1, 2, 0])
    """
    if permutation is None:
        return None
    p = _ints(permutation)
    inv = np.empty_like(p)
    inv[p] = np.arange(len(p))
    device = permutation.device if isinstance(permutation, Tensor) else "cpu"
    return _index_tensor(inv, device)


class _Packed(NamedTuple):
    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None
    unsorted_indices: Tensor | None


class PackedSequence(_Packed):
    """``(data, batch_sizes, sorted_indices, unsorted_indices)``, as PyTorch's; made by
    :func:`pack_padded_sequence` / :func:`pack_sequence`, taken and returned by
    ``nn.RNN``, ``nn.LSTM`` and ``nn.GRU``.

    >>> packed = pack_sequence([tg.ones(3, 2), tg.ones(1, 2)])   # batch_sizes [2, 1, 1]
    """

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if batch_sizes is None:
            raise ArgumentError("PackedSequence: batch_sizes is required; build packed "
                                "batches with pack_padded_sequence or pack_sequence")
        if not isinstance(batch_sizes, Tensor):
            batch_sizes = _index_tensor(_ints(batch_sizes), "cpu")
        if sorted_indices is not None and not isinstance(sorted_indices, Tensor):
            sorted_indices = _index_tensor(_ints(sorted_indices), data.device)
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        elif not isinstance(unsorted_indices, Tensor):
            unsorted_indices = _index_tensor(_ints(unsorted_indices), data.device)
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        """The same batch with ``data.to(...)`` (indices follow its device)."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        move = (lambda t: None if t is None else t.to(data.device))
        return type(self)(data, self.batch_sizes, move(self.sorted_indices),
                          move(self.unsorted_indices))

    def cpu(self):
        return self.to("cpu")

    def cuda(self, index: int = 0):
        return self.to(f"cuda:{index}")

    def float(self):
        return self.to(dtype=np.float32)

    def double(self):
        return self.to(dtype=np.float64)

    @property
    def is_cuda(self) -> bool:
        return self.data.is_cuda


def _check_lengths(who, lengths, batch, steps):
    if lengths.shape != (batch,):
        raise ShapeError(f"{who}: got {len(lengths)} lengths for a batch of {batch} sequences; "
                         "give one length per sequence")
    if batch and lengths.min() <= 0:
        raise ArgumentError(f"{who}: every length must be > 0, got {lengths.tolist()}; drop "
                            "the empty sequences first")
    if batch and lengths.max() > steps:
        raise ShapeError(f"{who}: a length of {lengths.max()} exceeds the {steps} time steps "
                         "of the padded input")


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Pack a padded batch (T, B, *) (``batch_first``: (B, T, *)) of sequences of the
    given ``lengths``. With ``enforce_sorted`` the lengths must be non-increasing;
    otherwise the batch is sorted here and ``sorted_indices`` records the order.

    >>> packed = pack_padded_sequence(x, [5, 3, 2])
    """
    if not isinstance(input, Tensor):
        raise ArgumentTypeError(f"pack_padded_sequence: input must be a Tensor, got "
                                f"{type(input).__name__}")
    if input.ndim < 2:
        raise ShapeError(f"pack_padded_sequence: input must be (T, B, *) or (B, T, *), got "
                         f"shape {tuple(input.shape)}")
    lengths = _ints(lengths)
    batch, steps = (input.shape[0], input.shape[1]) if batch_first else input.shape[:2][::-1]
    _check_lengths("pack_padded_sequence", lengths, batch, steps)
    if batch == 0:
        raise ShapeError("pack_padded_sequence: the batch is empty; a PackedSequence holds at "
                         "least one sequence")
    if enforce_sorted:
        if (np.diff(lengths) > 0).any():
            raise ArgumentError(f"pack_padded_sequence: lengths {lengths.tolist()} must be "
                                "sorted in decreasing order when enforce_sorted=True; pass "
                                "enforce_sorted=False to sort them here")
        order, sorted_indices = np.arange(batch), None
    else:
        order = np.argsort(-lengths, kind="stable")
        sorted_indices = _index_tensor(order, input.device)
    sizes = (lengths[order][None, :] > np.arange(lengths.max())[:, None]).sum(axis=1)
    # time step t holds the sequences order[:sizes[t]]: their rows of the flattened input
    t = np.repeat(np.arange(len(sizes)), sizes)
    j = order[np.concatenate([np.arange(b) for b in sizes])]
    flat = j * steps + t if batch_first else t * batch + j
    data = input.reshape((batch * steps,) + tuple(input.shape[2:]))[flat]
    return PackedSequence(data, _index_tensor(sizes, "cpu"), sorted_indices)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """Unpack a :class:`PackedSequence` into ``(padded, lengths)``: padded (T, B, *)
    (``batch_first``: (B, T, *)) in the original batch order, T the longest length or
    ``total_length``; ``lengths`` an int64 Tensor.

    >>> out, lengths = pad_packed_sequence(packed, batch_first=True)
    """
    if not isinstance(sequence, PackedSequence):
        raise ArgumentTypeError(f"pad_packed_sequence: expected a PackedSequence, got "
                                f"{type(sequence).__name__}")
    data = sequence.data
    sizes = _ints(sequence.batch_sizes)
    batch, steps = int(sizes[0]), len(sizes)
    if total_length is not None:
        if total_length < steps:
            raise ArgumentError(f"pad_packed_sequence: total_length={total_length} is shorter "
                                f"than the longest sequence ({steps} steps)")
        steps = int(total_length)
    lengths = (sizes[None, :] > np.arange(batch)[:, None]).sum(axis=1)  # sorted order
    order = (np.arange(batch) if sequence.sorted_indices is None
             else _ints(sequence.sorted_indices))
    # index of each (t, sorted j) in data, or len(data): the padding row
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    tt, jj = np.meshgrid(np.arange(steps), np.arange(batch), indexing="ij")
    pos = np.where(tt < lengths[jj], starts[np.minimum(tt, len(sizes) - 1)] + jj, len(data))
    idx = np.empty_like(pos)
    idx[:, order] = pos  # columns back to the original batch order
    if batch_first:
        idx = idx.T
    rest = tuple(data.shape[1:])
    pad = full((1,) + rest, padding_value, dtype=data.dtype, device=data.device)
    out = ops.concatenate([data, pad])[idx.reshape(-1)].reshape(idx.shape + rest)
    out_lengths = np.empty_like(lengths)
    out_lengths[order] = lengths
    return out, _index_tensor(out_lengths, "cpu")


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack sequences (L_i, *) into (T, B, *) (``batch_first``: (B, T, *)), T the
    longest, padded with ``padding_value`` on the ``padding_side`` ("right" or "left").

    >>> pad_sequence([tg.ones(3, 2), tg.ones(1, 2)]).shape   # (3, 2, 2)
    """
    if isinstance(sequences, Tensor):
        sequences = list(sequences)
    sequences = list(sequences)
    if not sequences:
        raise ArgumentError("pad_sequence: received an empty list of sequences")
    if padding_side not in ("right", "left"):
        raise ArgumentError(f"pad_sequence: padding_side must be 'right' or 'left', got "
                            f"{padding_side!r}")
    rest = tuple(sequences[0].shape[1:])
    for k, s in enumerate(sequences):
        if s.ndim == 0 or tuple(s.shape[1:]) != rest:
            raise ShapeError(f"pad_sequence: sequence {k} has shape {tuple(s.shape)}; every "
                             f"sequence must be (L, *{rest}) (only the first axis may differ)")
    lengths = np.array([s.shape[0] for s in sequences])
    steps = int(lengths.max())
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    t = np.arange(steps)[:, None]
    if padding_side == "left":
        t = t - (steps - lengths)[None, :]
    idx = np.where((t >= 0) & (t < lengths[None, :]), starts[None, :] + t, lengths.sum())
    if batch_first:
        idx = idx.T
    first = sequences[0]
    pad = full((1,) + rest, padding_value, dtype=first.dtype, device=first.device)
    flat = ops.concatenate(sequences + [pad])
    return flat[idx.reshape(-1)].reshape(idx.shape + rest)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences (L_i, *) of a padded batch (inverse of :func:`pad_sequence`).

    >>> a, b = unpad_sequence(pad_sequence([x1, x2]), [len(x1), len(x2)])
    """
    lengths = _ints(lengths)
    x = padded_sequences if batch_first else padded_sequences.swapaxes(0, 1)
    return [x[b, :int(n)] for b, n in enumerate(lengths)]


def pack_sequence(sequences, enforce_sorted=True):
    """Pack a list of sequences (L_i, *): ``pack_padded_sequence(pad_sequence(...))``.

    >>> packed = pack_sequence([x1, x2, x3], enforce_sorted=False)
    """
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths,
                                enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences):
    """The list of sequences of a :class:`PackedSequence`, in the original order.

    >>> x1, x2 = unpack_sequence(pack_sequence([x1, x2]))
    """
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
