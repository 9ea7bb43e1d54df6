"""SyncBatchNorm: batch norm with statistics over the global batch of all ranks.

Forward: each rank computes its count, mean and sum of squared deviations per
channel (two-pass, so a large mean with a tiny spread keeps its digits), the
ranks all-gather those ``2C + 1`` numbers, and every rank combines them in the
same order (Chan's parallel formula, in float64), so all ranks normalise with
bitwise the same statistics and update the running ones identically (the
unbiased variance over the *global* count). Per-rank batch sizes may differ,
down to zero. Backward all-reduces the two per-channel sums the input gradient
needs, ``sum(dy)`` and ``sum(dy * x_hat)``; weight and bias get this rank's
sums, which DistributedDataParallel then averages like any gradient. The
result equals BatchNorm on the concatenated batch.
"""

from __future__ import annotations

from ..dtypes import downcast, upcast
from ..errors import ShapeError
from ..ops.normalization import _dims, _ema, _row, _rowdot, _rowsum
from ..tape import Function
from ..utils.checkpoint import is_recomputing
from .normalization import _BatchNorm

__all__ = ["SyncBatchNorm"]


class SyncBatchNormFunction(Function):
    """Training-mode batch norm over the global batch of ``group`` (a tape entry
    whose forward and vjp each run one collective)."""

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean=None, running_var=None, momentum=0.1,
                eps=1e-5, group=None):
        xp = ctx.xp
        n, c, ln = _dims(x.shape)
        m = n * ln
        x_in, x = x, upcast(x)
        x2 = x.reshape(n, c * ln)  # (N, C, *) -> (N, C*L)
        if m > 0:
            mean_l = _rowsum(xp, x2.reshape(n, c, ln)).sum(axis=0) / m  # (N, C) -> (C,)
            xc = x2 - _row(xp, mean_l, ln)  # (N, C*L): this rank's deviations
            xc3 = xc.reshape(n, c, ln)
            m2_l = _rowdot(xp, xc3, xc3).sum(axis=0)  # (C,)
        else:  # an empty shard still takes part in the collectives
            mean_l = m2_l = xp.zeros(c, x.dtype)
            xc = x2.copy()
        # (2C + 1,) per rank: count, mean, sum of squared deviations
        mine = xp.concatenate([xp.asarray([m], xp.float64), mean_l.astype(xp.float64),
                               m2_l.astype(xp.float64)])
        every = group.allgather(mine, f"SyncBatchNorm({c}) statistics")  # (W, 2C + 1)
        counts, means, m2s = every[:, 0], every[:, 1:c + 1], every[:, c + 1:]
        total = float(counts.sum())
        if total <= 1:
            raise ShapeError(f"SyncBatchNorm: expected more than one value per channel over "
                             f"all {group.size} ranks when training, got {int(total)} (this "
                             f"rank's input {tuple(x_in.shape)}); use larger batches")
        mean = (counts[:, None] * means).sum(axis=0) / total  # (C,) float64
        m2 = m2s.sum(axis=0) + (counts[:, None] * (means - mean) ** 2).sum(axis=0)
        var = m2 / total  # biased: normalises
        if running_mean is not None:
            _ema(running_mean, mean, momentum)
            _ema(running_var, m2 / (total - 1), momentum)  # unbiased over the global count
        # recentre from the local mean by the (small) difference: no digits lost
        xc -= _row(xp, (mean - mean_l.astype(xp.float64)).astype(x.dtype), ln)
        invstd = (1 / xp.sqrt(var + eps)).astype(x.dtype)  # (C,)
        scale = invstd if weight is None else invstd * weight.astype(x.dtype, copy=False)
        xc *= _row(xp, scale, ln)
        if bias is not None:
            xc += _row(xp, bias.astype(x.dtype, copy=False), ln)
        ctx.shape, ctx.total, ctx.group = x.shape, total, group
        nx, nw, _ = ctx.needs_input_grad
        ctx.save_for_backward(x_in if (nx or nw) else None, mean.astype(x.dtype), invstd,
                              scale if nx else None)
        return downcast(xc.reshape(x.shape), x_in.dtype)  # (N, C*L) -> (N, C, *)

    @staticmethod
    def backward(ctx, g):
        xp = ctx.xp
        x, mean, invstd, scale = ctx.saved_tensors
        nx, nw, nb = ctx.needs_input_grad
        n, c, ln = _dims(ctx.shape)
        g2 = upcast(g).reshape(n, c * ln)  # (N, C, *) -> (N, C*L)
        g3 = g2.reshape(n, c, ln)  # (N, C*L) -> (N, C, L)
        gb = _rowsum(xp, g3).sum(axis=0)  # (C,) this rank's sum(dy)
        gw = xhat = None
        if x is not None:
            xhat = upcast(x).reshape(n, c * ln) - _row(xp, mean, ln)  # becomes dx
            xhat *= _row(xp, invstd, ln)
            gw = _rowdot(xp, g3, xhat.reshape(n, c, ln)).sum(axis=0)  # sum(dy * x_hat)
        gx = None
        if nx:
            sums = xp.concatenate([gb, gw])
            ctx.group.allreduce(sums, "sum", f"SyncBatchNorm({c}) gradient sums")
            k = ctx.total
            # dx = scale * (dy - sum_all(dy)/M - x_hat * sum_all(dy * x_hat)/M)
            xhat *= _row(xp, sums[c:] / k, ln)
            xhat += _row(xp, sums[:c] / k, ln)
            xp.subtract(g2, xhat, out=xhat)
            xhat *= _row(xp, scale, ln)
            gx = xhat.reshape(ctx.shape)  # (N, C*L) -> (N, C, *)
        return gx, (gw if nw else None), (gb if nb else None)


class SyncBatchNorm(_BatchNorm):
    """Batch norm whose training statistics cover the batches of all ranks
    (``torch.nn.SyncBatchNorm``); any ``(N, C, *)`` input. Outside training, or
    with one rank, it is plain batch norm.

    >>> model = nn.SyncBatchNorm.convert_sync_batchnorm(model)   # every BatchNorm*d
    """

    _ndims = tuple(range(2, 9))

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, device=None,
                 dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype)
        self.process_group = process_group

    def _group(self):
        from ..distributed import world

        if self.process_group is not None:
            return self.process_group
        return world.default_group() if world.is_initialized() else None

    def forward(self, x):
        group = self._group() if self.training else None
        if group is None or group.size == 1:
            return super().forward(x)
        if x.ndim < 2 or x.shape[1] != self.num_features:
            raise ShapeError(f"SyncBatchNorm({self.num_features}): expected input of shape "
                             f"(N, {self.num_features}, *), got {tuple(x.shape)}")
        momentum = 0.0 if self.momentum is None else self.momentum
        # a checkpoint's recomputation in backward sees the same batch again: no second
        # update (as BatchNorm*d; the statistics' collective still runs on every rank)
        track = self.track_running_stats and not is_recomputing()
        if track:
            self.num_batches_tracked.array[...] += 1
            self.num_batches_tracked._bump_version()
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / int(self.num_batches_tracked.array)
        return SyncBatchNormFunction.apply(
            x, self.weight, self.bias, running_mean=self.running_mean if track else None,
            running_var=self.running_var if track else None, momentum=float(momentum),
            eps=float(self.eps), group=group)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """``module`` with every BatchNorm1d/2d replaced by a SyncBatchNorm that
        keeps its parameters (the same objects), buffers and train/eval mode.

        >>> model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        """
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats, process_group)
            if module.affine:
                out.weight, out.bias = module.weight, module.bias
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                setattr(out, name, getattr(module, name))
            out.training = module.training
        for name, child in module.named_children():
            setattr(out, name, cls.convert_sync_batchnorm(child, process_group))
        return out
