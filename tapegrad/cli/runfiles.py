"""The files of a run folder: atomic writes, Ctrl-C held during them, stale temporaries.

Every artefact (``model.npz`` through :func:`tapegrad.save`, ``metrics.csv``
and ``curves.png`` through :func:`write_atomic`) is written to
``<name>.tmp<pid>`` in the same folder, flushed to disk and renamed over the
old file, so a kill at any moment leaves either the old or the new file.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading

from ..errors import TapegradError

ARTEFACTS = ("model.npz", "metrics.csv", "curves.png", "debug_info.csv", "debug_info.png")
_TEMP = re.compile(r"^(?P<name>.+)\.tmp(?P<pid>\d+)$")


class RunFolderError(TapegradError, OSError):
    """The run folder (``--out``) cannot be created or written."""


def _cannot(what: str, path: str, exc: OSError) -> RunFolderError:
    why = exc.strerror or type(exc).__name__
    return RunFolderError(f"cannot {what} {path!r}: {why}; choose a writable folder with "
                          "--out DIR (and check the free disk space)")


def write_atomic(path: str, write) -> None:
    """``write(binary file)`` into ``path`` atomically and durably (temp file,
    fsync, ``os.replace``, fsync of the folder). RunFolderError on failure."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        sync_folder(os.path.dirname(path) or ".")
    except OSError as exc:
        raise _cannot("write", path, exc) from exc
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def sync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # ours, from a process that had our pid before: we write nothing yet
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def prepare_run_folder(out: str) -> list[str]:
    """Create ``out`` if needed, check that it is writable, and delete the
    ``<artefact>.tmp<pid>`` files that killed runs left there (their writer
    is gone). Returns the deleted names."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise RunFolderError(f"--out {out!r} is a file, not a folder; choose a folder")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise _cannot("create the run folder", out, exc) from exc
    removed = []
    try:
        probe = f"{os.path.join(out, ARTEFACTS[0])}.tmp{os.getpid()}"
        with open(probe, "wb"):
            pass
        os.remove(probe)
        for name in os.listdir(out):
            m = _TEMP.match(name)
            if m and m["name"] in ARTEFACTS and not _alive(int(m["pid"])):
                os.remove(os.path.join(out, name))
                removed.append(name)
    except OSError as exc:
        raise _cannot("write into the run folder", out, exc) from exc
    return removed


def interrupt_once(signum=None, frame=None):
    """SIGINT handler of the ``tapegrad`` process: the first Ctrl-C raises
    KeyboardInterrupt, and from then on SIGINT is ignored, so a second one
    cannot cut the shutdown short (mid-message, or while the interpreter waits
    for BLAS threads with the default action restored, which killed the process
    by signal instead of exit status 130)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigint_held():
    """Hold Ctrl-C while the block runs (e.g. writes a checkpoint and its
    metrics): a SIGINT arriving inside, or several, is acted on once the block
    has finished, so the files are complete and consistent with each other."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and previous is not signal.SIG_IGN:
        if callable(previous):
            previous(signal.SIGINT, None)  # the default one raises KeyboardInterrupt
        else:
            raise KeyboardInterrupt
