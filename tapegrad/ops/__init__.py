"""All differentiable ops, one module per family, each op's forward and vjp
side by side. Everything here is also reachable as ``tapegrad.ops.NAME``.

Families: elementwise (arithmetic and the math functions), special (erf),
activation (every pointwise nonlinearity), softmaxes (softmax, log_softmax),
reduction, shape, linalg (the core), and
the layer set: conv, pool, normalization (batch, layer and group norm),
localnorm (LRN, MatConvNet's spnorm and noffset), losses, pairwise (losses and
similarities between two inputs), vl_loss (MatConvNet's vl_nnloss), dropout,
distance, embedding, resample (adaptive pooling, interpolation, pixel shuffle),
rnn (the recurrent cells and one layer's step loop).
No family module shares a name with an op (``ops.loss`` is MatConvNet's loss
function, ``ops.norm`` a vector norm).
"""

from . import (
    activation,
    conv,
    distance,
    dropout,
    elementwise,
    embedding,
    linalg,
    localnorm,
    losses,
    normalization,
    pairwise,
    pool,
    reduction,
    resample,
    rnn,
    shape,
    softmaxes,
    special,
    vl_loss,
)

FAMILIES = (elementwise, special, activation, softmaxes, reduction, shape, linalg, conv, pool,
            normalization, localnorm, losses, vl_loss, dropout, distance, embedding, resample,
            pairwise, rnn)
__all__ = [name for fam in FAMILIES for name in fam.__all__]

from .activation import *  # noqa: E402, F403
from .conv import *  # noqa: E402, F403
from .distance import *  # noqa: E402, F403
from .dropout import *  # noqa: E402, F403
from .elementwise import *  # noqa: E402, F403
from .elementwise import Add, Div, Mul, Neg, Pow, Sub  # noqa: E402, F401  (Tensor operators)
from .embedding import *  # noqa: E402, F403
from .linalg import *  # noqa: E402, F403
from .localnorm import *  # noqa: E402, F403
from .losses import *  # noqa: E402, F403
from .normalization import *  # noqa: E402, F403
from .pairwise import *  # noqa: E402, F403
from .pool import *  # noqa: E402, F403
from .reduction import *  # noqa: E402, F403
from .resample import *  # noqa: E402, F403
from .rnn import *  # noqa: E402, F403
from .shape import *  # noqa: E402, F403
from .softmaxes import *  # noqa: E402, F403
from .special import *  # noqa: E402, F403
from .vl_loss import *  # noqa: E402, F403
