"""Caffe's solver files: the solver ``.prototxt`` (``read_solver``, upgraded as Caffe's
``UpgradeSolverAsNeeded``) and the binary ``.solverstate`` (``read_solver_state``,
bounded as the caffemodel reader; ``write_solver_state``, which Caffe's
``Solver::Restore`` reads)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ...device import to_host
from ...errors import ArgumentTypeError
from . import wire
from .files import MAX_BYTES, CaffeFileError, _blob, _blob_bytes, _read_bytes
from .schema import messages
from .updates import SOLVER_TYPES, CaffeSolverError

__all__ = ["read_solver", "solver_source", "SolverStateData", "read_solver_state",
           "write_solver_state"]


# ---------------------------------------------------------------------- the file


def solver_source(source, max_bytes):
    """(SolverParameter, the file's path or None) of a path, text, file object or
    message, as read and upgraded by Caffe's ``ReadSolverParamsFromTextFileOrDie``."""
    from google.protobuf import text_format

    sp, path = messages().SolverParameter(), None
    if hasattr(source, "DESCRIPTOR"):
        if source.DESCRIPTOR.name != "SolverParameter":
            raise ArgumentTypeError(f"read_solver: expected a SolverParameter, got a "
                                    f"{source.DESCRIPTOR.name}")
        sp.MergeFromString(source.SerializeToString())
        where = "the SolverParameter"
    else:
        if isinstance(source, str) and not os.path.exists(source) and \
                any(c in source for c in "\n:{"):
            text, where = source, "the solver text"
        else:
            data, path = _read_bytes(source, max_bytes, "solver", "read_solver")
            where = repr(path)
            path = None if hasattr(source, "read") else path
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CaffeFileError(f"read_solver: {where} is not UTF-8 text ({e})") from None
        try:
            text_format.Parse(text, sp)
        except text_format.ParseError as e:
            raise CaffeFileError(f"read_solver: {where} is not a valid Caffe solver prototxt: "
                                 f"{e}") from None
    _upgrade(sp, where)
    if path is not None:  # Caffe's UpgradeSnapshotPrefixProperty
        if not sp.HasField("snapshot_prefix"):
            sp.snapshot_prefix = os.path.splitext(path)[0]
        elif os.path.isdir(sp.snapshot_prefix):
            stem = os.path.splitext(os.path.basename(path))[0]
            sp.snapshot_prefix = os.path.join(sp.snapshot_prefix, stem)
    return sp, path


def _upgrade(sp, where):
    """Caffe's ``UpgradeSolverAsNeeded``: the deprecated enum ``solver_type`` becomes
    the string ``type``; an unknown ``type`` is refused here."""
    if sp.HasField("solver_type"):
        if sp.HasField("type"):
            raise CaffeFileError(f"read_solver: {where} sets both the deprecated solver_type "
                                 f"and type (Caffe refuses this too); keep only "
                                 f"type: \"{sp.type}\"")
        sp.type = SOLVER_TYPES[sp.solver_type]
        sp.ClearField("solver_type")
    if sp.type not in SOLVER_TYPES:
        near = [t for t in SOLVER_TYPES if t.lower() == sp.type.lower()]
        raise CaffeSolverError(f"{where}: type {sp.type!r} is not a Caffe solver type; "
                               f"Caffe's are {', '.join(SOLVER_TYPES)}"
                               + (f" (spelled {near[0]!r})" if near else ""))


def read_solver(source, max_bytes: int = MAX_BYTES):
    """A ``SolverParameter`` from a solver ``.prototxt`` path, its text, a text file
    object or a ``SolverParameter`` message (copied), upgraded as Caffe does: the
    deprecated ``solver_type: ADAM`` becomes ``type: "Adam"``; read from a path, a
    missing ``snapshot_prefix`` becomes the path without its extension and a
    ``snapshot_prefix`` naming a folder gets the file's stem appended. A malformed
    file raises :class:`CaffeFileError`, an unknown ``type`` :class:`CaffeSolverError`."""
    return solver_source(source, max_bytes)[0]


# ------------------------------------------------------------------ solverstate


@dataclass
class SolverStateData:
    """A ``.solverstate``: ``iter``, ``learned_net`` (the caffemodel's path as written),
    ``history`` in Caffe's ``history_`` order (arrays to write; read, each is a
    ``BlobData``: ``.array`` and whether its shape is the legacy 4-D one) and
    ``current_step``."""

    iter: int = 0
    learned_net: str = ""
    history: list = field(default_factory=list)
    current_step: int = 0


def read_solver_state(source, max_bytes: int = MAX_BYTES) -> SolverStateData:
    """A binary ``.solverstate`` (Caffe's ``SolverState``), read within ``max_bytes``
    by the caffemodel reader's wire walker; a malformed file is a :class:`CaffeFileError`."""
    if not hasattr(source, "read") and os.fspath(source).endswith(".h5"):
        raise CaffeFileError(f"restore: {os.fspath(source)!r} is Caffe's HDF5 solver state, "
                             "which tapegrad does not read; snapshot with snapshot_format: "
                             "BINARYPROTO")
    buf, where = _read_bytes(source, max_bytes, "solverstate", "restore")
    out = SolverStateData()
    try:
        for number, wt, value in wire.fields(buf, 0, len(buf)):
            if number in (1, 4) and wt == wire.VARINT:
                value = wire.signed64(value)
                if value < 0:
                    raise wire.Malformed(f"field {number} is negative ({value})")
                if number == 1:
                    out.iter = value
                else:
                    out.current_step = value
            elif number == 2 and wt == wire.LENGTH:
                try:
                    out.learned_net = bytes(buf[value[0]:value[1]]).decode("utf-8")
                except UnicodeDecodeError:
                    raise wire.Malformed("learned_net is not UTF-8") from None
            elif number == 3 and wt == wire.LENGTH:
                out.history.append(_blob(buf, *value, f"history blob {len(out.history)}"))
    except wire.Malformed as e:
        raise CaffeFileError(f"restore: {where!r} is not a readable .solverstate: {e}") \
            from None
    return out


def write_solver_state(path, state: SolverStateData) -> None:
    """Write a binary ``.solverstate`` Caffe's ``Solver::Restore`` reads (history blobs
    with ``shape`` and packed float ``data``)."""
    head = messages().SolverState(iter=state.iter, learned_net=state.learned_net,
                                  current_step=state.current_step).SerializeToString()
    with open(os.fspath(path), "wb") as f:
        f.write(head)
        for h in state.history:
            f.write(wire.field_bytes(3, _blob_bytes(to_host(getattr(h, "array", h)))))
