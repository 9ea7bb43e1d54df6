"""Gradient checking, public so users can test their own ``Function``s.

    from tapegrad.testing import gradcheck
    gradcheck(lambda x, w: ops.conv2d(x, w, padding=1), [x, w])

:func:`gradcheck` compares every element of the analytic vjp with central
differences in float64; :func:`directional_gradcheck` compares one random
projection (for inputs too large to difference element by element);
:func:`gradgradcheck` checks second derivatives (``create_graph``) against
finite differences of the first gradient. :mod:`tapegrad.testing.strategies`
has hypothesis strategies for shapes, axes and kink-free arrays.
"""

from .gradcheck import GradcheckError, directional_gradcheck, gradcheck, gradgradcheck

__all__ = ["gradcheck", "gradgradcheck", "directional_gradcheck", "GradcheckError"]
