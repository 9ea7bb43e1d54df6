"""All differentiable ops, one module per family, each op's forward and vjp
side by side. Everything here is also reachable as ``tapegrad.ops.NAME``.

Families: elementwise, activation, reduction, shape, linalg (the core), and
the layer set: conv, pool, norm, loss, dropout, distance.
"""

from . import activation, conv, distance, dropout, elementwise, linalg, loss, norm, pool
from . import reduction, shape
from .activation import *  # noqa: F403
from .conv import *  # noqa: F403
from .distance import *  # noqa: F403
from .dropout import *  # noqa: F403
from .elementwise import *  # noqa: F403
from .elementwise import Add, Div, Mul, Neg, Pow, Sub  # used by Tensor operators
from .linalg import *  # noqa: F403
from .loss import *  # noqa: F403
from .norm import *  # noqa: F403
from .pool import *  # noqa: F403
from .reduction import *  # noqa: F403
from .shape import *  # noqa: F403

FAMILIES = (elementwise, activation, reduction, shape, linalg, conv, pool, norm, loss, dropout,
            distance)

__all__ = [name for fam in FAMILIES for name in fam.__all__]
