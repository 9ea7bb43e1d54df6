"""Fixtures of the ONNX tests (helpers: onnx_helpers.py, the conformance data:
onnx_suite.py)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(0)
