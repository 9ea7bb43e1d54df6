"""Batch, layer, group and local response normalisation layers."""

from __future__ import annotations

import numbers

import numpy as np

from .. import ops
from ..creation import ones, zeros
from ..errors import ArgumentError, ShapeError
from ..ops.normalization import _normalized_shape
from ..utils.checkpoint import is_recomputing
from . import init
from ._util import new_param
from .module import Module

__all__ = ["BatchNorm1d", "BatchNorm2d", "LayerNorm", "GroupNorm", "LocalResponseNorm"]


class _BatchNorm(Module):
    _ndims: tuple = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        dev = device or "cpu"
        if affine:
            self.weight = new_param((num_features,), device, dtype)
            self.bias = new_param((num_features,), device, dtype)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=dev))
            self.register_buffer("running_var", ones(num_features, dtype=dtype, device=dev))
            self.register_buffer("num_batches_tracked", zeros((), dtype=np.int64, device=dev))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self):
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            init.zeros_(self.num_batches_tracked)

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def forward(self, x):
        if x.ndim not in self._ndims:
            want = " or ".join(f"{n}-D" for n in self._ndims)
            raise ShapeError(f"{type(self).__name__}: expected {want} input, got shape "
                             f"{tuple(x.shape)}")
        if x.shape[1] != self.num_features:
            raise ShapeError(f"{type(self).__name__}({self.num_features}): input shape "
                             f"{tuple(x.shape)} has {x.shape[1]} channels on axis 1")
        momentum = 0.0 if self.momentum is None else self.momentum
        # a checkpoint's recomputation in backward sees the same batch again: no second update
        track = self.track_running_stats and not is_recomputing()
        if self.training and track:
            self.num_batches_tracked.array[...] += 1
            self.num_batches_tracked._bump_version()
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / int(self.num_batches_tracked.array)
        use_batch = self.training or not self.track_running_stats
        stats = track or not self.training  # eval mode reads the running statistics
        return ops.batch_norm(x, self.running_mean if stats else None,
                              self.running_var if stats else None,
                              self.weight, self.bias, use_batch, momentum, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch norm over (N, C) or (N, C, L) input; statistics per channel C.

    ``running_mean``, ``running_var`` and ``num_batches_tracked`` are buffers
    (saved in ``state_dict``); eval mode normalises with them.

    >>> nn.BatchNorm1d(128)(tapegrad.randn(32, 128))
    """

    _ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch norm over (N, C, H, W) input (Caffe's BatchNorm + Scale).

    >>> nn.BatchNorm2d(32)(tapegrad.randn(8, 32, 16, 16))
    """

    _ndims = (4,)


class LocalResponseNorm(Module):
    """AlexNet's cross-channel normalisation:
    ``x / (k + alpha/size * sum_{window} x**2) ** beta`` (Caffe's and PyTorch's);
    ``alpha_over_size=False`` is MatConvNet's ``vl_nnnormalize`` (alpha not
    divided by the window size).

    >>> nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=2.0)   # AlexNet's
    """

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0,
                 alpha_over_size: bool = True):
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k
        self.alpha_over_size = alpha_over_size

    def forward(self, x):
        return ops.local_response_norm(x, self.size, self.alpha, self.beta, self.k,
                                       self.alpha_over_size)

    def extra_repr(self):
        s = f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
        return s if self.alpha_over_size else s + ", alpha_over_size=False"


def _reset_affine(layer):
    """PyTorch's init of a norm's affine part: weight ones, bias zeros."""
    if layer.weight is not None:
        init.ones_(layer.weight)
    if layer.bias is not None:
        init.zeros_(layer.bias)


def _affine(layer, shape, affine, bias, device, dtype):
    """Register ``weight`` and ``bias`` of ``shape`` (None where off) and initialise them."""
    if affine:
        layer.weight = new_param(shape, device, dtype)
    else:
        layer.register_parameter("weight", None)
    if affine and bias:
        layer.bias = new_param(shape, device, dtype)
    else:
        layer.register_parameter("bias", None)
    layer.reset_parameters()


class LayerNorm(Module):
    """Layer norm over the trailing ``normalized_shape`` axes, as ``torch.nn.LayerNorm``:
    ``weight`` (ones) and ``bias`` (zeros) of shape ``normalized_shape`` with
    ``elementwise_affine`` (``bias=False`` drops the bias alone).

    >>> nn.LayerNorm(768)(tapegrad.randn(4, 16, 768))
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _normalized_shape("LayerNorm", normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _affine(self, self.normalized_shape, elementwise_affine, bias, device, dtype)

    def reset_parameters(self):
        _reset_affine(self)

    def forward(self, x):
        return ops.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class GroupNorm(Module):
    """Group norm of ``(N, C, *)`` input, as ``torch.nn.GroupNorm``: ``num_channels``
    in ``num_groups`` groups; with ``affine``, a per-channel ``weight`` (ones) and
    ``bias`` (zeros; ``bias=False`` drops it).

    >>> nn.GroupNorm(8, 32)(tapegrad.randn(2, 32, 16, 16))
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device=None, dtype=None, *, bias: bool = True):
        super().__init__()
        for name, v in (("num_groups", num_groups), ("num_channels", num_channels)):
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ArgumentError(f"GroupNorm: {name} must be a positive int, got {v!r}")
        if num_channels % num_groups:
            raise ArgumentError(f"GroupNorm: num_channels={num_channels} must be divisible by "
                                f"num_groups={num_groups}")
        self.num_groups = int(num_groups)
        self.num_channels = int(num_channels)
        self.eps = eps
        self.affine = affine
        _affine(self, (self.num_channels,), affine, bias, device, dtype)

    def reset_parameters(self):
        _reset_affine(self)

    def forward(self, x):
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ShapeError(f"GroupNorm({self.num_groups}, {self.num_channels}): expected input "
                             f"of shape (N, {self.num_channels}, *), got {tuple(x.shape)}")
        return ops.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")
