"""tests/differential: tapegrad against PyTorch (skipped without torch).

Example counts: this suite runs ~1900 (op, dtype) tests, so it takes a few
examples each from its own profile ``differential``, registered here
(tests/conftest.py's rule: counts live in conftest files only): 4 per test under
HYPOTHESIS_PROFILE=ci (the default), 60 under ``thorough``.
"""

import os
import sys

import pytest
from hypothesis import HealthCheck, settings

_BASE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
_COUNTS = {"ci": 4, "thorough": 60}  # examples per (op, dtype) test
settings.register_profile(
    "differential", parent=settings.get_profile(_BASE),
    max_examples=_COUNTS.get(_BASE, 4),
    # no example database: every run draws the same examples (derandomized), so a
    # strict xfail does not pass or fail by what an earlier run stored
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.data_too_large])


@pytest.fixture(autouse=True)
def _flat_settings(request):
    """Hypothesis's pytest plugin (6.155) wraps a parametrized test's settings once per
    case, each time around the last wrapping: ~1000 cases of one test nest ~1000
    deep and every later case dies of RecursionError in ``settings.database``. Put
    back the settings the test was decorated with before each case."""
    fn = getattr(request.function, "__func__", request.function)
    if not hasattr(fn, "_hypothesis_internal_use_settings"):
        return
    if not hasattr(fn, "_decorated_settings"):
        fn._decorated_settings = fn._hypothesis_internal_use_settings
    fn._hypothesis_internal_use_settings = fn._decorated_settings


def pytest_terminal_summary(terminalreporter):
    """How many (op, dtype, layout) cases ran, matched, and were refused by name."""
    runner = sys.modules.get("torchdiff")
    if runner is None:
        return
    for line in runner.summary():
        terminalreporter.write_line(line)
