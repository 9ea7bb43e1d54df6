"""Caffe's own files: ``.prototxt`` + ``.caffemodel`` in, a ``tapegrad.nn.Module`` or
a pycaffe-style :class:`Net` out, ``.caffemodel`` written back; Caffe's layer
conventions exactly, without Caffe. Needs the ``protobuf`` package
(``pip install 'tapegrad[caffe]'``).

>>> from tapegrad.compat import caffe
>>> model = caffe.load("deploy.prototxt", "weights.caffemodel")   # an nn.Module
>>> probs = model(x)
>>> net = caffe.Net("deploy.prototxt", "weights.caffemodel", caffe.TEST)  # pycaffe's API
>>> out = net.forward(data=x)["prob"]

See ``docs/caffe.md`` for the layer table, the untrusted-file limits and how
data layers are fed.
"""

from __future__ import annotations

from .schema import require_protobuf

require_protobuf()

from .base import LAYERS, CaffeLayerError, UnsupportedLayerError  # noqa: E402
from .feeds import FeedError, feed_for  # noqa: E402
from .files import (  # noqa: E402
    MAX_BYTES,
    CaffeFileError,
    parse_net,
    read_net,
    read_weights,
    upgrade_net,
    write_weights,
)
from .model import CaffeModel  # noqa: E402
from .net import TEST, TRAIN, Net, load  # noqa: E402
from .schema import messages  # noqa: E402
from .solver import (  # noqa: E402
    LR_POLICIES,
    SOLVER_TYPES,
    CaffeSolverError,
    Solver,
    SolverDiverged,
    learning_rate,
    read_solver,
)

__all__ = ["load", "Net", "TRAIN", "TEST", "CaffeModel", "CaffeFileError", "CaffeLayerError",
           "UnsupportedLayerError", "MAX_BYTES", "LAYERS", "read_net", "parse_net",
           "read_weights", "write_weights", "upgrade_net", "messages", "supported_layers",
           "Solver", "read_solver", "learning_rate", "SOLVER_TYPES", "LR_POLICIES",
           "CaffeSolverError", "SolverDiverged", "feed_for", "FeedError"]


def supported_layers() -> list[str]:
    """The Caffe layer types tapegrad runs."""
    return sorted(LAYERS)
