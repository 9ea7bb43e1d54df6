"""The limits that bound what a small hostile ``.mat`` file can make
:func:`tapegrad.compat.matconvnet.load_simplenn` do, and the error it raises.

``.mat`` files come from strangers, as checkpoints do (see
:mod:`tapegrad.serialization`): every size a file declares is checked against
these limits before anything of that size is allocated. Raise them per call
(``load_simplenn(path, max_bytes=4 << 30)``) for a file you trust.
"""

from __future__ import annotations

import math

from ..errors import ArgumentError, SerializationError

__all__ = ["MatFileError", "MAX_BYTES", "MAX_ITEMS", "MAX_DEPTH", "MAX_EXTENT", "Budget"]

MAX_BYTES = 1 << 30
"""Default ``max_bytes``: the most bytes a file's arrays may declare in total, and,
separately, the most bytes its compressed (v5 zlib) data may inflate to. The
largest MatConvNet models (VGG-VD-19 in single precision) hold about 550 MB."""
MAX_ITEMS = 1_000_000
"""Default ``max_items``: the most cell elements, struct elements, char rows and
HDF5 objects a file may hold in total (ImageNet's class names are 2,000)."""
MAX_DEPTH = 100
"""Default ``max_depth``: the deepest nesting of cells and structs (a simplenn
network nests 4 deep: net, layers, a layer, its weights)."""
MAX_EXTENT = 1024
"""Default ``max_extent``: the largest pad, stride, dilation, upsampling, crop,
pooling window or LRN/spnorm window a layer may declare (FCN's pad is 100, its
upsampling 32); a larger one would make the forward pass allocate or loop
proportionally."""


class MatFileError(SerializationError):
    """A ``.mat`` file (or the dict scipy read from one) is not a readable simplenn
    network: malformed, truncated, hostile, or over one of the limits. The message
    names the file, the variable or field, and what is wrong."""


class Budget:
    """What one file may still declare: bytes, items, and nesting depth."""

    def __init__(self, where, max_bytes=MAX_BYTES, max_items=MAX_ITEMS, max_depth=MAX_DEPTH):
        for name, v in (("max_bytes", max_bytes), ("max_items", max_items),
                        ("max_depth", max_depth)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ArgumentError(f"load_simplenn: {name} must be a non-negative int, got "
                                    f"{v!r}")
        self.where = where
        self.max_bytes, self.max_items, self.max_depth = max_bytes, max_items, max_depth
        self.bytes = self.items = self.stream = 0

    def bad(self, why) -> MatFileError:
        return MatFileError(f"load_simplenn: {self.where} is not a readable MATLAB .mat file: "
                            f"{why}")

    def take_bytes(self, n, what):
        """Account for an allocation of ``n`` bytes before it is made."""
        if self.bytes + n > self.max_bytes:
            raise self.bad(f"{what} declares {n} bytes, which with the {self.bytes} before it "
                           f"is more than max_bytes={self.max_bytes}; if you trust the file, "
                           "pass a larger load_simplenn(..., max_bytes=...)")
        self.bytes += n

    def take_stream(self, n, what):
        """Account for ``n`` bytes of a v5 file's variables read or inflated."""
        self.check_stream(n, what)
        self.stream += n

    def check_stream(self, n, what):
        """Refuse ``n`` more bytes of variables before reading or inflating them."""
        if self.stream + n > self.max_bytes:
            raise self.bad(f"{what} holds {n} bytes, which with the {self.stream} before it "
                           f"is more than max_bytes={self.max_bytes}; if you trust the file, "
                           "pass a larger load_simplenn(..., max_bytes=...)")

    def take_items(self, n, what):
        if self.items + n > self.max_items:
            raise self.bad(f"{what} declares {n} elements, which with the {self.items} before "
                           f"it is more than max_items={self.max_items}; if you trust the file, "
                           "pass a larger load_simplenn(..., max_items=...)")
        self.items += n

    def check_depth(self, depth, what):
        if depth > self.max_depth:
            raise self.bad(f"{what} is nested more than max_depth={self.max_depth} cells or "
                           "structs deep; if you trust the file, pass a larger "
                           "load_simplenn(..., max_depth=...)")


def count(dims) -> int:
    """The elements of an array of MATLAB dimensions ``dims`` (exact, no overflow)."""
    return math.prod(int(d) for d in dims)
