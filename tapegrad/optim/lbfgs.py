"""L-BFGS (PyTorch's ``torch.optim.LBFGS``: minFunc's algorithm, with an optional
strong-Wolfe line search).

Unlike the other optimizers, L-BFGS works on one flat vector holding every
parameter, and one ``step(closure)`` runs up to ``max_iter`` iterations, each
re-evaluating the loss through the closure (several times with the line search).
Its state is global; like PyTorch it is kept under the first parameter, so
``state_dict`` / ``load_state_dict`` go through the base class.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from ..args import int_at_least, is_int
from ..device import get_array_module
from ..errors import ArgumentError, ArgumentTypeError, DeviceError, describe
from ..nn.parameter import move_array
from ..tape import enable_grad, no_grad
from ..tensor import Tensor
from .optimizer import Optimizer

__all__ = ["LBFGS"]


def _cubic_interpolate(xp, x1, f1, g1, x2, f2, g2, bounds=None):
    """Where the cubic through ``(x1, f1)`` and ``(x2, f2)`` with slopes ``g1`` and
    ``g2`` has its minimum, clamped to ``bounds`` (default: between x1 and x2); the
    middle of the bounds when the cubic has none. minFunc's ``polyinterp`` for two
    points, in PyTorch's order of operations (x2 the farther point)::

        d1 = g1 + g2 - 3 (f1 - f2) / (x1 - x2);   d2 = sqrt(d1^2 - g1 g2)
        x = x2 - (x2 - x1) (g2 + d2 - d1) / (g2 - g1 + 2 d2)
    """
    lo, hi = bounds if bounds is not None else ((x1, x2) if x1 <= x2 else (x2, x1))
    # a straight line (g1 = g2, d2 = 0) divides by zero: +-inf, clamped to the bounds,
    # silently as in PyTorch (NumPy's scalars would warn)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
        d2_square = d1**2 - g1 * g2
        if not d2_square >= 0:  # no real minimum (or NaN)
            return (lo + hi) / 2.0
        d2 = xp.sqrt(d2_square)
        if x1 <= x2:
            x = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            x = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(x, lo), hi)


class _Trial(NamedTuple):
    """A step length the line search tried: the loss ``f``, the flat gradient ``g``
    and the directional derivative ``gtd`` there."""

    t: Any
    f: Any
    g: Any
    gtd: Any


def _strong_wolfe(evaluate, xp, d, t, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9,
                  max_ls=25):
    """A step length along ``d`` that satisfies the strong Wolfe conditions
    ``f(t) <= f + c1 t gtd`` and ``|g(t).d| <= -c2 gtd`` (minFunc's ``WolfeLineSearch``
    as PyTorch runs it): grow the step until a bracket holds such a point, then
    shrink the bracket by cubic interpolation. ``evaluate(t)`` returns the loss and
    flat gradient at step ``t``; at most ``max_ls`` evaluations after the first.
    Returns the best point's loss, gradient and step, and the number of evaluations."""
    d_norm = xp.abs(d).max()

    def fails_armijo(trial):  # not a sufficient decrease
        return trial.f > f + c1 * trial.t * gtd

    def curvature_holds(trial):
        return abs(trial.gtd) <= -c2 * gtd

    def trial_at(step):
        f_new, g_new = evaluate(step)
        return _Trial(step, f_new, g_new, g_new.dot(d))

    start = _Trial(0, f, g, gtd)
    prev, new = start, trial_at(t)
    evals, ls_iter, done, bracket = 1, 0, False, None
    while ls_iter < max_ls:  # bracketing
        if fails_armijo(new) or (ls_iter > 1 and new.f >= prev.f):
            bracket = [prev, new]
            break
        if curvature_holds(new):
            bracket, done = [new], True
            break
        if new.gtd >= 0:
            bracket = [prev, new]
            break
        # extrapolate, to between 1.01 and 10 times the current step
        step = _cubic_interpolate(xp, prev.t, prev.f, prev.gtd, new.t, new.f, new.gtd,
                                  bounds=(new.t + 0.01 * (new.t - prev.t), new.t * 10))
        prev, new = new, trial_at(step)
        evals += 1
        ls_iter += 1
    if bracket is None:  # out of evaluations: the better of the start and the last try
        bracket = [start, new]

    low, high = (0, 1) if bracket[0].f <= bracket[-1].f else (1, 0)
    insuf_progress = False
    while not done and ls_iter < max_ls:  # zoom
        a, b = bracket
        if abs(b.t - a.t) * d_norm < tolerance_change:
            break
        step = _cubic_interpolate(xp, a.t, a.f, a.gtd, b.t, b.f, b.gtd)
        # a step within 10% of the bracket's ends is moved to 10% inside, if the last
        # step also was so close or this one is at (or outside) an end
        top, bottom = max(a.t, b.t), min(a.t, b.t)
        eps = 0.1 * (top - bottom)
        if min(top - step, step - bottom) < eps:
            if insuf_progress or step >= top or step <= bottom:
                step = top - eps if abs(step - top) < abs(step - bottom) else bottom + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False
        new = trial_at(step)
        evals += 1
        ls_iter += 1
        if fails_armijo(new) or new.f >= bracket[low].f:
            bracket[high] = new
            low, high = (0, 1) if bracket[0].f <= bracket[1].f else (1, 0)
        else:
            if curvature_holds(new):
                done = True
            elif new.gtd * (bracket[high].t - bracket[low].t) >= 0:
                bracket[high] = bracket[low]  # the old low becomes the high end
            bracket[low] = new
    best = bracket[low]
    return best.f, best.g, best.t, evals


def _raw(v):
    return v.array if isinstance(v, Tensor) else v


def _is_number(v) -> bool:
    """A real number: a Python/NumPy int or float, or a 0-d int/float array."""
    v = _raw(v)
    if isinstance(v, (bool, np.bool_)):
        return False
    if isinstance(v, numbers.Real):
        return True
    dtype = getattr(v, "dtype", None)
    return getattr(v, "shape", None) == () and isinstance(dtype, np.dtype) and \
        dtype.kind in "iuf"


class LBFGS(Optimizer):
    """Limited-memory BFGS (PyTorch's algorithm and state). ``step(closure)`` runs up
    to ``max_iter`` iterations; the closure recomputes the loss, calls ``backward()``
    and returns the loss. Per iteration, with ``g`` the flat gradient::

        s = t d (the last step), y = g - g_prev; if y.s > 1e-10, keep (y, s) (the
            last ``history_size`` pairs) and H_diag = y.s / y.y
        d = -H g by the two-loop recursion (H_diag as the initial Hessian inverse)
        t = lr (the first iteration ever: min(1, 1 / |g|_1) lr), or the step the
            strong-Wolfe line search finds from there; x += t d

    and it stops on ``max|g| <= tolerance_grad``, a change of the loss or a step
    below ``tolerance_change``, or ``max_iter`` / ``max_eval`` (default
    ``max_iter * 5 // 4``) closure calls. One parameter group only, all parameters
    on one device; the history holds ``2 * history_size`` flat copies of them.

    >>> opt = optim.LBFGS(model.parameters(), line_search_fn="strong_wolfe")
    >>> def closure():
    ...     opt.zero_grad()
    ...     loss = loss_fn(model(x), y)
    ...     loss.backward()
    ...     return loss
    >>> loss = opt.step(closure)
    """

    _state_counters = ("func_evals", "n_iter")
    # set together at the end of a step's first iteration; "al" by the second
    _iteration_state = ("d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad",
                        "prev_loss")
    _lazy_state = _iteration_state + ("al",)

    def __init__(self, params, lr: float = 1, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9,
                 history_size: int = 100, line_search_fn: str | None = None):
        if max_eval is None and is_int(max_iter):
            max_eval = max_iter * 5 // 4
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                                      tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change,
                                      history_size=history_size,
                                      line_search_fn=line_search_fn))

    @property
    def _params(self) -> list:
        return self.param_groups[0]["params"]

    def add_param_group(self, group: dict) -> None:
        if self.param_groups:
            raise ArgumentError("LBFGS doesn't support per-parameter options (parameter "
                                "groups): it optimizes one flat vector of all parameters; "
                                "pass them as one list (or one group)")
        super().add_param_group(group)

    def _check_group(self, g):
        if g["lr"] < 0:
            raise ArgumentError(f"LBFGS: invalid learning rate lr={g['lr']!r}: it must be "
                                ">= 0")
        for k in ("max_iter", "max_eval", "history_size"):
            int_at_least("LBFGS", k, g[k], 1)
        for k in ("tolerance_grad", "tolerance_change"):
            if g[k] < 0:
                raise ArgumentError(f"LBFGS: {k} must be >= 0, got {g[k]!r}")
        ls = g["line_search_fn"]
        if not (ls is None or (isinstance(ls, str) and ls == "strong_wolfe")):
            raise ArgumentError(f"LBFGS: line_search_fn must be None (fixed steps of lr) or "
                                f"'strong_wolfe', got {ls!r}")

    # ------------------------------------------------------------------ step
    def step(self, closure: Callable[[], Any] | None = None):
        """Up to ``max_iter`` L-BFGS iterations; returns the closure's first loss.
        ``closure`` (required) recomputes the loss, calls ``backward()`` on it and
        returns it; it is called with grad enabled."""
        if closure is None:
            raise ArgumentTypeError(
                "LBFGS.step needs a closure: a function that calls opt.zero_grad(), "
                "computes the loss, calls loss.backward() and returns the loss; call "
                "opt.step(closure)")
        if len(self.param_groups) != 1:
            raise ArgumentError(f"LBFGS works on exactly one parameter group, this one has "
                                f"{len(self.param_groups)}: make one LBFGS per group")
        group = self.param_groups[0]
        self._check_group(group)
        dev = self._params[0].device
        if any(p.device != dev for p in self._params):
            raise DeviceError("LBFGS: all parameters must be on one device, got "
                              f"{sorted({str(p.device) for p in self._params})}; move the "
                              "model to one device before making the optimizer")
        with no_grad(), dev.use():
            return self._minimize(closure, group)

    def _minimize(self, closure, group):
        params = self._params
        xp = get_array_module(params[0])
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        state = self.state.setdefault(params[0], {})
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss = _call(closure)
        loss = _loss_value(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad(xp)
        if xp.abs(flat_grad).max() <= tolerance_grad:
            return orig_loss

        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        H_diag = state.get("H_diag")
        prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro, H_diag = [], [], [], 1
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = y.dot(s)
                if ys > 1e-10:  # keep the pair only where the curvature is positive
                    while len(old_dirs) >= group["history_size"]:
                        del old_dirs[0], old_stps[0], ro[0]
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    H_diag = ys / y.dot(y)
                d = self._two_loop(xp, state, flat_grad, old_dirs, old_stps, ro, H_diag,
                                   group["history_size"])
            if prev_flat_grad is None:
                prev_flat_grad = flat_grad.copy()
            else:
                prev_flat_grad[...] = flat_grad
            prev_loss = loss

            t = min(1.0, 1.0 / xp.abs(flat_grad).sum()) * lr if state["n_iter"] == 1 else lr
            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:  # not a descent direction (any more)
                break

            ls_func_evals = 0
            if group["line_search_fn"] is not None:
                x_init = [p.array.copy() for p in params]
                evaluate = partial(self._directional_evaluate, closure, x_init, d, xp)
                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    evaluate, xp, d, t, loss, flat_grad, gtd, max_ls=max_eval - current_evals)
                self._add_grad(t, d)
                opt_cond = xp.abs(flat_grad).max() <= tolerance_grad
            else:
                self._add_grad(t, d)
                opt_cond = False
                if n_iter != max_iter:  # the last step's loss is left to the next step()
                    loss = _loss_value(_call(closure))
                    flat_grad = self._gather_flat_grad(xp)
                    opt_cond = xp.abs(flat_grad).max() <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if xp.abs(d * t).max() <= tolerance_change or abs(loss - prev_loss) < tolerance_change:
                break  # no progress

        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=H_diag,
                     prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss

    @staticmethod
    def _two_loop(xp, state, flat_grad, old_dirs, old_stps, ro, H_diag, history_size):
        """``-H g``: the L-BFGS inverse Hessian (from the kept pairs and ``H_diag``)
        times the gradient, by the two-loop recursion in one buffer. The first loop's
        coefficients go to ``state["al"]`` (PyTorch keeps them there too)."""
        num_old = len(old_dirs)
        if "al" not in state:
            state["al"] = [None] * history_size
        al = state["al"]
        if len(al) < num_old:  # history_size was raised since: make room
            al += [None] * (num_old - len(al))
        q = -flat_grad
        tmp = xp.empty_like(q)
        for i in range(num_old - 1, -1, -1):
            al[i] = old_stps[i].dot(q) * ro[i]
            q -= xp.multiply(old_dirs[i], al[i], out=tmp)
        r = q * H_diag
        for i in range(num_old):
            be_i = old_dirs[i].dot(r) * ro[i]
            r += xp.multiply(old_stps[i], al[i] - be_i, out=tmp)
        return r

    def _gather_flat_grad(self, xp):
        return xp.concatenate([
            p.grad.array.reshape(-1) if p.grad is not None
            else xp.zeros(p.array.size, p.array.dtype) for p in self._params])

    def _add_grad(self, step_size, direction):
        """``x += step_size * direction``, ``direction`` flat over all parameters."""
        offset = 0
        for p in self._params:
            n = p.array.size
            # (n,) -> p's shape
            p.array += direction[offset:offset + n].reshape(p.array.shape) * step_size
            p._bump_version()
            offset += n

    def _set_param(self, arrays):
        for p, a in zip(self._params, arrays):
            p.array[...] = a
            p._bump_version()

    def _directional_evaluate(self, closure, x, d, xp, t):
        """The loss and flat gradient at ``x + t d``; the parameters are left at ``x``."""
        self._add_grad(t, d)
        loss = _loss_value(_call(closure))
        flat_grad = self._gather_flat_grad(xp)
        self._set_param(x)
        return loss, flat_grad

    # ----------------------------------------------------------------- state
    def _check_param_state(self, s, p, where):
        if not isinstance(s, dict):
            return [f"{where}: state is a {type(s).__name__}, not a dict"]
        if p is not self._params[0]:
            return [f"{where}: LBFGS keeps all its state under the first parameter, this "
                    f"one has {sorted(map(str, s))}"] if s else []
        known = self._state_counters + self._lazy_state
        problems = [f"{where}: unexpected state entry {k!r} (LBFGS keeps "
                    f"{', '.join(known)})" for k in s if k not in known]
        if not s:
            return problems
        problems += [f"{where}: missing state entry {k!r}" for k in self._state_counters
                     if k not in s]
        counters = {k: _as_int(s.get(k, 0)) for k in self._state_counters}
        problems += [f"{where}: {k!r} must be an int >= 0, got {s[k]!r}"
                     for k, v in counters.items() if v is None or v < 0]
        if any(k in s for k in self._iteration_state) or (counters["n_iter"] or 0) > 0:
            problems += [f"{where}: missing state entry {k!r} (a state after an iteration "
                         f"has all of {', '.join(self._iteration_state)})"
                         for k in self._iteration_state if k not in s]
        n = sum(q.array.size for q in self._params)
        for k in ("d", "prev_flat_grad"):
            if k in s and not _is_flat(s[k], n):
                problems.append(f"{where}: {k!r} must be a float vector of the {n} "
                                f"parameter values, got {describe(_raw(s[k]))}")
        lengths = {}
        for k in ("old_dirs", "old_stps", "ro", "al"):
            if k not in s:
                continue
            v = s[k]
            if not isinstance(v, (list, tuple)):
                problems.append(f"{where}: {k!r} must be a list, got {type(v).__name__}")
                continue
            lengths[k] = len(v)
            if k in ("old_dirs", "old_stps"):
                if not all(_is_flat(a, n) for a in v):
                    problems.append(f"{where}: {k!r} must hold float vectors of the {n} "
                                    "parameter values")
            elif not all(_is_number(a) or (k == "al" and a is None) for a in v):
                problems.append(f"{where}: {k!r} must hold numbers"
                                + (" or None" if k == "al" else ""))
        pairs = {k: lengths[k] for k in ("old_dirs", "old_stps", "ro") if k in lengths}
        if len(set(pairs.values())) > 1:
            problems.append(f"{where}: 'old_dirs', 'old_stps' and 'ro' must have one length, "
                            f"got {pairs}")
        for k in ("t", "H_diag", "prev_loss"):
            if k in s and not _is_number(s[k]):
                problems.append(f"{where}: {k!r} must be a number, got {s[k]!r}")
        return problems

    def _cast_state(self, key, value, p):
        if key in self._state_counters:
            return int(_raw(value))
        return _cast_value(value, p)


def _as_int(v):
    """``v`` as an int if it is one (a Python/NumPy int or a 0-d int array), else None."""
    v = _raw(v)
    if getattr(v, "shape", None) == () and getattr(v, "dtype", None) is not None and \
            v.dtype.kind in "iu":
        return int(v)
    return int(v) if is_int(v) else None


def _is_flat(v, n) -> bool:
    v = _raw(v)
    dtype = getattr(v, "dtype", None)
    return isinstance(dtype, np.dtype) and dtype.kind == "f" and \
        tuple(getattr(v, "shape", ())) == (n,)


def _cast_value(v, p):
    """A state value copied onto ``p``'s device, floats in ``p``'s dtype; lists entry
    by entry, Python numbers and None as they are."""
    v = _raw(v)
    if isinstance(v, (list, tuple)):
        return [_cast_value(a, p) for a in v]
    if not hasattr(v, "dtype"):
        return v
    if isinstance(v, np.generic):
        v = np.asarray(v)
    arr = move_array(v, p.device, p.array.dtype if v.dtype.kind == "f" else None)
    arr = arr.copy() if arr is v else arr
    return arr[()] if arr.ndim == 0 and type(arr) is np.ndarray else arr


def _call(closure):
    with enable_grad():
        return closure()


def _loss_value(loss) -> float:
    if isinstance(loss, Tensor) and loss.numel() == 1 or \
            isinstance(loss, numbers.Real) and not isinstance(loss, bool):
        return float(loss)
    raise ArgumentTypeError(f"LBFGS: the closure must return the loss (a one-element Tensor "
                            f"or a number), got {describe(_raw(loss))}; end it with "
                            "`return loss`")
