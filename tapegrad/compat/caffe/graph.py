"""How Caffe wires a net, computed once from its ``NetParameter`` (``Net::Init``):
which layers the phase keeps (``include``/``exclude`` rules), which blob each bottom
reads, where Caffe would insert Split layers, the loss weights, and the backward
flags ``layer_need_backward`` / ``bottom_need_backward`` / ``param_propagate_down``.

Blobs are tracked by *version*: every top a layer writes is a new version, also
in place (``top == bottom``), so each bottom reads exactly the tensor Caffe's blob
held at that point. The flags are computed on the net with Caffe's Split layers
(``InsertSplits``: a version read by several layers, or read once and weighted in
the loss, feeds a Split whose tops each consumer reads) so that the rule matches
Caffe's, Split included; the Splits are not run (the tape adds the gradients of
the consumers, which is what a Split's backward does).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import CaffeLayerError

__all__ = ["Node", "Wiring", "included"]


def included(lp, phase: int, level: int, stages) -> bool:
    """Caffe's ``FilterNet``/``StateMeetsRule``: no ``include`` means included unless
    an ``exclude`` rule is met; with ``include``, included if a rule is met."""
    if len(lp.include) and len(lp.exclude):
        raise CaffeLayerError(f"Caffe layer {lp.name!r} (type {lp.type}): specify include "
                              "rules or exclude rules, not both (Caffe's rule)")

    def meets(rule):
        if rule.HasField("phase") and rule.phase != phase:
            return False
        if rule.HasField("min_level") and level < rule.min_level:
            return False
        if rule.HasField("max_level") and level > rule.max_level:
            return False
        return all(s in stages for s in rule.stage) and \
            not any(s in stages for s in rule.not_stage)

    if len(lp.include):
        return any(meets(r) for r in lp.include)
    return not any(meets(r) for r in lp.exclude)


@dataclass
class Node:
    """A layer of the wired net (``layer`` its index in the model, None for a
    Split Caffe would insert): the versions it reads and writes and its flags."""

    name: str
    layer: int | None
    bottoms: list
    tops: list
    loss: list
    propagate_down: list | None = None
    param_need: list = field(default_factory=list)
    allow_force: list = field(default_factory=list)
    need: bool = False
    bottom_need: list = field(default_factory=list)


class Wiring:
    """The versions, nodes and flags of a net. ``version_names[v]`` is the blob name
    of version ``v``; ``nodes`` run in Caffe's order with Splits inserted."""

    def __init__(self, layers, lps, force_backward: bool):
        self.version_names: list[str] = []
        self.producer: list[tuple] = []  # version -> (layer index, top index)
        self.reads: list[list[int]] = []  # per layer: the versions of its bottoms
        self.writes: list[list[int]] = []  # per layer: the versions of its tops
        last: dict[str, int] = {}
        consumers: dict[int, int] = {}
        explicit_loss: dict[int, float] = {}
        for i, (layer, lp) in enumerate(zip(layers, lps)):
            reads = []
            for j, b in enumerate(lp.bottom):
                if b not in last:
                    raise layer.error(f"unknown bottom blob {b!r} (bottom {j}): no earlier "
                                      "layer of this phase writes it")
                reads.append(last[b])
                consumers[last[b]] = consumers.get(last[b], 0) + 1
            writes = []
            for j, t in enumerate(lp.top):
                in_place = j < len(lp.bottom) and lp.bottom[j] == t
                if t in last and not in_place:
                    raise layer.error(f"top blob {t!r} is written by an earlier layer too "
                                      "(Caffe: 'produced by multiple sources'); only a "
                                      "layer's top j may repeat its bottom j (in place)")
                v = len(self.version_names)
                self.version_names.append(t)
                self.producer.append((i, j))
                last[t] = v
                writes.append(v)
            for j, w in enumerate(lp.loss_weight[:len(writes)]):
                explicit_loss[writes[j]] = w
                if w:
                    consumers[writes[j]] = consumers.get(writes[j], 0) + 1
            self.reads.append(reads)
            self.writes.append(writes)
        self.outputs = sorted(n for n, v in last.items() if not any(
            v in r for r in self.reads))  # Caffe's std::set<string> of unconsumed blobs
        self.output_versions = [last[n] for n in self.outputs]
        self.last = last
        self._split_check(layers, lps, consumers)
        self.nodes = self._nodes(layers, lps, consumers, explicit_loss)
        self._flags(force_backward)

    def _split_check(self, layers, lps, consumers):
        for i, (layer, lp) in enumerate(zip(layers, lps)):
            for j, v in enumerate(self.reads[i]):
                in_place = j < len(lp.top) and lp.top[j] == lp.bottom[j]
                if in_place and consumers[v] > 1:
                    raise layer.error(
                        f"runs in place on blob {lp.bottom[j]!r}, which other layers read too; "
                        "Caffe refuses this net as well ('produced by multiple sources' "
                        "after its Split): give the top its own name")

    def _nodes(self, layers, lps, consumers, explicit_loss):
        nodes = []
        split_of: dict[int, list[int]] = {}  # version -> its split tops (fresh versions)
        taken: dict[int, int] = {}
        for i, (layer, lp) in enumerate(zip(layers, lps)):
            bottoms = []
            for v in self.reads[i]:
                if v in split_of:
                    bottoms.append(split_of[v][taken[v]])
                    taken[v] += 1
                else:
                    bottoms.append(v)
            loss = layer_loss_weights(layer, lp)
            specs = list(lp.param)
            nodes.append(Node(
                lp.name, i, bottoms, list(self.writes[i]), loss,
                list(lp.propagate_down) if len(lp.propagate_down) else None,
                [(specs[j].lr_mult if j < len(specs) else 1.0) != 0
                 for j in range(len(layer.blob_names))],
                [layer.allow_force_backward(j) for j in range(len(bottoms))]))
            for j, v in enumerate(self.writes[i]):
                n = consumers.get(v, 0)
                if n <= 1:
                    continue
                lw = explicit_loss.get(v, 0.0)
                tops = [-(len(nodes) * 1000 + j * 100 + k + 1) for k in range(n)]
                split_of[v] = tops
                taken[v] = 1 if lw else 0
                if lw:
                    nodes[-1].loss[j] = 0.0
                nodes.append(Node(f"{self.version_names[v]}_{lp.name}_{j}_split", None, [v],
                                  tops, [lw] + [0.0] * (n - 1), None, [], [True]))
        return nodes

    def _flags(self, force_backward):
        """Caffe's Net::Init, on the nodes (Splits included)."""
        blob_need: dict[int, bool] = {}
        for node in self.nodes:
            need = False
            node.bottom_need = []
            for j, v in enumerate(node.bottoms):
                b = blob_need.get(v, False)
                node.bottom_need.append(node.propagate_down[j] if node.propagate_down else b)
                need |= b
            need |= any(node.param_need)
            node.need = need
            for v in node.tops:
                blob_need[v] = blob_need.get(v, False) or need
        under_loss, skip = set(), set()
        for node in reversed(self.nodes):
            contributes, skip_prop = False, True
            for v, lw in zip(node.tops, node.loss):
                contributes |= bool(lw) or v in under_loss
                skip_prop &= v in skip
            if not node.tops:
                skip_prop = True
            if node.need and skip_prop:
                node.need = False
                node.bottom_need = [False] * len(node.bottoms)
            if not contributes:
                node.need = False
            for j, v in enumerate(node.bottoms):
                if contributes:
                    under_loss.add(v)
                else:
                    node.bottom_need[j] = False
                if not node.bottom_need[j]:
                    skip.add(v)
        if force_backward:
            for node in self.nodes:
                node.need = True
                node.bottom_need = [b or a for b, a in zip(node.bottom_need, node.allow_force)]
                node.param_need = [True] * len(node.param_need)

    def layer_nodes(self):
        return [n for n in self.nodes if n.layer is not None]

    def diff_sources(self):
        """Blob name -> the version whose gradient Caffe's ``Backward`` leaves in that
        blob's diff: the bottom read by the earliest layer (Split included) that
        writes a diff for it, since Backward runs the layers in reverse."""
        out: dict[str, int] = {}
        for node in self.nodes:
            if not node.need:
                continue
            for v, need in zip(node.bottoms, node.bottom_need):
                if need and v >= 0:
                    out.setdefault(self.version_names[v], v)
        return out


def layer_loss_weights(layer, lp) -> list[float]:
    """Each top's loss weight: ``loss_weight`` as given (one per top), else 1 on
    the first top of a loss layer (Caffe's LossLayer::LayerSetUp), else 0."""
    n = len(lp.top)
    if len(lp.loss_weight):
        if len(lp.loss_weight) != n:
            raise layer.error(f"has {len(lp.loss_weight)} loss_weight for {n} tops (give "
                              "one per top)")
        return list(lp.loss_weight)
    return [1.0 if (layer.is_loss and j == 0) else 0.0 for j in range(n)]
