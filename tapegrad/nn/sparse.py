"""Embedding tables (PyTorch's ``nn.Embedding``)."""

from __future__ import annotations

from .. import ops
from ..errors import ArgumentError
from . import init
from ._util import new_param
from .module import Module
from .parameter import Parameter

__all__ = ["Embedding"]


class Embedding(Module):
    """A table of ``num_embeddings`` vectors of size ``embedding_dim``, looked up
    by integer index (:func:`tapegrad.ops.embedding`). The weight starts as
    N(0, 1) with the ``padding_idx`` row zero, as in PyTorch.

    >>> emb = nn.Embedding(1000, 64, padding_idx=0)
    >>> vectors = emb(tapegrad.tensor([[1, 5, 0]]))        # (1, 3) -> (1, 3, 64)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None,
                 max_norm=None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight=None, _freeze: bool = False, device=None,
                 dtype=None):
        super().__init__()
        if max_norm is not None or sparse:
            raise ArgumentError("Embedding: max_norm and sparse=True are not supported")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ArgumentError(f"Embedding: padding_idx must be in [-{num_embeddings}, "
                                    f"{num_embeddings}), got {padding_idx}")
            padding_idx %= num_embeddings
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = padding_idx
        self.scale_grad_by_freq = scale_grad_by_freq
        if _weight is None:
            self.weight = new_param((num_embeddings, embedding_dim), device, dtype)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ArgumentError(f"Embedding: _weight has shape {tuple(_weight.shape)}, "
                                    f"expected {(num_embeddings, embedding_dim)}")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight.array[self.padding_idx] = 0
            self.weight._bump_version()

    def forward(self, input):
        return ops.embedding(input, self.weight, self.padding_idx,
                             scale_grad_by_freq=self.scale_grad_by_freq)

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx=None,
                        max_norm=None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False):
        """A table holding ``embeddings`` (V, D), frozen unless ``freeze=False``."""
        if embeddings.ndim != 2:
            raise ArgumentError(f"Embedding.from_pretrained: embeddings must be 2-D, got "
                                f"shape {tuple(embeddings.shape)}")
        v, d = embeddings.shape
        return cls(v, d, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.scale_grad_by_freq:
            s += ", scale_grad_by_freq=True"
        return s
