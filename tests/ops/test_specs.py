"""Every op spec of tapegrad.testing.specs is gradchecked here (and
gradgradchecked where marked); and no public op may lack a spec."""

import numpy as np
import pytest

from tapegrad import ops
from tapegrad.testing import gradcheck, gradgradcheck
from tapegrad.testing.specs import NOT_DIFFERENTIABLE, all_specs

SPECS = all_specs()


@pytest.mark.parametrize("spec", SPECS, ids=[s.id for s in SPECS])
def test_gradcheck(spec):
    inputs = spec.inputs(np.random.default_rng(0))
    gradcheck(spec.fn, inputs, eps=spec.eps, atol=spec.atol, rtol=spec.rtol, name=spec.id)


TWICE = [s for s in SPECS if s.twice]


@pytest.mark.parametrize("spec", TWICE, ids=[s.id for s in TWICE])
def test_gradgradcheck(spec):
    inputs = spec.inputs(np.random.default_rng(1))
    gradgradcheck(spec.fn, inputs, eps=spec.eps, atol=spec.atol * 10, rtol=spec.rtol,
                  name=spec.id)


def test_every_public_op_has_a_spec():
    covered = {s.name for s in SPECS}
    missing = sorted(set(ops.__all__) - covered - NOT_DIFFERENTIABLE)
    assert not missing, f"ops without an OpSpec in tapegrad/testing/specs: {missing}"
