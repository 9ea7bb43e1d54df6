"""Hypothesis example counts come from the active profile (tests/conftest.py),
so HYPOTHESIS_PROFILE=thorough raises every test's count."""

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_test_sets_its_own_example_count():
    hits = [f"{p.relative_to(TESTS)}:{n}" for p in sorted(TESTS.rglob("*.py"))
            if p.name != "conftest.py"
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"max_examples\s*=", line)]
    assert not hits, f"max_examples set outside the profiles, overriding them: {hits}"
