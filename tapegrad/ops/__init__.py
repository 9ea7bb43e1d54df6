"""All differentiable ops, one module per family, each op's forward and vjp
side by side. Everything here is also reachable as ``tapegrad.ops.NAME``.

Families: elementwise, activation, reduction, shape, linalg (the core), and
the layer set: conv, pool, norm, loss, vl_loss (MatConvNet's vl_nnloss),
dropout, distance.
"""

from . import (
               activation,
               conv,
               distance,
               dropout,
               elementwise,
               linalg,
               loss,
               norm,
               pool,
               reduction,
               shape,
               vl_loss,
)

# bound before the star imports: ops.loss (the function) shadows the module name
FAMILIES = (elementwise, activation, reduction, shape, linalg, conv, pool, norm, loss, vl_loss,
            dropout, distance)
__all__ = [name for fam in FAMILIES for name in fam.__all__]

from .activation import *  # noqa: E402, F403
from .conv import *  # noqa: E402, F403
from .distance import *  # noqa: E402, F403
from .dropout import *  # noqa: E402, F403
from .elementwise import *  # noqa: E402, F403
from .elementwise import Add, Div, Mul, Neg, Pow, Sub  # noqa: E402, F401  (Tensor operators)
from .linalg import *  # noqa: E402, F403
from .loss import *  # noqa: E402, F403
from .norm import *  # noqa: E402, F403
from .pool import *  # noqa: E402, F403
from .reduction import *  # noqa: E402, F403
from .shape import *  # noqa: E402, F403
from .vl_loss import *  # noqa: E402, F403
