"""The optional ``onnx`` dependency, and the errors of ONNX import."""

from __future__ import annotations

from ..errors import TapegradError

_INSTALL = "pip install 'tapegrad[onnx]'"


class OnnxNotInstalledError(TapegradError, ImportError):
    """The ``onnx`` package is missing."""


class UnsupportedOnnxError(TapegradError, NotImplementedError):
    """A graph uses an operator, attribute value or dtype tapegrad does not import."""


def require_onnx(what: str) -> None:
    """Raise :class:`OnnxNotInstalledError` (one line: what to install) if ``onnx``
    cannot be imported.

    >>> require_onnx("tapegrad.onnx.load")
    """
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise OnnxNotInstalledError(f"{what} needs the onnx package: {_INSTALL}") from None
