"""tapegrad's exceptions.

Every error raised for bad user input derives from :class:`TapegradError`, so
``except tapegrad.errors.TapegradError`` catches all of them. Each also derives
from the builtin exception a Python user would expect (``ValueError`` for a bad
shape, ``RuntimeError`` for a graph misuse, ``TypeError`` for a bad dtype), so
existing ``except ValueError`` code keeps working.
"""

from __future__ import annotations


class TapegradError(Exception):
    """Base class of every tapegrad error."""


class ShapeError(TapegradError, ValueError):
    """Input shapes do not fit the op (wrong rank, mismatched channels, ...)."""


class DTypeError(TapegradError, TypeError):
    """An input has a dtype the op cannot take (e.g. grad on an int tensor)."""


class DeviceError(TapegradError, RuntimeError):
    """A device is unavailable, or an op got tensors from two devices."""


class GraphError(TapegradError, RuntimeError):
    """The tape cannot do what was asked: a second backward through freed
    buffers, a saved tensor modified in place, a non-scalar root without a
    gradient, double backward through an op that does not support it."""


class ArgumentError(TapegradError, ValueError):
    """An option has a value the op does not accept."""


class ArgumentTypeError(TapegradError, TypeError):
    """An argument has the wrong type (a dict where a Tensor goes, ...)."""


class ArgumentKeyError(TapegradError, KeyError):
    """A name is not a valid key (a module attribute name with a dot, ...)."""

    def __str__(self):  # KeyError would show the message's repr
        return str(self.args[0]) if self.args else ""


class OutOfRangeError(TapegradError, IndexError):
    """An index is out of range (of a Sequential, a ModuleList, ...)."""


class NonFiniteError(TapegradError, RuntimeError):
    """A value that must be finite is not (a gradient norm, a loss)."""


class AnomalyError(NonFiniteError):
    """Anomaly mode (``tapegrad.autograd.detect_anomaly``) found a NaN/inf: an op's
    output in forward (with ``check_forward=True``) or a vjp's gradient in backward."""


class StateDictError(TapegradError, RuntimeError):
    """``load_state_dict`` found missing/unexpected keys or mismatched shapes."""


class SerializationError(TapegradError, ValueError):
    """A file is not a readable tapegrad checkpoint, or an object cannot be saved."""


class MissingDependencyError(TapegradError, ImportError):
    """An optional package a feature needs is not installed (the message names it)."""


def describe(*arrays) -> str:
    """``"(2, 3) float32, (3,) float64"`` for error messages."""
    parts = []
    for a in arrays:
        shape = getattr(a, "shape", None)
        dtype = getattr(a, "dtype", None)
        if shape is None:
            parts.append(type(a).__name__)
        else:
            parts.append(f"{tuple(shape)} {dtype}")
    return ", ".join(parts)
