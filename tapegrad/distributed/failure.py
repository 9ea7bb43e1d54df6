"""One rank's failure ends the whole job within seconds, never a hang.

An uncaught exception on one rank would leave the others waiting forever in
their next collective (and Open MPI's ``MPI_Finalize`` at exit waits for them
too). :func:`install` replaces ``sys.excepthook`` while a multi-rank group is
up: it prints the traceback and ``rank N: <error>`` on stderr, then calls
``MPI_Abort``, which makes the launcher kill every rank.
"""

from __future__ import annotations

import sys
import traceback

__all__ = ["install", "uninstall", "abort_job"]

_previous = None
_group = None


def abort_job(group, message: str, status: int = 1) -> None:
    """Print ``rank N: message`` and end every rank of ``group``'s job."""
    sys.stderr.write(f"rank {group.rank}: {message}\n")
    _abort(group, status)


def _abort(group, status):
    try:
        sys.stdout.flush()
        sys.stderr.write(f"rank {group.rank}: aborting all {group.size} ranks\n")
        sys.stderr.flush()
    finally:
        group.abort(status)


def _hook(exc_type, exc, tb):
    group = _group
    if group is None or group.size == 1:
        (_previous or sys.__excepthook__)(exc_type, exc, tb)
        return
    lines = "".join(traceback.format_exception(exc_type, exc, tb))
    sys.stderr.write("".join(f"rank {group.rank}: {line}\n" for line in lines.splitlines()))
    _abort(group, 130 if issubclass(exc_type, KeyboardInterrupt) else 1)


def install(group) -> None:
    global _previous, _group
    if _group is None:
        _previous = sys.excepthook
        sys.excepthook = _hook
    _group = group


def uninstall() -> None:
    global _previous, _group
    if _group is not None and sys.excepthook is _hook:
        sys.excepthook = _previous
    _group = _previous = None
