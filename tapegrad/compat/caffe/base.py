"""What every Caffe layer shares: the :class:`Layer` base (an ``nn.Module`` with
Caffe's blobs as Parameters), the registry of layer types, the named errors, the
fillers Caffe initialises blobs with, and Caffe's axis rules.

A layer is built from its ``LayerParameter`` (parsed into plain attributes, no
protobuf object is kept), then :meth:`Layer.setup` runs once with its first bottoms,
as Caffe's ``Layer::SetUp``: it knows the blob shapes (``blob_shapes``) and creates
the Parameters, from the weights read from a caffemodel (checked with Caffe's
``ShapeEquals``) or from the layer's fillers. ``forward(*bottoms)`` returns the tops
as a tuple of Tensors, computed with tapegrad's ops, so the tape does the backward.
"""

from __future__ import annotations

import math

import numpy as np

from ...device import get_array_module
from ...errors import ArgumentError
from ...nn.module import Module
from ...nn.parameter import Parameter
from .files import CaffeFileError, legacy_shape_equal

__all__ = ["Layer", "CaffeLayerError", "UnsupportedLayerError", "LAYERS", "register",
           "canonical_axis", "count", "fill"]

LAYERS: dict[str, type] = {}
"""Caffe layer type -> the class that runs it."""


class CaffeLayerError(ArgumentError):
    """A layer of a Caffe net cannot be built or run as Caffe would: a parameter out of
    range, bottoms of the wrong shape, or a case tapegrad refuses rather than run
    differently. The message names the layer (name and type), the shapes, and what
    to do."""


class UnsupportedLayerError(CaffeLayerError):
    """A layer type tapegrad does not run (``Python`` layers are always refused:
    they would execute code named by the file)."""


def register(cls):
    for t in (cls.type, *cls.aliases):
        LAYERS[t] = cls
    return cls


def count(shape, start=0, end=None) -> int:
    """Caffe's ``Blob::count(start, end)``: the product of ``shape[start:end]``."""
    return math.prod(shape[start:end])


def canonical_axis(layer, axis: int, ndim: int, what: str = "axis") -> int:
    """Caffe's ``CanonicalAxisIndex``: ``-ndim <= axis < ndim``; negatives count
    from the end."""
    if not -ndim <= axis < ndim:
        raise layer.error(f"{what} {axis} is out of range for a {ndim}-axis bottom")
    return axis + ndim if axis < 0 else axis


# ------------------------------------------------------------------------ fillers


def fill(filler, shape, rng=None) -> np.ndarray:
    """A float32 array of ``shape`` filled as Caffe's ``GetFiller(filler)`` does
    (constant, uniform, gaussian, positive_unitball, xavier, msra, bilinear).
    ``filler`` is a FillerParameter or None (Caffe's default: constant 0).
    fan_in is ``count / shape[0]``, fan_out ``count / shape[1]`` (Caffe's rule)."""
    rng = np.random.default_rng() if rng is None else rng
    shape = tuple(int(s) for s in shape)
    if filler is None:
        return np.zeros(shape, np.float32)
    kind, n = filler.type, math.prod(shape)
    fan_in = n / shape[0] if shape and shape[0] else 1
    fan_out = n / shape[1] if len(shape) > 1 and shape[1] else 1
    norm = {0: fan_in, 1: fan_out, 2: (fan_in + fan_out) / 2}[filler.variance_norm]
    if kind == "constant":
        out = np.full(shape, filler.value)
    elif kind == "uniform":
        out = rng.uniform(filler.min, filler.max, shape)
    elif kind == "gaussian":
        out = rng.normal(filler.mean, filler.std, shape)
        if filler.sparse >= 0:  # keep each weight with probability sparse / num_outputs
            p = filler.sparse / shape[1] if len(shape) > 1 else 1.0
            out *= rng.random(shape) < p
    elif kind == "positive_unitball":
        out = rng.uniform(0, 1, shape)
        out /= out.reshape(shape[0], -1).sum(1).reshape((-1,) + (1,) * (len(shape) - 1))
    elif kind == "xavier":
        scale = math.sqrt(3 / norm)
        out = rng.uniform(-scale, scale, shape)
    elif kind == "msra":
        out = rng.normal(0, math.sqrt(2 / norm), shape)
    elif kind == "bilinear":
        if len(shape) != 4 or shape[2] != shape[3]:
            raise ArgumentError(f"the bilinear filler needs a square 4-D blob, got {shape}")
        k = shape[3]
        f = math.ceil(k / 2)
        c = (2 * f - 1 - f % 2) / (2 * f)
        t = 1 - np.abs(np.arange(k) / f - c)
        out = np.broadcast_to(t[:, None] * t[None, :], shape)
    else:
        raise ArgumentError(f"unknown filler type {kind!r}; Caffe's are constant, uniform, "
                            "gaussian, positive_unitball, xavier, msra, bilinear")
    return np.asarray(out, np.float32)


# ---------------------------------------------------------------------- the layer


class Layer(Module):
    """One Caffe layer. Subclasses set ``type``, ``bottoms`` and ``tops`` (the
    (min, max) numbers Caffe allows, max None for any), ``blob_names`` (the
    Parameters in Caffe's blob order), ``is_loss`` (LossLayer: ``loss_weight`` 1 on
    the first top by default), and define ``parse``, ``blob_shapes`` and ``forward``.
    """

    type = ""
    aliases: tuple = ()
    bottoms: tuple = (1, 1)
    tops: tuple = (1, 1)
    blob_names: tuple = ()
    is_loss = False
    differentiable = True  # False: no backward in Caffe (Accuracy, ArgMax)
    in_place = True  # may its top be its bottom

    def __init__(self, lp, phase: str):
        super().__init__()
        self.name = lp.name
        self.phase = phase
        self.n_bottom, self.n_top = len(lp.bottom), len(lp.top)
        self.n_blobs = 0
        self.__dict__["_pending"] = None
        self.__dict__["_fillers"] = {}
        self._check_counts(lp)
        self.parse(lp)

    def _check_counts(self, lp):
        for what, n, (lo, hi) in (("bottom", len(lp.bottom), self.bottoms),
                                  ("top", len(lp.top), self.tops)):
            if n < lo or (hi is not None and n > hi):
                want = f"{lo}" if lo == hi else f"{lo} to {hi}" if hi else f"at least {lo}"
                raise self.error(f"takes {want} {what} blob(s), got {n}")
        if not self.in_place:
            for b, t in zip(lp.bottom, lp.top):
                if b == t:
                    raise self.error(f"cannot run in place (top {t!r} is its bottom); give "
                                     "the top another name")

    def error(self, why: str, cls=CaffeLayerError):
        return cls(f"Caffe layer {self.name!r} (type {self.type}): {why}")

    # -- what subclasses define
    def parse(self, lp) -> None:
        """Read the layer's own ``*_param`` into attributes."""

    def blob_shapes(self, bottoms) -> list[tuple]:
        """The shapes of the layer's blobs, given its first bottoms (raw arrays)."""
        return []

    def filler(self, i):
        return self._fillers.get(i)

    # -- set-up, as Caffe's Layer::SetUp
    @property
    def is_setup(self) -> bool:
        return bool(self.__dict__.get("_ready"))

    def give_blobs(self, blobs, source: str) -> None:
        """Blobs read from a caffemodel (:class:`BlobData`), checked at set-up."""
        if len(blobs) != len(self.blob_names):
            raise CaffeFileError(
                f"{source}: layer {self.name!r} (type {self.type}) holds {len(blobs)} blobs, "
                f"but this layer has {len(self.blob_names)} "
                f"({', '.join(self.blob_names) or 'none'}); Caffe refuses this too "
                "(Net::CopyTrainedLayersFrom): check that the prototxt matches the weights")
        self.__dict__["_pending"] = (list(blobs), source)
        if self.is_setup:
            self._take_pending()

    def setup(self, bottoms, rng=None) -> None:
        """Create (or check) the blobs for these first bottoms (Caffe's SetUp).
        Blobs shared from another layer (``param { name }``) are already set."""
        shapes = [tuple(int(d) for d in s) for s in self.blob_shapes(bottoms)]
        for i, (name, shape) in enumerate(zip(self.blob_names, shapes)):
            p = self._parameters.get(name)
            if p is None:
                init = np.zeros(shape, np.float32) if self._pending else \
                    fill(self.filler(i), shape, rng)
                setattr(self, name, Parameter(init))
            elif tuple(p.shape) != shape:
                raise self.error(f"blob {i} ({name}) has shape {tuple(p.shape)} but bottoms "
                                 f"of shapes {[tuple(b.shape) for b in bottoms]} need "
                                 f"{shape} (a shared param {{ name }} of another shape?)")
        self.__dict__["_shapes"] = shapes
        self.__dict__["_ready"] = True
        self.n_blobs = len(shapes)
        self._take_pending()

    def _take_pending(self):
        pending = self._pending
        if pending is None:
            return
        blobs, source = pending
        shapes = self.__dict__.get("_shapes")
        for i, (name, blob) in enumerate(zip(self.blob_names, blobs)):
            p = getattr(self, name)
            shape = tuple(p.shape) if shapes is None else shapes[i]
            if not legacy_shape_equal(blob, shape):
                raise CaffeFileError(
                    f"{source}: cannot copy blob {i} ({name}) of layer {self.name!r} (type "
                    f"{self.type}): the file holds shape {tuple(blob.array.shape)}"
                    f"{' (legacy num/channels/height/width)' if blob.legacy else ''} but the "
                    f"net needs {shape}; check that the prototxt matches the weights")
            xp = get_array_module(p.array)
            p.array[...] = xp.asarray(blob.array.reshape(shape), dtype=p.array.dtype)
        self.__dict__["_pending"] = None

    def blobs(self) -> list:
        """The layer's Parameters in Caffe's blob order."""
        return [self._parameters[n] for n in self.blob_names if n in self._parameters]

    def allow_force_backward(self, bottom: int) -> bool:
        return True

    def extra_repr(self):
        return f"{self.name!r}"
