"""MatConvNet's simplenn networks: :func:`load_simplenn` reads a ``.mat`` file
that MATLAB saved, :func:`simplenn` is ``vl_simplenn`` (forward, backward and its
options) on tapegrad's tape, and the loaded :class:`SimpleNN` is also a
``tapegrad.nn.Module`` (NCHW input) with Parameters for fine-tuning.

Layout at the boundary
----------------------
:func:`simplenn` takes and returns MatConvNet's arrays: images ``H x W x C x N``
(missing trailing dimensions are 1, as in MATLAB), weights and their
derivatives in MatConvNet's shapes. Inside, they are NCHW views (no copy), so
``res[i].x`` is a transposed view of the array tapegrad computed.
``SimpleNN.forward`` (``net(x)``) takes tapegrad's ``(N, C, H, W)`` Tensors.

Indexing: Python's ``res[i]`` is MATLAB's ``res(i+1)`` and ``net.layers[i]``
is ``net.layers{i+1}``, so ``res[i].x`` is the input of ``net.layers[i]`` and
``res[i + 1].x`` its output. As in vl_simplenn's code, ``res[i].dzdw`` holds the
derivatives of ``net.layers[i]``'s weights (its help text says ``res(i+1)``;
``cnn_train`` reads ``res(i)``) and ``res[i].time`` / ``res[i].backwardTime``
that layer's seconds.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..device import get_device
from ..engine import grad as tape_grad
from ..errors import ArgumentError, DTypeError, ShapeError, describe
from ..nn.container import ModuleList
from ..nn.module import Module
from ..tape import set_grad_enabled
from ..tensor import Tensor, _wrap
from ._matcheck import MAX_BYTES, MAX_DEPTH, MAX_EXTENT, MAX_ITEMS, MatFileError
from ._matfile import MatFileDependencyError, check_unsqueezed, from_scipy, read_mat
from .matconvnet_layers import (
    LRN,
    BNorm,
    Conv,
    ConvT,
    Dropout,
    Layer,
    NOffset,
    Pool,
    ReLU,
    Sigmoid,
    Softmax,
    SpNorm,
    _empty,
    _show,
    from_nchw,
    to_nchw,
)
from .matconvnet_losses import Loss, PDist, SoftmaxLoss

__all__ = ["SimpleNN", "Result", "load_simplenn", "simplenn", "MatFileDependencyError",
           "MatFileError"]


class SimpleNN(Module):
    """A simplenn network: ``layers`` (a ModuleList of :class:`Layer`) and ``meta``
    (the decoded ``net.meta``: ``normalization``, ``classes``, ...).

    >>> net = load_simplenn("imagenet-vgg-f.mat").eval()
    >>> scores = net(x)                       # x: (N, 3, 224, 224) Tensor
    """

    def __init__(self, layers, meta=None):
        super().__init__()
        self.layers = ModuleList(list(layers))
        self.meta = dict(meta or {})

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

    def extra_repr(self):
        return f"{len(self.layers)} layers"


class Result:
    """One entry of vl_simplenn's ``res``: ``x``, ``dzdx``, ``dzdw``, ``aux``,
    ``stats``, ``time``, ``backwardTime`` (MatConvNet's names; None where MATLAB
    holds ``[]``)."""

    __slots__ = ("x", "dzdx", "dzdw", "aux", "stats", "time", "backwardTime")

    def __init__(self):
        self.x = self.dzdx = self.dzdw = self.aux = self.stats = None
        self.time = self.backwardTime = 0.0

    def __repr__(self):
        def show(v):
            if v is None:
                return "[]"
            if isinstance(v, list):
                return "{" + ", ".join(show(a) for a in v) + "}"
            return "x".join(map(str, np.shape(v))) or "scalar"

        return (f"Result(x={show(self.x)}, dzdx={show(self.dzdx)}, dzdw={show(self.dzdw)}, "
                f"aux={show(self.aux)})")


# ------------------------------------------------------------------ loading

LAYER_TYPES = {cls.type: cls for cls in (Conv, ConvT, Pool, ReLU, Sigmoid, LRN, SpNorm, NOffset,
                                         Softmax, Dropout, BNorm, SoftmaxLoss, Loss, PDist)}
LAYER_TYPES["normalize"] = LRN


def build_layer(d: dict, index: int, *, source="the dict", max_extent: int = MAX_EXTENT
                ) -> Layer:
    """One decoded ``net.layers{i}`` struct -> its Layer (vl_simplenn_tidy's defaults
    for missing fields; the old ``filters``/``biases`` fields are read too). Every
    field is checked here (type, range, finiteness, integers, ``max_extent``), so
    a malformed file fails at load, with a :class:`MatFileError` naming ``source``,
    the layer and the field."""
    def bad(why):
        return MatFileError(f"load_simplenn: {source}: net.layers{{{index + 1}}} {why}")

    if not isinstance(d, dict) or "type" not in d:
        raise bad(f"is not a struct with a 'type' field (got {type(d).__name__})")
    kind, name = d["type"], d.get("name")
    name = f"layer{index + 1}" if _empty(name) or name == "" else name
    if not isinstance(kind, str) or not isinstance(name, str):
        raise bad(f"'type' and 'name' must be strings, got {_show(kind)} and {_show(name)}")
    where = f"({name!r}, type {kind!r})"
    if kind not in LAYER_TYPES:
        raise bad(f"{where}: unsupported layer type; tapegrad reads {sorted(LAYER_TYPES)} "
                  "('custom' layers hold MATLAB function handles, which cannot be loaded)")
    try:
        layer = _make_layer(d, kind, name)
    except KeyError as e:  # a required field (spnorm's and noffset's param) is absent
        raise bad(f"{where}: missing field {e}") from e
    except (ArgumentError, ShapeError, DTypeError) as e:
        raise bad(f"{where}: {e}") from e
    for field, value in layer.extents().items():
        if value > max_extent:
            raise bad(f"{where}: field {field} is {value}, more than max_extent={max_extent} "
                      "(the forward pass would allocate or loop in proportion); if you trust "
                      "the file, pass a larger load_simplenn(..., max_extent=...)")
    return layer


def _make_layer(d, kind, name):
    common = {"name": name, "precious": d.get("precious", False)}
    weights = d.get("weights")
    if _empty(weights) and "filters" in d:  # MatConvNet before beta16
        weights = [d["filters"], d.get("biases")]
    weights = [] if _empty(weights) else weights if isinstance(weights, list) else [weights]

    def field(key, default):
        v = d.get(key, default)
        return default if (_empty(v) and not _empty(default)) else v

    if kind in ("conv", "convt", "bnorm") and not weights:
        raise ArgumentError("has no weights")
    if kind == "conv":
        return Conv(weights[0], weights[1] if len(weights) > 1 else None,
                    pad=field("pad", 0), stride=field("stride", 1),
                    dilate=field("dilate", 1), **common)
    if kind == "convt":
        return ConvT(weights[0], weights[1] if len(weights) > 1 else None,
                     upsample=field("upsample", 1), crop=field("crop", 0),
                     numGroups=field("numGroups", 1), **common)
    if kind == "bnorm":
        if len(weights) < 2:
            raise ArgumentError("bnorm needs multipliers and biases")
        return BNorm(weights[0], weights[1], weights[2] if len(weights) > 2 else None,
                     epsilon=field("epsilon", 1e-5), **common)
    if kind == "pool":
        if _empty(d.get("pool")):
            raise ArgumentError("missing field 'pool' (the pooling window)")
        return Pool(d["pool"], method=field("method", "max"),
                    stride=field("stride", 1), pad=field("pad", 0), **common)
    if kind == "relu":
        return ReLU(field("leak", 0.0), **common)
    if kind == "dropout":
        return Dropout(field("rate", 0.5), **common)
    if kind in ("lrn", "normalize"):
        return LRN(field("param", (5, 1, 0.0001 / 5, 0.75)), **common)
    if kind in ("spnorm", "noffset"):
        return LAYER_TYPES[kind](d["param"], **common)
    if kind in ("softmaxloss", "loss"):
        return LAYER_TYPES[kind](d.get("class"), **common)
    if kind == "pdist":
        return PDist(d.get("class"), p=field("p", 2), noRoot=field("noRoot", False),
                     epsilon=field("epsilon", 1e-3), aggregate=field("aggregate", False),
                     instanceWeights=d.get("instanceWeights"), **common)
    return LAYER_TYPES[kind](**common)


def load_simplenn(source, *, max_bytes: int = MAX_BYTES, max_items: int = MAX_ITEMS,
                  max_depth: int = MAX_DEPTH, max_extent: int = MAX_EXTENT) -> SimpleNN:
    """A simplenn network from a MATLAB ``.mat`` file (v5 through scipy, v7.3 through
    h5py), saved either as its fields (``save(f, '-struct', 'net')``: the
    pretrained models) or as a variable ``net`` (``cnn_train``'s checkpoints).
    ``source`` may also be the dict ``scipy.io.loadmat(path)`` returned.

    ``.mat`` files come from strangers, so the file is read defensively: no other
    file is opened (HDF5 external links, external storage and virtual datasets
    are refused), every size it declares is checked before it is allocated, and
    every layer field is checked; any truncated, corrupt, hostile or malformed
    file raises :class:`MatFileError` (a SerializationError) naming the file, the
    field and what is wrong. The limits, module defaults in
    :mod:`tapegrad.compat._matcheck`, can be raised for a file you trust:

    - ``max_bytes`` (1 GiB): the bytes of the arrays the file declares, in total,
      and separately the bytes its compressed v5 data may inflate to;
    - ``max_items`` (1,000,000): cell and struct elements, char rows, HDF5 objects;
    - ``max_depth`` (100): nesting of cells and structs;
    - ``max_extent`` (1024): the largest pad, stride, dilation, upsampling,
      crop, pooling or LRN/spnorm window of a layer.

    >>> net = load_simplenn("data/mnist-baseline/net-epoch-20.mat")
    >>> [layer.type for layer in net.layers][:3]          # ['conv', 'pool', 'conv']
    """
    wanted = ("layers", "net", "meta", "classes", "normalization")
    if isinstance(source, Mapping):
        top = {k: v for k, v in source.items() if not str(k).startswith("__")}
        key = "layers" if "layers" in top else "net" if "net" in top else None
        if key is not None:
            check_unsqueezed(top, key)
        where = "the dict"
        try:
            top = {k: from_scipy(v) for k, v in top.items() if k in wanted}
        except RecursionError as e:
            raise MatFileError(f"load_simplenn: {where} is nested too deeply") from e
    else:
        where = os.fspath(source)
        top = read_mat(source, max_bytes=max_bytes, max_items=max_items, max_depth=max_depth,
                       names=wanted)
    net = top if "layers" in top else top.get("net")
    if not isinstance(net, dict) or "layers" not in net:
        raise MatFileError(f"load_simplenn: {where} holds no simplenn network: no 'layers' "
                           f"variable and no 'net' struct with 'layers' (of {list(wanted)} it "
                           f"holds {sorted(top)})")
    layers = net["layers"]
    if isinstance(layers, dict):
        layers = [layers]
    if not isinstance(layers, list):
        raise MatFileError(f"load_simplenn: {where}: net.layers must be a cell of structs, "
                           f"got {_show(layers)}")
    meta = dict(net["meta"]) if isinstance(net.get("meta"), dict) else {}
    for old in ("classes", "normalization"):  # MatConvNet before beta16 (vl_simplenn_tidy)
        if old in net and old not in meta:
            meta[old] = net[old]
    return SimpleNN([build_layer(d, i, source=where, max_extent=max_extent)
                     for i, d in enumerate(layers)], meta)


# ---------------------------------------------------------------- evaluating


def _as_nchw(xp, a, what):
    a = xp.asarray(a.array if isinstance(a, Tensor) else a)
    if a.dtype.kind != "f":
        raise DTypeError(f"simplenn: {what} must be single or double (floating), got "
                         f"{describe(a)}")
    return to_nchw(a)


def _check_dtype(params, x):
    for p in params[:1]:
        if p.dtype != x.dtype:
            raise DTypeError(f"simplenn: x is {x.dtype} but the network's weights are "
                             f"{p.dtype}; convert x (x.astype(np.{p.dtype})) or the network "
                             f"(net.to(dtype=np.{x.dtype}))")


def _forgets_input(net, i, needs_bprop, conserve):
    """vl_simplenn's forward rule: may ``res(i).x`` (the input of layer i) go once
    layer i has run? Never the network's input (its help text keeps ``res(1)``) nor
    a loss layer's or a precious layer's output."""
    if not conserve or needs_bprop or i == 0:
        return False
    prev = net.layers[i - 1]
    return prev.type not in ("loss", "softmaxloss") and not prev.precious


def _grad_seed(dzdy, y, xp):
    """dzdy in MatConvNet's layout -> an array of y's NCHW shape."""
    g = xp.asarray(dzdy.array if isinstance(dzdy, Tensor) else dzdy)
    if g.dtype.kind != "f":
        g = g.astype(y.dtype)
    if y.ndim == 0:
        if g.size != 1:
            raise ShapeError(f"simplenn: the network's output is a scalar but dzdy is "
                             f"{describe(g)}")
        return g.reshape(()).astype(y.dtype, copy=False)
    g = to_nchw(g)
    if g.shape != y.shape:
        raise ShapeError(f"simplenn: dzdy is {tuple(from_nchw(g).shape)} (H x W x C x N) but "
                         f"the network's output is {tuple(from_nchw(y).shape)}")
    return g.astype(y.dtype, copy=False)


def _add(old, new):
    if old is None:
        return new
    if new is None:
        return old
    return old + new


def simplenn(net: SimpleNN, x, dzdy=None, *, mode: str = "normal",
             conserve_memory: bool = False, back_prop_depth: float = math.inf,
             skip_forward: bool = False, accumulate: bool = False,
             res: list[Result] | None = None) -> list[Result]:
    """MatConvNet's ``res = vl_simplenn(net, x, dzdy, res, ...)`` on tapegrad's tape.

    ``x``: ``H x W x C x N`` (MatConvNet's layout). With ``dzdy`` (the derivative
    of the output, e.g. ``1`` for a loss) the backward pass fills ``res[i].dzdx``
    (= d output / d ``res[i].x``) and ``res[i].dzdw`` (layer i's weights, MatConvNet
    shapes; bnorm's third entry is the batch's moments times N, as vl_simplenn).

    * ``mode="test"``: dropout bypassed, bnorm normalised by its moments (and
      differentiated as such).
    * ``conserve_memory``: empties ``res[i].x`` / ``dzdx`` as vl_simplenn does
      (keeping the input, the output, the loss outputs, ``precious`` layers'
      outputs, and ``res[0].dzdx``).
    * ``back_prop_depth=k``: only the last k layers back-propagate; earlier
      entries get no dzdx/dzdw (and their forward records nothing).
    * ``skip_forward``: reuse ``res[i].x`` and the dropout masks ``res[i+1].aux``
      of ``res`` (a ReLU whose input was freed uses its output, as vl_simplenn).
    * ``accumulate``: add the new dzdw to those in ``res``.

    >>> net.layers[-1].class_ = labels                      # 1-based
    >>> res = simplenn(net, images, 1.0)                    # images: 28 x 28 x 1 x N
    >>> res[-1].x, res[0].dzdw[0].shape                     # the loss; (5, 5, 1, 20)
    """
    if mode not in ("normal", "test"):
        raise ArgumentError(f"simplenn: unknown mode {mode!r} (expected 'normal' or 'test')")
    if not back_prop_depth > 0:
        raise ArgumentError(f"simplenn: back_prop_depth must be > 0, got {back_prop_depth!r}")
    test = mode == "test"
    doder = dzdy is not None
    layers = list(net.layers)
    n = len(layers)
    for i, layer in enumerate(layers):
        if not isinstance(layer, Layer):
            raise ArgumentError(f"simplenn: net.layers[{i}] is a {type(layer).__name__}, not a "
                                f"simplenn layer ({sorted(LAYER_TYPES)})")
    lim = n - back_prop_depth if back_prop_depth < n else 0  # layers[lim:] back-propagate
    lim = max(int(lim), 0)
    if skip_forward and not doder:
        raise ArgumentError("simplenn: skip_forward is valid only with dzdy (a backward pass)")
    if not res:
        if skip_forward:
            raise ArgumentError("simplenn: skip_forward needs the res of an earlier call")
        res = [Result() for _ in range(n + 1)]
    elif len(res) != n + 1:
        raise ArgumentError(f"simplenn: res has {len(res)} entries but the network has {n} "
                            f"layers (needs {n + 1})")
    params = list(net.parameters())
    device = params[0].device if params else get_device("cpu")
    xp = device.xp

    leaves: list[Any] = [None] * n  # layer i's input leaf and output, kept for its backward
    outs: list[Any] = [None] * n
    if not skip_forward:
        a = _as_nchw(xp, x, "x")
        _check_dtype(params, a)
        res[0].x = from_nchw(a)
        for i, layer in enumerate(layers):
            t0 = time.perf_counter()
            needs = doder and i >= lim
            leaf = _wrap(a, device, None, 0, needs)
            with set_grad_enabled(needs):
                y, aux = layer.run(leaf, test, None)
            res[i + 1].x = from_nchw(y.array)
            res[i + 1].aux = None if aux is None else from_nchw(aux)
            if needs:
                leaves[i], outs[i] = leaf, y
            if _forgets_input(net, i, needs, conserve_memory):
                res[i].x = None
            res[i].time = time.perf_counter() - t0
            a = y.array
    if not doder:
        return res

    top = res[n].x
    if top is None:
        raise ArgumentError("simplenn: res[-1].x (the network's output) is empty")
    g = _grad_seed(dzdy, to_nchw(xp.asarray(top)) if np.ndim(top) else xp.asarray(top), xp)
    res[n].dzdx = dzdy
    i = n
    for i in range(n - 1, lim - 1, -1):
        layer = layers[i]
        t0 = time.perf_counter()
        leaf, y = leaves[i], outs[i]
        if skip_forward:
            leaf, y = _rerun(layer, res, i, test, device)
        wanted = [p for p in layer.params() if p.requires_grad]
        if y is leaf:  # an identity (test-mode dropout)
            gx, gws = g, []
        elif not y.requires_grad:  # an output that depends on nothing differentiable
            gx, gws = xp.zeros(leaf.shape, leaf.dtype), [None] * len(wanted)
        else:
            found = tape_grad(y, [leaf] + wanted, grad_outputs=_wrap(g, device, None, 0, False),
                              allow_unused=True)
            gx = found[0].array if found[0] is not None else xp.zeros(leaf.shape, leaf.dtype)
            gws = [None if t is None else t.array for t in found[1:]]
        res[i].dzdx = from_nchw(gx)
        if layer.params():
            it = iter(gws)
            full = [next(it) if p.requires_grad else None for p in layer.params()]
            dzdw = layer.weight_grads(full, leaf.array)
            if accumulate and res[i].dzdw:
                dzdw = [_add(o, w) for o, w in zip(res[i].dzdw, dzdw)]
            res[i].dzdw = dzdw
        if conserve_memory and not layer.precious and i != n - 1:
            res[i + 1].dzdx = res[i + 1].x = None
        leaves[i] = outs[i] = None  # this layer's graph is gone; let its arrays go too
        res[i].backwardTime = time.perf_counter() - t0
        g = gx
    if i > 0 and i == lim and conserve_memory and not layers[i].precious:
        res[i].dzdx = res[i].x = None
    return res


def _rerun(layer, res, i, test, device):
    """skip_forward: layer i's forward recorded again from ``res[i].x`` (or, for a
    ReLU whose input was freed, from its output: the same mask), with the dropout
    mask in ``res[i+1].aux``; the stored outputs are left as they are."""
    xp = device.xp
    src = res[i].x
    if src is None and layer.type == "relu" and res[i + 1].x is not None:
        src = res[i + 1].x
    if src is None:
        raise ArgumentError(f"simplenn: skip_forward needs res[{i}].x, the input of layer {i} "
                            f"({layer.name!r}, {layer.type}), but it is empty (freed by "
                            "conserve_memory); run the earlier call without conserve_memory")
    aux = res[i + 1].aux
    if layer.type == "dropout" and not test and aux is None:
        raise ArgumentError(f"simplenn: skip_forward needs res[{i + 1}].aux, the mask of "
                            f"dropout layer {i} ({layer.name!r}), but it is empty")
    leaf = _wrap(_as_nchw(xp, src, f"res[{i}].x"), device, None, 0, True)
    with set_grad_enabled(True):
        y, _ = layer.run(leaf, test, None if aux is None else to_nchw(xp.asarray(aux)))
    return leaf, y

