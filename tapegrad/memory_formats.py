"""PyTorch's memory formats (``torch.contiguous_format``, ``channels_last``, ...).

tapegrad keeps every tensor in PyTorch's default order (``contiguous_format``: NCHW for
images). The names exist so that a script naming them gets an answer, not an
``AttributeError``: ``contiguous_format`` and ``preserve_format`` are what tapegrad
does anyway; ``channels_last`` and ``channels_last_3d`` are refused with a named error,
since tapegrad cannot give a channels-last tensor's strides and ``is_contiguous``
answers (in PyTorch the format changes the speed of convolutions, never a value: the
fix is to remove the ``memory_format=`` argument)."""

from __future__ import annotations

from .errors import ArgumentError, ArgumentTypeError

__all__ = ["memory_format", "contiguous_format", "preserve_format", "channels_last",
           "channels_last_3d", "check_memory_format"]


class memory_format:  # noqa: N801 - PyTorch's name (torch.memory_format)
    """A memory format: one of the module's four instances."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"tapegrad.{self.name}"

    def __reduce__(self):  # pickles as the same instance
        return self.name


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")


def check_memory_format(who: str, fmt) -> None:
    """Accept None, ``contiguous_format`` and ``preserve_format`` (tapegrad's only
    layout); refuse the channels-last formats and anything else, naming ``who``."""
    if fmt is None or fmt is contiguous_format or fmt is preserve_format:
        return
    if fmt is channels_last or fmt is channels_last_3d:
        raise ArgumentError(
            f"{who}: memory_format={fmt!r} is not supported: tapegrad keeps every tensor in "
            "PyTorch's default order (tapegrad.contiguous_format; NCHW for images). In "
            "PyTorch a channels-last format changes the speed of convolutions, never a "
            "value: remove the memory_format argument")
    raise ArgumentTypeError(
        f"{who}: memory_format must be tapegrad.contiguous_format, preserve_format, "
        f"channels_last or channels_last_3d, got {fmt!r}")
