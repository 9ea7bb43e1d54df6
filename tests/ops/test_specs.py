"""Every op spec of tapegrad.testing.specs is checked here by check_spec (the
check ``tapegrad check`` runs): first derivatives, and second derivatives
where every op it records is differentiable_twice; no public op may lack a
spec, and the listed non-differentiable ops record nothing."""

import importlib

import pytest

from tapegrad import ops
from tapegrad.testing.specs import (
    FAMILIES,
    NOT_DIFFERENTIABLE,
    all_specs,
    check_not_differentiable,
    check_spec,
)

SPECS = all_specs()
TWICE = [s for s in SPECS if s.twice]


@pytest.mark.parametrize("spec", SPECS, ids=[s.id for s in SPECS])
def test_first_derivatives(spec):
    assert check_spec(spec, orders=(1,)) == {1: "pass"}


@pytest.mark.parametrize("spec", TWICE, ids=[s.id for s in TWICE])
def test_second_derivatives(spec):
    assert check_spec(spec, orders=(2,)) == {2: "pass"}


def test_every_public_op_has_a_spec():
    covered = {s.name for s in SPECS}
    missing = sorted(set(ops.__all__) - covered - set(NOT_DIFFERENTIABLE))
    assert not missing, f"ops without an OpSpec in tapegrad/testing/specs: {missing}"


def test_every_family_has_a_spec_module():
    for fam in FAMILIES:
        mod = importlib.import_module(f"tapegrad.testing.specs.{fam}")
        assert mod.SPECS, f"tapegrad/testing/specs/{fam}.py lists no SPECS"


@pytest.mark.parametrize("name", sorted(NOT_DIFFERENTIABLE))
def test_not_differentiable_ops_record_nothing(name):
    assert name in ops.__all__, f"NOT_DIFFERENTIABLE names no public op {name!r}"
    assert name not in {s.name for s in SPECS}, f"{name} has a spec: drop it from the list"
    check_not_differentiable(name)

