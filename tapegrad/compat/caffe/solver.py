"""Caffe's solver: ``caffe train --solver solver.prototxt`` as a Python object with the
members of pycaffe's ``caffe.SGDSolver`` (``net``, ``test_nets``, ``iter``, ``step``,
``solve``, ``test``, ``snapshot``, ``restore``), and Caffe's arithmetic exactly
(:mod:`.updates`): the learning-rate policies, the six solver types, weight decay,
gradient clipping, ``iter_size`` accumulation, smoothed loss, testing, snapshots and
``.solverstate`` files Caffe reads.

Data layers read nothing here (see :mod:`.data`): a *feed* is a callable returning
``{top name: array}`` for one forward pass of a net, already transformed.

>>> solver = caffe.Solver("lenet_solver.prototxt", train_feed=next_train_batch,
...                       test_feed=next_test_batch)
>>> solver.solve()          # max_iter iterations, tests, snapshots
>>> solver.test()           # {"accuracy": 0.98, "loss": 0.05}
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

import numpy as np

from ...device import get_array_module
from ...errors import ArgumentTypeError, NonFiniteError, OutOfRangeError
from ...random import manual_seed
from .files import MAX_BYTES, CaffeFileError, legacy_shape_equal, locate, read_net
from .net import Net, ParamBlob
from .schema import messages
from .solver_files import (
    SolverStateData,
    read_solver,
    read_solver_state,
    solver_source,
    write_solver_state,
)
from .updates import (
    LR_POLICIES,
    SOLVER_TYPES,
    CaffeSolverError,
    Updater,
    check_lr_policy,
    learning_rate,
)

__all__ = ["Solver", "read_solver", "learning_rate", "SOLVER_TYPES", "LR_POLICIES",
           "CaffeSolverError", "SolverDiverged", "read_solver_state", "write_solver_state"]


class SolverDiverged(NonFiniteError):
    """The training loss became NaN or infinite (Caffe would go on with NaN weights);
    ``exit_status`` 1 for command-line tools."""

    exit_status = 1


# ------------------------------------------------------------------------ solver


def _fed_inputs(net: Net) -> list[str]:
    """The net's input blobs a feed must provide (DummyData fills its own)."""
    return [n for n in net.inputs if n not in net._generated]


def _net_loss(net: Net) -> float:
    """Caffe's ``Net::Forward`` loss: ``sum(loss_weight * sum(top))``."""
    return sum(w * float(net.blobs[t].data.sum(dtype=np.float64))
               for t, w in net.model.weighted_tops)


def _values(net: Net, names) -> dict:
    return {n: float(net.blobs[n].data.reshape(-1)[0]) if net.blobs[n].data.size == 1
            else net.blobs[n].data.copy() for n in names}


class Solver:
    """Caffe's solver (``caffe train``), with pycaffe's ``SGDSolver`` members.

    ``solver``: a solver ``.prototxt`` path, its text, or a ``SolverParameter``
    (:func:`read_solver`). The train net comes from exactly one of ``net``,
    ``net_param``, ``train_net``, ``train_net_param`` (phase TRAIN, the net's state,
    then ``train_state``); the test nets from ``test_net_param`` and ``test_net``,
    then ``net``/``net_param`` again in phase TEST for each remaining ``test_iter``
    (``test_state`` per test net), as Caffe's ``InitTestNets``. Relative paths in the
    solver (nets, ``weights``, the ``snapshot_prefix`` folder) are looked up in the
    current directory first (Caffe's rule), then under ``root`` (default: the solver
    file's folder).

    ``train_feed()`` returns ``{top: array}`` for the train net's Input/data layers
    for one forward pass; it is called ``iter_size`` times per iteration.
    ``test_feed`` (one callable, or a list with one per test net) is called
    ``test_iter[i]`` times per test. A net whose inputs are all DummyData needs no
    feed. ``weights``: caffemodels (a comma-separated string or a list; default the
    solver's ``weights``) copied into the train net by layer name (Caffe's
    ``--weights``). Test nets share the train net's parameters layer by layer (Caffe's
    ``ShareTrainedLayersWith``). ``on_display(info)`` is called every ``display``
    iterations with ``iter``, ``loss`` (smoothed over ``average_loss``), ``lr`` and
    ``outputs`` (the train net's output blobs); ``on_test(info)`` after each test with
    ``iter``, ``net`` (its index), ``outputs`` (means), ``loss_weights`` and ``loss``
    (the mean weighted loss with ``test_compute_loss``, else None). A
    ``random_seed >= 0`` seeds the fillers and tapegrad's generator (dropout).

    >>> s = caffe.Solver("solver.prototxt", train_feed=lambda: {"data": x, "label": y})
    >>> s.step(100); s.net.params["ip1"][0].data; s.snapshot()
    """

    def __init__(self, solver, *, train_feed=None, test_feed=None, weights=None, root=None,
                 on_display=None, on_test=None):
        sp, path = solver_source(solver, MAX_BYTES)
        self.param = sp
        self.root = root if root is not None else os.path.dirname(os.path.abspath(path)) \
            if path else None
        self.on_display, self.on_test = on_display, on_test
        self._check(sp)
        self._updater = Updater(sp)
        self._rng = None
        if sp.random_seed >= 0:
            self._rng = np.random.default_rng(sp.random_seed)
            manual_seed(sp.random_seed)
        self.iter = self.current_step = 0
        self.smoothed_loss, self._losses = 0.0, []
        self._batch = None  # a train batch taken early to set the net up
        self._learnable = None
        self.net = self._make_net(self._train_source(sp), 0, sp.train_state
                                  if sp.HasField("train_state") else None)
        self.test_nets = [self._make_net(src, 1, sp.test_state[i] if len(sp.test_state)
                                         else None)
                          for i, src in enumerate(self._test_sources(sp))]
        self._train_feed = self._check_feed(self.net, train_feed, "train_feed")
        feeds = list(test_feed) if isinstance(test_feed, (list, tuple)) else \
            [test_feed] * len(self.test_nets)
        if len(feeds) != len(self.test_nets):
            raise CaffeSolverError(f"test_feed: {len(feeds)} feeds for {len(self.test_nets)} "
                                   "test nets; pass one callable per test net")
        self._test_feeds = [self._check_feed(net, f, f"test_feed (test net #{i})")
                            for i, (net, f) in enumerate(zip(self.test_nets, feeds))]
        for w in (list(sp.weights) if weights is None else
                  [weights] if isinstance(weights, (str, os.PathLike)) else list(weights)):
            for one in filter(None, (part.strip() for part in os.fspath(w).split(","))):
                self._copy_weights(self._find(one, "weights"))

    def _copy_weights(self, path):
        """Caffe's ``CopyLayers``: into the train net, and into the layers of each test
        net that the train net lacks (the others share the train net's blobs)."""
        self.net.model.copy_from(path)
        trained = {layer.name for layer in self.net.model._layers}
        for net in self.test_nets:
            own = {layer.name for layer in net.model._layers if layer.blob_names} - trained
            if own:
                net.model.copy_from(path, only=own)

    # ------------------------------------------------------------ set-up
    @staticmethod
    def _check(sp):
        check_lr_policy(sp)
        for name, low in (("iter_size", 1), ("average_loss", 1)):
            if getattr(sp, name) < low:
                raise CaffeSolverError(f"{name} is {getattr(sp, name)}; Caffe needs "
                                       f"{name} >= {low}")
        if sp.snapshot_format != 1:
            raise CaffeSolverError("snapshot_format: HDF5 is not supported (tapegrad writes "
                                   "no HDF5); use snapshot_format: BINARYPROTO")
        if sp.snapshot_diff:
            raise CaffeSolverError("snapshot_diff: true is not supported (tapegrad's "
                                   "caffemodels hold no diffs); remove it")
        if sp.snapshot < 0:
            raise CaffeSolverError(f"snapshot is {sp.snapshot}; give the number of "
                                   "iterations between snapshots (0: none)")
        if sp.snapshot and not sp.HasField("snapshot_prefix"):
            raise CaffeSolverError("snapshot is set but snapshot_prefix is not (Caffe "
                                   "refuses this too): add snapshot_prefix: \"path/name\"")

    def _find(self, path, what):
        """``path`` as given if it exists (relative to the current directory), else
        under ``root``."""
        found = locate(path, self.root)
        if found is not None:
            return found
        under = self.root and not os.path.isabs(path)
        raise CaffeSolverError(f"{what}: {path!r} is not in the current directory "
                               f"({os.getcwd()!r})" + (f" nor under root {self.root!r}"
                                                       if under else "")
                               + "; fix the path in the solver or pass root=")

    def _train_source(self, sp):
        given = [f for f in ("net", "net_param", "train_net", "train_net_param")
                 if sp.HasField(f)]
        if len(given) != 1:
            raise CaffeSolverError(
                "the solver must give the train net in exactly one of net, net_param, "
                f"train_net, train_net_param (Caffe's rule); it gives "
                f"{', '.join(given) if given else 'none'}")
        f = given[0]
        return getattr(sp, f) if f.endswith("_param") else self._find(getattr(sp, f), f)

    def _test_sources(self, sp):
        sources = list(sp.test_net_param) + [self._find(p, "test_net") for p in sp.test_net]
        generic = [f for f in ("net", "net_param") if sp.HasField(f)]
        if len(generic) > 1:
            raise CaffeSolverError("the solver gives both net and net_param (Caffe refuses "
                                   "this): keep one")
        n_iter = len(sp.test_iter)
        if (n_iter < len(sources)) if generic else (n_iter != len(sources)):
            raise CaffeSolverError(f"test_iter is given {n_iter} times for {len(sources)} "
                                   "test nets (test_net/test_net_param): give test_iter once "
                                   "per test net")
        if generic:
            src = sp.net_param if generic[0] == "net_param" else self._find(sp.net, "net")
            sources += [src] * (n_iter - len(sources))
        if len(sp.test_state) and len(sp.test_state) != len(sources):
            raise CaffeSolverError(f"test_state is given {len(sp.test_state)} times for "
                                   f"{len(sources)} test nets: give it once per test net, "
                                   "or not at all")
        if sources and sp.test_interval <= 0:
            raise CaffeSolverError(f"the solver has {len(sources)} test net(s) (test_iter) but "
                                   f"test_interval is {sp.test_interval}; Caffe needs "
                                   "test_interval > 0")
        return sources

    def _make_net(self, source, phase, state=None):
        net_param = read_net(source)
        merged = messages().NetState(phase=phase)
        merged.MergeFrom(net_param.state)
        if state is not None:
            merged.MergeFrom(state)
        net_param.state.CopyFrom(merged)
        return Net(net_param, phase=merged.phase, rng=self._rng)

    @staticmethod
    def _check_feed(net, feed, what):
        need = _fed_inputs(net)
        if feed is None and need:
            raise CaffeSolverError(f"{what}: the net reads the blobs {need} from its data "
                                   "layers; pass a callable returning {name: array} for one "
                                   "batch, already transformed")
        if feed is not None and not callable(feed):
            raise ArgumentTypeError(f"{what} must be a callable returning {{name: array}}, "
                                    f"got {type(feed).__name__}")
        return feed

    # ------------------------------------------------------------ running
    def _next(self, net, feed, what) -> dict:
        if net is self.net and self._batch is not None:
            batch, self._batch = self._batch, None
            return batch
        batch = feed() if feed is not None else {}
        if not isinstance(batch, Mapping):
            raise ArgumentTypeError(f"{what} returned a {type(batch).__name__}; it must "
                                    "return {blob name: array}")
        missing = [n for n in _fed_inputs(net) if n not in batch]
        if missing:
            raise CaffeSolverError(f"{what} returned {sorted(batch)}, without {missing}; the "
                                   f"net's inputs are {net.inputs}")
        return dict(batch)

    def _forward(self, net, feed, what):
        net.forward(**self._next(net, feed, what))
        return _net_loss(net)

    def _ensure_built(self):
        """Set the train net up (its parameters exist) with its first batch, kept for
        the next forward, so the data stream is unchanged."""
        model = self.net.model
        if not model.is_built:
            self._batch = self._next(self.net, self._train_feed, "train_feed")
            model.build(self._batch)

    def _params(self):
        """Caffe's ``learnable_params``: each owned (not shared) parameter blob, in layer
        and blob order, with its (lr_mult, decay_mult)."""
        if self._learnable is None:
            self._ensure_built()
            m, out = self.net.model, []
            for i, layer in enumerate(m._layers):
                for j, name in enumerate(layer.blob_names):
                    if (i, j) not in m._shares and name in layer._parameters:
                        out.append((ParamBlob(layer._parameters[name]),
                                    *m.mults[f"{m._keys[i]}.{name}"]))
            self._learnable = out
        return self._learnable

    def _history(self):
        """The updater's history arrays, zeros until the first update or a restore."""
        up = self._updater
        if up.history is None:
            up.init_history([p.data for p, _, _ in self._params()])
        return up.history

    def _rate(self) -> float:
        """This iteration's rate; advances ``current_step`` as Caffe's GetLearningRate."""
        sp = self.param
        if sp.lr_policy == "step":
            self.current_step = self.iter // sp.stepsize
        elif sp.lr_policy == "multistep":
            if self.current_step < len(sp.stepvalue) and \
                    self.iter >= sp.stepvalue[self.current_step]:
                self.current_step += 1
            return learning_rate(sp, self.iter, self.current_step)
        return learning_rate(sp, self.iter)

    def _smooth(self, loss, start):
        """Caffe's ``UpdateSmoothedLoss`` over the last ``average_loss`` losses."""
        n = self.param.average_loss
        if len(self._losses) < n:
            self._losses.append(loss)
            k = len(self._losses)
            self.smoothed_loss = (self.smoothed_loss * (k - 1) + loss) / k
        else:
            i = (self.iter - start) % n
            self.smoothed_loss += (loss - self._losses[i]) / n
            self._losses[i] = loss

    def _display(self, lr):
        if self.on_display is not None:
            self.on_display({"iter": self.iter, "loss": self.smoothed_loss, "lr": lr,
                             "outputs": _values(self.net, self.net.outputs)})

    def step(self, iters: int = 1) -> None:
        """Run ``iters`` iterations as Caffe's ``Solver::Step``: clear the diffs; test
        every ``test_interval`` (at 0 too with ``test_initialization``); forward and
        backward ``iter_size`` times; smooth the loss; display; update; ``iter += 1``;
        snapshot every ``snapshot``. A NaN/inf loss raises :class:`SolverDiverged`."""
        sp = self.param
        start, stop = self.iter, self.iter + int(iters)
        self._losses, self.smoothed_loss = [], 0.0
        while self.iter < stop:
            self.net.clear_param_diffs()
            if sp.test_interval and self.iter % sp.test_interval == 0 and \
                    (self.iter > 0 or sp.test_initialization):
                self.test_all()
            rate = self._rate()
            loss = 0.0
            for _ in range(sp.iter_size):
                loss += self._forward(self.net, self._train_feed, "train_feed")
                self.net.backward()
            loss /= sp.iter_size
            if not math.isfinite(loss):
                raise SolverDiverged(
                    f"the train loss is {loss} at iteration {self.iter} ({sp.type}, lr "
                    f"{rate:g}): training diverged; lower base_lr (now {sp.base_lr:g}) or set "
                    "clip_gradients (Caffe itself would go on with NaN weights)")
            self._smooth(loss, start)
            if sp.display and self.iter % sp.display == 0:
                self._display(rate)
            params = self._params()
            self._updater([(p.data, p.diff, lr, decay) for p, lr, decay in params], rate,
                          self.iter)
            for p, _, _ in params:
                p.param._bump_version()
            self.iter += 1
            if sp.snapshot and self.iter % sp.snapshot == 0:
                self.snapshot()

    def solve(self, resume=None) -> None:
        """Caffe's ``Solver::Solve``: :meth:`restore` ``resume`` (a ``.solverstate``) if
        given, step to ``max_iter``, snapshot unless the last step did (with
        ``snapshot_after_train``), one more forward pass to display the loss when
        ``iter`` is a multiple of ``display``, and a last test when it is a multiple of
        ``test_interval``."""
        sp = self.param
        if resume is not None:
            self.restore(resume)
        start = self.iter
        self.step(sp.max_iter - self.iter)
        if sp.snapshot_after_train and (not sp.snapshot or self.iter % sp.snapshot != 0):
            self.snapshot()
        if sp.display and self.iter % sp.display == 0:
            self._smooth(self._forward(self.net, self._train_feed, "train_feed"), start)
            self._display(learning_rate(sp, self.iter, self.current_step
                                        if sp.lr_policy == "multistep" else None))
        if sp.test_interval and self.iter % sp.test_interval == 0:
            self.test_all()

    # ------------------------------------------------------------ testing
    def _share_trained(self, net):
        """Caffe's ``ShareTrainedLayersWith``: each layer of the test net named as a
        layer of the train net uses its parameter blobs (the same arrays)."""
        self._ensure_built()
        targets = {}
        for layer in net.model._layers:
            targets.setdefault(layer.name, layer)
        for source in self.net.model._layers:
            target = targets.get(source.name)
            blobs = source.blobs()
            if target is None or not blobs:
                continue
            have = target.blobs() if target.is_setup else target.blob_names
            if len(have) != len(blobs):
                raise CaffeSolverError(f"cannot share layer {source.name!r} with the test net: "
                                       f"it has {len(blobs)} blobs there, {len(have)} here "
                                       "(Caffe: 'Incompatible number of blobs')")
            for j, p in enumerate(blobs):
                if target.is_setup and tuple(have[j].shape) != tuple(p.shape):
                    raise CaffeSolverError(f"cannot share param {j} of layer {source.name!r} "
                                           f"with the test net: shape {tuple(p.shape)} in the "
                                           f"train net, {tuple(have[j].shape)} in the test net")
                setattr(target, target.blob_names[j], p)

    def test(self, i: int = 0) -> dict:
        """Caffe's ``Solver::Test`` of test net ``i``: ``test_iter[i]`` forward passes
        with the train net's current weights; returns ``{output blob: mean over the
        passes}`` (a float per one-value blob, else an array), as Caffe's
        "Test net output" lines before the loss weight."""
        return self._test(i)[0]

    def _test(self, i):
        if not 0 <= i < len(self.test_nets):
            raise OutOfRangeError(f"test({i}): the solver has {len(self.test_nets)} test "
                                  "net(s)")
        net, n = self.test_nets[i], self.param.test_iter[i]
        flags = [(p.param, p.param.requires_grad) for p, _, _ in self._params()]
        self._share_trained(net)
        sums, loss = {}, 0.0
        try:
            for _ in range(n):
                loss += self._forward(net, self._test_feeds[i], f"test_feed (test net #{i})")
                for name in net.outputs:
                    a = net.blobs[name].data.astype(np.float64)
                    sums[name] = sums[name] + a if name in sums else a
        finally:
            for p, flag in flags:  # the test net's set-up must not change the train net's
                p.requires_grad = flag
        means = {k: float(v.reshape(-1)[0]) / n if v.size == 1 else v / n
                 for k, v in sums.items()}
        return means, (loss / n if self.param.test_compute_loss and n else None)

    def test_all(self) -> list[dict]:
        """Test every test net (Caffe's ``TestAll``); returns their :meth:`test` results."""
        results = []
        for i, net in enumerate(self.test_nets):
            means, loss = self._test(i)
            results.append(means)
            if self.on_test is not None:
                self.on_test({"iter": self.iter, "net": i, "outputs": means, "loss": loss,
                              "loss_weights": dict(net.model.weighted_tops)})
        return results

    # ------------------------------------------------------------ snapshots
    def _prefix(self) -> str:
        prefix = self.param.snapshot_prefix
        folder = os.path.dirname(prefix)
        found = locate(folder, self.root, os.path.isdir) if folder else None
        return os.path.join(found, os.path.basename(prefix)) if found else prefix

    def snapshot(self) -> tuple[str, str]:
        """Write ``{snapshot_prefix}_iter_{iter}.caffemodel`` (the train net's weights)
        and ``.solverstate`` (iter, the caffemodel's path, the history blobs,
        current_step), as Caffe's ``Solver::Snapshot``; returns both paths."""
        base = f"{self._prefix()}_iter_{self.iter}"
        model_path, state_path = base + ".caffemodel", base + ".solverstate"
        history = self._history()
        folder = os.path.dirname(base)
        if folder and not os.path.isdir(folder):
            raise CaffeSolverError(f"snapshot_prefix {self.param.snapshot_prefix!r}: the folder "
                                   f"{folder!r} does not exist; create it")
        self.net.save(model_path)
        write_solver_state(state_path, SolverStateData(
            self.iter, model_path, [h for kind in history for h in kind], self.current_step))
        return model_path, state_path

    def restore(self, path) -> None:
        """Continue from a ``.solverstate`` (Caffe's ``Solver::Restore``): ``iter``,
        ``current_step``, the history blobs (checked against the parameters: one per
        parameter and history kind, of its shape), and the weights of its
        ``learned_net`` (looked up as written, then beside the solverstate)."""
        state = read_solver_state(path)
        learned = state.learned_net
        if learned and not os.path.exists(learned) and not hasattr(path, "read"):
            beside = os.path.join(os.path.dirname(os.fspath(path)), os.path.basename(learned))
            if not os.path.exists(beside):
                raise CaffeFileError(f"restore: the solverstate's learned_net {learned!r} is "
                                     f"neither there nor beside the solverstate ({beside!r})")
            learned = beside
        up = self._updater
        shapes = [p.shape for p, _, _ in self._params()] * up.n_history
        if len(state.history) != len(shapes):
            raise CaffeFileError(f"restore: the solverstate holds {len(state.history)} history "
                                 f"blobs, the {up.type} solver of this net needs {len(shapes)} "
                                 "(Caffe: 'Incorrect length of history blobs'); was it written "
                                 "for another net or solver type?")
        for k, (blob, shape) in enumerate(zip(state.history, shapes)):
            if not legacy_shape_equal(blob, shape):
                raise CaffeFileError(f"restore: history blob {k} has shape "
                                     f"{tuple(blob.array.shape)}, its parameter {shape}")
        if learned:
            self.net.model.copy_from(learned)
        self.iter, self.current_step = state.iter, state.current_step
        up.history = None
        for h, blob in zip((h for kind in self._history() for h in kind), state.history):
            h[...] = get_array_module(h).asarray(blob.array.reshape(h.shape))

    def __repr__(self):
        return (f"Solver({self.param.type}, iter={self.iter}, net={self.net.model.net_name!r}, "
                f"test_nets={len(self.test_nets)})")
