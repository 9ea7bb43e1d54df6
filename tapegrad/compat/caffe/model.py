"""A Caffe net as a ``tapegrad.nn.Module``: :class:`CaffeModel` runs the layers in
Caffe's order on tapegrad's tape, so ``loss.backward()``, optimizers, ``state_dict``
and ONNX export work as for any Module. Parameters are named after the layers
(``conv1.weight``, ``conv1.bias``, ``bn1.mean``...; a ``.`` in a layer name becomes
``_``). :class:`tapegrad.compat.caffe.Net` is the pycaffe-style view of the same
model."""

from __future__ import annotations

import warnings

import numpy as np

from ...device import to_host
from ...errors import ArgumentKeyError, TapegradError
from ...nn.module import Module
from ...tape import no_grad
from ...tensor import Tensor
from ...tensor import tensor as make_tensor
from . import data, losses, simple, vision  # noqa: F401  (they register the layer types)
from .base import LAYERS, CaffeLayerError, UnsupportedLayerError
from .data import Source
from .files import CaffeFileError, read_weights, write_weights
from .graph import Wiring, included, layer_loss_weights

__all__ = ["CaffeModel", "PHASES"]

PHASES = {"train": 0, "test": 1}


def _phase(phase) -> tuple[str, int]:
    if isinstance(phase, str) and phase.lower() in PHASES:
        return phase.lower(), PHASES[phase.lower()]
    if phase in (0, 1) and not isinstance(phase, bool):
        return ("train", "test")[phase], int(phase)
    raise CaffeLayerError(f"phase must be 'train' or 'test' (or caffe.TRAIN / caffe.TEST), "
                          f"got {phase!r}")


def _make_layer(lp, phase):
    if lp.type == "Python":
        raise UnsupportedLayerError(
            f"Caffe layer {lp.name!r} is a Python layer (module "
            f"{lp.python_param.module!r}, layer {lp.python_param.layer!r}); tapegrad never "
            "runs code named by a model file: write the layer as a tapegrad Module and "
            "replace it")
    if lp.type not in LAYERS:
        raise UnsupportedLayerError(
            f"Caffe layer {lp.name!r} has type {lp.type!r}, which tapegrad does not run; "
            f"supported types: {', '.join(sorted(LAYERS))}")
    return LAYERS[lp.type](lp, phase)


class CaffeModel(Module):
    """A Caffe net (a parsed ``NetParameter``) in one ``phase`` (``"test"`` or
    ``"train"``, with ``level`` and ``stages`` for the include/exclude rules).

    ``forward(*inputs, **inputs)`` takes the fed blobs (``self.inputs``: the tops of
    Input and data layers, in order) and returns the net's outputs (``self.outputs``:
    the blobs no layer reads, sorted by name as Caffe lists them), one Tensor or a
    tuple. ``self.train(phase == "train")`` is set at construction; Dropout and
    BatchNorm (without ``use_global_stats``) follow ``self.training`` afterwards.
    """

    def __init__(self, net_param, phase="test", level: int = 0, stages=(), rng=None):
        super().__init__()
        phase, phase_id = _phase(phase)
        state = net_param.state
        stages = list(stages) or list(state.stage)
        level = level or state.level
        lps = [lp for lp in net_param.layer if included(lp, phase_id, level, stages)]
        d = self.__dict__
        d["net_name"], d["phase"], d["_rng"] = net_param.name, phase, rng
        d["force_backward"] = net_param.force_backward
        d["_lps"] = lps
        layers, keys = [], []
        for i, lp in enumerate(lps):
            layer = _make_layer(lp, phase)
            key = (lp.name or f"layer{i}").replace(".", "_")
            while key in self._modules:
                key += "_"
            self.add_module(key, layer)
            layers.append(layer)
            keys.append(key)
        d["_layers"], d["_keys"] = layers, keys
        d["wiring"] = Wiring(layers, lps, net_param.force_backward)
        d["loss_weights"] = [layer_loss_weights(layer, lp) for layer, lp in zip(layers, lps)]
        # (top, loss weight) of every weighted top, in layer order
        d["weighted_tops"] = [(t, w) for lp, ws in zip(lps, self.loss_weights)
                              for t, w in zip(lp.top, ws) if w]
        d["inputs"] = [t for layer in layers if isinstance(layer, Source)
                       for t in layer.top_names]
        d["outputs"] = list(self.wiring.outputs)
        d["notes"] = [layer.note for layer in layers if isinstance(layer, Source) and layer.note]
        d["_shares"], d["mults"] = self._param_specs(layers, lps, keys)
        self.train(phase == "train")
        if self._input_shapes() is not None:
            self.build()

    # ---------------------------------------------------------------- set-up
    def _param_specs(self, layers, lps, keys):
        """Shared parameters (``param { name }``): (layer, blob) -> owner (layer, blob);
        each parameter's (lr_mult, decay_mult) as Caffe's AppendParam chooses them."""
        owners, shares, mults = {}, {}, {}
        for i, (layer, lp) in enumerate(zip(layers, lps)):
            for j, blob in enumerate(layer.blob_names):
                spec = lp.param[j] if j < len(lp.param) else None
                lr = spec.lr_mult if spec is not None else 1.0
                decay = spec.decay_mult if spec is not None else 1.0
                if layer.type == "BatchNorm":
                    lr = decay = 0.0
                name = spec.name if spec is not None else ""
                if name and name in owners:
                    oi, oj = owners[name]
                    shares[(i, j)] = (oi, oj)
                    okey = f"{keys[oi]}.{layers[oi].blob_names[oj]}"
                    olr, odecay = mults[okey]
                    if spec.HasField("lr_mult") and olr != lr and \
                            lps[oi].param[oj].HasField("lr_mult"):
                        raise layer.error(f"param {name!r} is shared with layer "
                                          f"{lps[oi].name!r} but their lr_mult differ "
                                          f"({lr} vs {olr})")
                    mults[okey] = (lr if not lps[oi].param[oj].HasField("lr_mult") and
                                   spec.HasField("lr_mult") else olr, odecay)
                    continue
                if name:
                    owners[name] = (i, j)
                mults[f"{keys[i]}.{blob}"] = (lr, decay)
        return shares, mults

    def _input_shapes(self):
        shapes = {}
        for layer in self._layers:
            if isinstance(layer, Source):
                for t, s in zip(layer.top_names, layer.shapes):
                    if s is None:
                        return None
                    shapes[t] = s
        return shapes

    def build(self, feeds=None) -> None:
        """Set every layer up (create or check its blobs) by one pass on zeros of the
        declared input shapes, or on ``feeds``; BatchNorm statistics are not updated."""
        if feeds is None:
            feeds = {n: np.zeros(s, np.float32) for n, s in self._input_shapes().items()}
        for layer in self._layers:
            layer.__dict__["_dry"] = True
        try:
            with no_grad(), np.errstate(all="ignore"):
                self.run(feeds)
        finally:
            for layer in self._layers:
                layer.__dict__.pop("_dry", None)

    @property
    def is_built(self) -> bool:
        return all(layer.is_setup for layer in self._layers)

    def _setup(self, i, layer, bottoms):
        for (si, sj), (oi, oj) in self._shares.items():
            if si == i:
                owner = self._layers[oi]
                setattr(layer, layer.blob_names[sj], getattr(owner, owner.blob_names[oj]))
        layer.setup([b.array for b in bottoms], self._rng)
        key = self._keys[i]
        for name in layer.blob_names:
            p = getattr(layer, name)
            lr, _ = self.mults.get(f"{key}.{name}", (None, None))
            if lr is not None:
                p.requires_grad = layer.type != "BatchNorm" and (lr != 0 or self.force_backward)

    # ---------------------------------------------------------------- running
    def _feeds(self, args, kwargs):
        if len(args) > len(self.inputs):
            raise CaffeLayerError(f"the net takes {len(self.inputs)} inputs {self.inputs}, "
                                  f"got {len(args)} positional")
        feeds = dict(zip(self.inputs, args))
        for k, v in kwargs.items():
            if k not in self.inputs:
                raise CaffeLayerError(f"{k!r} is not an input of the net; its inputs are "
                                      f"{self.inputs}")
            if k in feeds:
                raise CaffeLayerError(f"input {k!r} given twice")
            feeds[k] = v
        return feeds

    def forward(self, *args, **kwargs):
        env = self.run(self._feeds(args, kwargs))
        outs = tuple(env[n] for n in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def _tensor(self, value):
        if isinstance(value, Tensor):
            return value
        device = next((p.device for p in self.parameters()), None)
        on_gpu = hasattr(value, "__cuda_array_interface__")
        arr = value if on_gpu else np.asarray(value, dtype=np.float32)
        return make_tensor(arr, device=device or "cpu")

    def run(self, feeds, end: int | None = None, trace=None) -> dict:
        """Run layers ``0..end`` (all by default) on ``feeds`` (blob name -> Tensor or
        array); returns blob name -> Tensor (the last version of each blob).
        ``trace`` (a dict) receives ``versions``: version -> Tensor."""
        env, versions = {}, {} if trace is None else trace.setdefault("versions", {})
        wiring = self.wiring
        last = len(self._layers) - 1 if end is None else end
        for i, (layer, lp) in enumerate(zip(self._layers, self._lps)):
            if i > last:
                break
            if isinstance(layer, Source):
                tops = []
                for j, t in enumerate(layer.top_names):
                    if t in feeds:
                        tops.append(self._tensor(feeds[t]))
                    elif isinstance(layer, data.DummyData):
                        tops.append(self._tensor(layer.generate(j)))
                    else:
                        raise CaffeLayerError(
                            f"blob {t!r} (a top of {layer.type} layer {layer.name!r}) was not "
                            f"fed; pass it: forward({t}=...) (the net's inputs: {self.inputs})")
                if not layer.is_setup:
                    self._setup(i, layer, [])
            else:
                bottoms = [versions[v] for v in wiring.reads[i]]
                if len(lp.propagate_down):
                    bottoms = [b if keep else b.detach()
                               for b, keep in zip(bottoms, lp.propagate_down)]
                if not layer.differentiable:
                    bottoms = [b.detach() for b in bottoms]
                try:
                    if not layer.is_setup:
                        self._setup(i, layer, bottoms)
                    tops = layer(*bottoms)
                except CaffeLayerError:
                    raise
                except TapegradError as e:
                    raise layer.error(f"with bottoms {[tuple(b.shape) for b in bottoms]}: "
                                      f"{e}") from e
            for v, t, name in zip(wiring.writes[i], tops, lp.top):
                versions[v] = t
                env[name] = t
        return env

    def loss(self, env) -> Tensor | None:
        """Caffe's loss: ``sum(loss_weight * sum(top))`` over the weighted tops in
        ``env`` (None when no top is weighted)."""
        total = None
        for t, w in self.weighted_tops:
            if t in env:
                term = env[t].sum() * w
                total = term if total is None else total + term
        return total

    # ------------------------------------------------------------ weights
    def layer(self, name: str):
        """The layer Module named ``name`` (Caffe's name)."""
        for layer in self._layers:
            if layer.name == name:
                return layer
        raise ArgumentKeyError(f"no layer {name!r} in the net; its layers: "
                               f"{', '.join(layer.name for layer in self._layers)}")

    def copy_from(self, source, max_bytes=None, strict: bool = False, only=None) -> list[str]:
        """Copy weights from a ``.caffemodel`` as Caffe's ``CopyTrainedLayersFrom``:
        matched by layer name; a matched layer must hold as many blobs of the same
        shapes (else :class:`CaffeFileError`); layers of the file that the net lacks
        are skipped. Returns the names of the net's layers with blobs that got no
        weights (they keep their fillers' values; Caffe's fine-tuning rule); with
        ``strict=True`` that is an error. ``only``: the names of the layers to copy
        into (default: all)."""
        kw = {} if max_bytes is None else {"max_bytes": max_bytes}
        file_layers = read_weights(source, **kw)
        where = getattr(source, "name", str(source))
        got = set()
        by_name = {}
        mine = [layer for layer in self._layers if only is None or layer.name in only]
        for layer in mine:
            by_name.setdefault(layer.name, []).append(layer)
        for fl in file_layers:
            for layer in by_name.get(fl.name, []):
                layer.give_blobs(fl.blobs, where)
                got.add(layer.name)
        missing = [layer.name for layer in mine if layer.blob_names and layer.name not in got]
        if missing and strict:
            raise CaffeFileError(f"copy_from: {where!r} holds no weights for the layers "
                                 f"{missing}; pass strict=False to keep their fillers' values")
        if missing:
            warnings.warn(f"{where}: no weights for layers {missing}; they keep the values of "
                          "their fillers (Caffe's rule when fine-tuning)", stacklevel=2)
        return missing

    def save(self, path) -> None:
        """Write the weights as a ``.caffemodel`` (every layer with its blobs, as
        Caffe's ``Net::ToProto``)."""
        if not self.is_built:
            raise CaffeLayerError("the net is not set up yet (its input shapes were not "
                                  "declared): run it once on inputs, then save")
        write_weights(path, [(lp, [to_host(p.array) for p in layer.blobs()])
                             for layer, lp in zip(self._layers, self._lps)],
                      name=self.net_name)

    def param_groups(self, base_lr: float, weight_decay: float = 0.0) -> list[dict]:
        """Optimizer param groups with Caffe's per-parameter rates: ``lr = base_lr *
        lr_mult``, ``weight_decay = weight_decay * decay_mult`` (parameters with
        lr_mult 0 left out), one group per distinct pair."""
        groups: dict[tuple, dict] = {}
        seen = set()
        for name, p in self.named_parameters():
            lr, decay = self.mults.get(name, (1.0, 1.0))
            if lr == 0 or id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            g = groups.setdefault((lr, decay), {"params": [], "lr": base_lr * lr,
                                                "weight_decay": weight_decay * decay,
                                                "lr_mult": lr, "decay_mult": decay})
            g["params"].append(p)
        return list(groups.values())

    def extra_repr(self):
        return f"{self.net_name!r}, phase={self.phase!r}, inputs={self.inputs}, " \
               f"outputs={self.outputs}"
