"""Test configuration: hypothesis profiles and the GPU marker.

Profiles: ``ci`` (default; few examples, no deadline: the suite stays within
minutes on 2 cores) and ``thorough`` (HYPOTHESIS_PROFILE=thorough). Example
counts come from here only: tests do not set ``max_examples`` (checked by
tests/testing/test_profiles.py).
"""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=15, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    import tapegrad

    if tapegrad.cupy_available():
        return
    skip = pytest.mark.skip(reason="needs CuPy and an NVIDIA GPU (not available here)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def onednn_small_calls(monkeypatch):
    """oneDNN takes every size in the tests: its paths are checked on the small shapes
    the tests use, though by default convolutions under onednn_conv.MIN_MACS and
    pooling under onednn_pool.MIN_ELEMENTS run the NumPy path (the rule's own test:
    tests/device/test_onednn.py uses ``onednn_defaults``)."""
    from tapegrad.device import onednn_conv, onednn_pool

    _ONEDNN_SHIPPED.setdefault("MIN_MACS", onednn_conv.MIN_MACS)  # (unpatched here)
    _ONEDNN_SHIPPED.setdefault("MIN_ELEMENTS", onednn_pool.MIN_ELEMENTS)
    monkeypatch.setattr(onednn_conv, "MIN_MACS", 0)
    monkeypatch.setattr(onednn_pool, "MIN_ELEMENTS", 0)


_ONEDNN_SHIPPED: dict = {}


@pytest.fixture
def onednn_defaults(monkeypatch):
    """oneDNN's size thresholds as shipped, for one test (undoing
    :func:`onednn_small_calls`); returns (MIN_MACS, MIN_ELEMENTS)."""
    from tapegrad.device import onednn_conv, onednn_pool

    monkeypatch.setattr(onednn_conv, "MIN_MACS", _ONEDNN_SHIPPED["MIN_MACS"])
    monkeypatch.setattr(onednn_pool, "MIN_ELEMENTS", _ONEDNN_SHIPPED["MIN_ELEMENTS"])
    return onednn_conv.MIN_MACS, onednn_pool.MIN_ELEMENTS


@pytest.fixture
def num_threads():
    """``num_threads(n)`` sets tapegrad's thread count for the test (skipping it when
    ``n > 1`` and the pool cannot be on: threadpoolctl missing); restored after."""
    import tapegrad
    from tapegrad.device import threads

    before = tapegrad.get_num_threads()

    def set_to(n):
        if n > 1 and not threads.pin_blas():
            pytest.skip("threadpoolctl is not installed: the pool stays off")
        tapegrad.set_num_threads(n)

    yield set_to
    tapegrad.set_num_threads(before)


@pytest.fixture
def numpy_path():
    """The CPU ops on their NumPy paths, oneDNN off (for tests of those paths' own
    properties: bitwise equality across thread counts, the CUDA branches run on the host)."""
    import tapegrad as tg

    with tg.backends.onednn.flags(enabled=False):
        yield
