"""pycaffe's ``caffe.Net`` on tapegrad: ``net.blobs[name].data`` / ``.diff`` and
``net.params[layer][i].data`` / ``.diff`` are NumPy arrays (writable, as in
pycaffe), ``net.forward(**inputs)`` returns the output blobs, ``net.backward()``
fills the diffs Caffe's ``Net::Backward`` fills and no others. It runs on the CPU.

Backward follows Caffe's flags (:mod:`.graph`): a blob's diff is written only where
``bottom_need_backward`` holds (so the data blob of a net without
``force_backward`` keeps its diff, the first convolution computes no data
gradient), a parameter's only where its layer needs backward and its ``lr_mult``
is not 0 (or ``force_backward``); the loss tops' diffs start at their
``loss_weight`` and seed the backward, as do the diffs you write into the other
output blobs of layers that need backward. As in Caffe, parameter diffs
accumulate across ``backward()`` calls (``clear_param_diffs()`` zeroes them, as a
solver does each iteration) while blob diffs are overwritten. The gradients come
from tapegrad's tape: ``backward()`` is one ``tapegrad.grad`` call seeded with the
loss weights.
"""

from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np

from ...device import to_host
from ...engine import grad as tape_grad
from ...tape import set_grad_enabled
from ...tensor import tensor as make_tensor
from .base import CaffeLayerError
from .data import DummyData
from .files import MAX_BYTES, read_net
from .model import CaffeModel

__all__ = ["Net", "Blob", "ParamBlob", "load", "TRAIN", "TEST"]

TRAIN, TEST = 0, 1
"""pycaffe's ``caffe.TRAIN`` and ``caffe.TEST``."""


def load(prototxt, caffemodel=None, phase="test", *, level: int = 0, stages=(),
         max_bytes: int = MAX_BYTES, strict: bool = False, rng=None) -> CaffeModel:
    """A Caffe net as a trainable ``nn.Module`` (:class:`CaffeModel`): ``prototxt``
    (a path, a text file object or a ``NetParameter``), weights from ``caffemodel``
    (matched by layer name; see :meth:`CaffeModel.copy_from`), ``phase`` ``"test"``
    or ``"train"``. Files over ``max_bytes`` are refused (raise it for a file you
    trust).

    >>> model = caffe.load("lenet.prototxt", "lenet.caffemodel")
    >>> scores = model(tapegrad.randn(1, 1, 28, 28))
    >>> tapegrad.onnx.export(model, tapegrad.randn(1, 1, 28, 28), "lenet.onnx")
    """
    model = CaffeModel(read_net(prototxt, max_bytes=max_bytes), phase, level, stages, rng)
    if caffemodel is not None:
        model.copy_from(caffemodel, max_bytes=max_bytes, strict=strict)
    return model


class Blob:
    """A Caffe blob: ``data`` and ``diff`` NumPy arrays of one shape."""

    def __init__(self, shape=()):
        self.data = np.zeros(shape, np.float32)
        self.diff = np.zeros(shape, np.float32)

    @property
    def shape(self):
        return self.data.shape

    @property
    def count(self):
        return self.data.size

    def reshape(self, *shape):
        """pycaffe's ``Blob.reshape(*shape)``: new zeroed data and diff."""
        shape = tuple(int(s) for s in (shape[0] if len(shape) == 1 and
                                       isinstance(shape[0], (tuple, list)) else shape))
        if shape != self.data.shape:
            self.data = np.zeros(shape, np.float32)
            self.diff = np.zeros(shape, np.float32)

    def _legacy(self, i):
        return self.data.shape[i] if self.data.ndim > i else 1

    num = property(lambda self: self._legacy(0))
    channels = property(lambda self: self._legacy(1))
    height = property(lambda self: self._legacy(2))
    width = property(lambda self: self._legacy(3))

    def __repr__(self):
        return f"Blob{self.shape}"


class ParamBlob:
    """A layer's parameter blob: ``data`` is the Parameter's array (writes change the
    model), ``diff`` its accumulated gradient (``Parameter.grad``)."""

    def __init__(self, param):
        self.param = param

    @property
    def data(self):
        return self.param.array

    @property
    def diff(self):
        p = self.param
        if p.grad is None:
            p.grad = make_tensor(np.zeros(p.shape, p.array.dtype))
        return p.grad.array

    @property
    def shape(self):
        return tuple(self.param.shape)

    @property
    def count(self):
        return int(np.prod(self.shape))

    def __repr__(self):
        return f"ParamBlob{self.shape}"


class Net:
    """pycaffe's ``caffe.Net``: ``Net(prototxt, phase)``, ``Net(prototxt, caffemodel,
    phase)`` or ``Net(prototxt, phase, weights=caffemodel)``; ``phase`` is
    ``caffe.TEST``/``caffe.TRAIN`` (or ``"test"``/``"train"``). ``rng`` (a NumPy
    Generator) draws the fillers' values. ``net.model`` is the :class:`CaffeModel` it
    runs.

    >>> net = caffe.Net("lenet_train_test.prototxt", caffe.TRAIN)
    >>> net.forward(data=x, label=y)["loss"]
    >>> net.backward(); net.params["conv1"][0].diff
    """

    def __init__(self, prototxt, *args, weights=None, phase=None, level: int = 0, stages=(),
                 max_bytes: int = MAX_BYTES, rng=None):
        if len(args) == 2:
            weights, phase = args
        elif len(args) == 1:
            if isinstance(args[0], (str, os.PathLike)) or hasattr(args[0], "read"):
                weights = args[0]
            else:
                phase = args[0]
        elif args:
            raise CaffeLayerError("Net(prototxt, [caffemodel,] phase): too many arguments")
        if phase is None:
            raise CaffeLayerError("Net needs a phase: caffe.TEST or caffe.TRAIN")
        model = CaffeModel(read_net(prototxt, max_bytes=max_bytes), phase, level, stages, rng)
        if weights is not None:
            model.copy_from(weights, max_bytes=max_bytes)
        self._attach(model)

    @classmethod
    def from_model(cls, model: CaffeModel) -> Net:
        """The pycaffe view of a :class:`CaffeModel` (e.g. one from :func:`load`);
        both share the parameters."""
        net = cls.__new__(cls)
        net._attach(model)
        return net

    def _attach(self, model):
        self.model = m = model
        self.blobs: OrderedDict[str, Blob] = OrderedDict()
        for name in m.wiring.version_names:
            self.blobs.setdefault(name, Blob())
        # Caffe sets a weighted top's diff to its loss_weight
        self._loss_diffs = dict(m.weighted_tops)
        for t, w in self._loss_diffs.items():
            self.blobs[t].diff = np.full((), w, np.float32)
        self.inputs, self.outputs = list(m.inputs), list(m.outputs)
        self._generated = {t for layer in m._layers if isinstance(layer, DummyData)
                           for t in layer.top_names}
        self._trace = None

    # ------------------------------------------------------------ views
    @property
    def params(self):
        """Layer name -> its parameter blobs (layers with blobs, in order; empty until
        the net is set up, at the first forward when its input shapes are not
        declared)."""
        return OrderedDict((layer.name, [ParamBlob(p) for p in layer.blobs()])
                           for layer in self.model._layers if layer.blobs())

    @property
    def layer_dict(self):
        return OrderedDict((layer.name, layer) for layer in self.model._layers)

    @property
    def _layer_names(self):
        return [layer.name for layer in self.model._layers]

    @property
    def top_names(self):
        return OrderedDict((lp.name, list(lp.top)) for lp in self.model._lps)

    @property
    def bottom_names(self):
        return OrderedDict((lp.name, list(lp.bottom)) for lp in self.model._lps)

    def reshape(self):
        """pycaffe's ``net.reshape()``: nothing to do here, every forward takes its
        shapes from the input blobs."""

    # ------------------------------------------------------------ running
    def forward(self, blobs=None, start=None, end=None, **kwargs):
        """Copy ``kwargs`` into the input blobs (reshaping them if needed), run the
        net (up to layer ``end``), and return ``{name: data}`` for the outputs (the
        tops of ``end``) and the extra ``blobs``."""
        if start is not None:
            raise CaffeLayerError("forward(start=...) is not supported: run the whole net")
        m = self.model
        for k, v in kwargs.items():
            if k not in self.inputs:
                raise CaffeLayerError(f"{k!r} is not an input blob; inputs: {self.inputs}")
            v = np.asarray(v, np.float32)
            self.blobs[k].reshape(*v.shape)
            self.blobs[k].data[...] = v
        end_i = None
        if end is not None:
            names = self._layer_names
            if end not in names:
                raise CaffeLayerError(f"no layer {end!r}; layers: {names}")
            end_i = names.index(end)
        need = self._input_needs()
        feeds = {}
        for name in self.inputs:
            if name in self._generated and name not in kwargs:
                continue  # DummyData fills it, as Caffe's DummyData::Forward
            arr = self.blobs[name].data
            feeds[name] = make_tensor(arr.copy(), requires_grad=need.get(name, False))
        if not m.is_built:
            m.build({k: v.detach() for k, v in feeds.items()})
        trace = {}
        record = any(n.need for n in m.wiring.nodes)
        with set_grad_enabled(record), np.errstate(all="ignore"):
            env = m.run(feeds, end=end_i, trace=trace)
        self._trace = (trace["versions"], env, end_i)
        for name, t in env.items():
            a = to_host(t.array)
            blob = self.blobs[name]
            if blob.data.shape != a.shape:
                keep = blob.diff if blob.diff.shape == a.shape else None
                blob.reshape(*a.shape)
                if keep is not None:
                    blob.diff = keep
                elif name in self._loss_diffs:
                    blob.diff[...] = self._loss_diffs[name]
            blob.data[...] = a
        outs = self.outputs if end_i is None else list(m._lps[end_i].top)
        return {name: self.blobs[name].data for name in list(outs) + list(blobs or [])}

    def _input_needs(self):
        w = self.model.wiring
        need = {}
        for node in w.nodes:
            for v, b in zip(node.bottoms, node.bottom_need):
                if v >= 0 and b and w.producer[v][0] is not None:
                    layer = self.model._layers[w.producer[v][0]]
                    if layer.bottoms == (0, 0):  # a fed blob
                        need[w.version_names[v]] = True
        return need

    def backward(self, diffs=None, start=None, end=None, **kwargs):
        """Caffe's ``Net::Backward`` from the last forward: write ``kwargs`` (output
        blob -> diff) into the top diffs, then fill the diffs Caffe fills (see the
        module notes); returns ``{name: diff}`` for the inputs and ``diffs``."""
        if start is not None or end is not None:
            raise CaffeLayerError("backward(start=, end=) is not supported: run the whole "
                                  "net")
        if self._trace is None:
            raise CaffeLayerError("backward() needs a forward() first")
        versions, env, end_i = self._trace
        for k, v in kwargs.items():
            if k not in self.blobs:
                raise CaffeLayerError(f"no blob {k!r}")
            self.blobs[k].diff[...] = v
        m, w = self.model, self.model.wiring
        roots, seeds = [], []
        out_versions = set(w.output_versions)
        for node in w.layer_nodes():
            i = node.layer
            if end_i is not None and i > end_i:
                continue
            for j, v in enumerate(node.tops):
                lw = m.loss_weights[i][j]
                t = versions.get(v)
                if t is None or not t.requires_grad:
                    continue
                name = w.version_names[v]
                if v in out_versions and (lw or node.need):
                    seed = np.broadcast_to(self.blobs[name].diff, t.shape)
                elif lw:
                    seed = np.full(t.shape, lw, np.float32)
                else:
                    continue
                roots.append(t)
                seeds.append(make_tensor(np.array(seed, dtype=np.float32)))
        targets, where = [], []
        for name, v in w.diff_sources().items():
            t = versions.get(v)
            if t is not None and t.requires_grad:
                targets.append(t)
                where.append(("blob", name))
        seen = set()
        for node in w.layer_nodes():
            if not node.need or (end_i is not None and node.layer > end_i):
                continue
            layer = m._layers[node.layer]
            for j, p in enumerate(layer.blobs()):
                if node.param_need[j] and p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    targets.append(p)
                    where.append(("param", p))
        grads = [None] * len(targets)
        if roots and targets:
            grads = tape_grad(roots, targets, seeds, retain_graph=True, allow_unused=True)
        for (kind, what), g in zip(where, grads):
            if kind == "blob":
                blob = self.blobs[what]
                shape = versions[w.diff_sources()[what]].shape
                blob.diff = np.zeros(shape, np.float32) if g is None else \
                    np.array(to_host(g.array), np.float32)
            elif g is not None:
                ParamBlob(what).diff[...] += to_host(g.array)
        return {name: self.blobs[name].diff for name in list(self.inputs) + list(diffs or [])}

    def clear_param_diffs(self):
        """Zero every parameter diff (Caffe's ``Net::ClearParamDiffs``)."""
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.array[...] = 0

    # ------------------------------------------------------------ files
    def copy_from(self, path, max_bytes: int = MAX_BYTES):
        """pycaffe's ``net.copy_from``: weights from a ``.caffemodel``, by layer name."""
        self.model.copy_from(path, max_bytes=max_bytes)

    def save(self, path):
        """pycaffe's ``net.save``: write a ``.caffemodel`` Caffe reads."""
        self.model.save(path)
