"""Collectives on Tensors, with PyTorch's ``torch.distributed`` signatures.

Each one changes its Tensor arguments in place (bumping their version, so a
tape entry that saved the old values refuses to run backward), as PyTorch's do;
none is recorded on the tape. ``async_op=True`` returns a :class:`Work` to
``wait()`` on.
"""

from __future__ import annotations

from ..errors import ArgumentError, ArgumentTypeError, DTypeError
from ..tensor import Tensor
from .world import resolve_group

__all__ = ["ReduceOp", "Work", "all_reduce", "broadcast", "all_gather", "barrier",
           "all_gather_object", "broadcast_object_list"]


class ReduceOp:
    """PyTorch's reduction names (plain strings work too: ``"sum"``, ``"mean"``...)."""

    SUM = "sum"
    AVG = "mean"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"


_OPS = {"sum": "sum", "mean": "mean", "avg": "mean", "product": "product", "prod": "product",
        "min": "min", "max": "max"}


class Work:
    """An asynchronous collective: ``wait()`` finishes it, ``is_completed()`` polls."""

    def __init__(self, request, finish=None):
        self._request, self._finish = request, finish

    def is_completed(self) -> bool:
        if self._request is None:
            return True
        if not self._request.test():
            return False
        self._end()
        return True

    def wait(self) -> bool:
        if self._request is not None:
            self._request.wait()
            self._end()
        return True

    def _end(self):
        self._request = None
        if self._finish is not None:
            self._finish()
            self._finish = None


def _tensor(who, t):
    if not isinstance(t, Tensor):
        raise ArgumentTypeError(f"{who}: expected a Tensor, got {type(t).__name__}")
    return t


def all_reduce(tensor: Tensor, op="sum", group=None, async_op: bool = False):
    """Reduce ``tensor`` over all ranks, in place: ``"sum"``, ``"mean"``, ``"max"``,
    ``"min"``, ``"product"`` (or :class:`ReduceOp`).

    >>> dist.all_reduce(t, op="mean")      # every rank now holds the average
    """
    _tensor("all_reduce", tensor)
    name = _OPS.get(str(op).lower())
    if name is None:
        raise ArgumentError(f"all_reduce: unknown op {op!r}; use sum, mean, max, min or "
                            "product")
    if name == "mean" and tensor.dtype.kind != "f":
        raise DTypeError(f"all_reduce: op mean needs a floating-point tensor, got "
                         f"{tensor.dtype}; reduce with sum and divide")
    g = resolve_group(group)
    data = tensor.array
    req = g.iallreduce(data, "sum" if name == "mean" else name,
                       f"all_reduce({name}) of {tuple(data.shape)} {data.dtype}")

    def finish():
        if name == "mean" and g.size > 1:
            data[...] /= g.size
        tensor._bump_version()
    work = Work(req, finish)
    if async_op:
        return work
    work.wait()
    return None


def broadcast(tensor: Tensor, src: int = 0, group=None, async_op: bool = False):
    """Rank ``src``'s values into ``tensor`` on every rank, in place.

    >>> dist.broadcast(weights, src=0)
    """
    _tensor("broadcast", tensor)
    g = resolve_group(group)
    if not 0 <= src < g.size:
        raise ArgumentError(f"broadcast: src={src} is not a rank of the {g.size}-rank group")
    g.broadcast(tensor.array, src, f"broadcast from rank {src} of {tuple(tensor.shape)} "
                                   f"{tensor.dtype}")
    tensor._bump_version()
    return Work(None) if async_op else None


def all_gather(tensor_list: list, tensor: Tensor, group=None, async_op: bool = False):
    """Every rank's ``tensor`` into ``tensor_list`` (one Tensor per rank, in rank
    order, each of ``tensor``'s shape), in place.

    >>> parts = [tg.zeros(3) for _ in range(dist.get_world_size())]
    >>> dist.all_gather(parts, t)
    """
    _tensor("all_gather", tensor)
    g = resolve_group(group)
    if len(tensor_list) != g.size:
        raise ArgumentError(f"all_gather: tensor_list has {len(tensor_list)} tensors for a "
                            f"{g.size}-rank group; pass one per rank")
    for r, out in enumerate(tensor_list):  # checked before anything is sent or written
        _tensor("all_gather", out)
        if tuple(out.shape) != tuple(tensor.shape):
            raise ArgumentError(f"all_gather: tensor_list[{r}] has shape {tuple(out.shape)}, "
                                f"the input {tuple(tensor.shape)}; they must match")
        if out.dtype != tensor.dtype:  # PyTorch refuses too (ValueError); never cast
            raise ArgumentError(f"all_gather: tensor_list[{r}] is {out.dtype}, the input "
                                f"{tensor.dtype}; make them one dtype (e.g. .to({tensor.dtype}))")
    gathered = g.allgather(tensor.array, f"all_gather of {tuple(tensor.shape)} {tensor.dtype}")
    for r, out in enumerate(tensor_list):
        out.array[...] = gathered[r]
        out._bump_version()
    return Work(None) if async_op else None


def barrier(group=None) -> None:
    """Wait until every rank has reached the barrier."""
    resolve_group(group).barrier()


def all_gather_object(object_list: list, obj, group=None) -> None:
    """Every rank's picklable ``obj`` into ``object_list`` (length world size)."""
    g = resolve_group(group)
    objs = g.allgather_object(obj)
    if len(object_list) != g.size:
        raise ArgumentError(f"all_gather_object: object_list has {len(object_list)} slots "
                            f"for a {g.size}-rank group")
    object_list[:] = objs


def broadcast_object_list(object_list: list, src: int = 0, group=None) -> None:
    """Rank ``src``'s ``object_list`` items into every rank's list, in place."""
    g = resolve_group(group)
    object_list[:] = g.broadcast_object(list(object_list), src)
