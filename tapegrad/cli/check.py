"""``tapegrad check``: gradcheck every registered op on a device.

Runs :func:`~tapegrad.testing.specs.check_spec` -- the check the test suite
runs -- on each :class:`~tapegrad.testing.specs.OpSpec`, first and second
derivatives in their own columns (``-`` where an op is not twice
differentiable), on the chosen device, and prints a pass/fail table: the way
to validate a new machine or a new GPU. Exit status 0 when everything
passes, 1 otherwise.
"""

from __future__ import annotations

import time

from ..device import get_device
from ..testing import GradcheckError
from ..testing.specs import all_specs, check_spec


def _order(spec, device, order):
    """(status, detail) of one order of ``spec``."""
    try:
        status = check_spec(spec, device, orders=(order,))[order]
    except GradcheckError as exc:
        return "FAIL", str(exc).split(". Worst")[0]
    except Exception as exc:  # an op that cannot run here is a failure too
        return "ERROR", f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return ("pass", "") if status == "pass" else ("-", "")


def run(args) -> int:
    device = get_device(args.device or "cpu")
    specs = [s for s in all_specs() if not args.only or args.only in s.name]
    if not specs:
        print(f"no op spec matches {args.only!r}")
        return 1
    width = max(len(s.id) for s in specs)
    print(f"gradcheck of {len(specs)} op specs on {device} (float64, central differences; "
          "- where an op is not twice differentiable)")
    print(f"{'op':<{width}}  {'1st':<5} {'2nd':<5} {'ms':>7}  detail")
    failed = 0
    for spec in specs:
        t0 = time.perf_counter()
        (first, d1), (second, d2) = (_order(spec, device, k) for k in (1, 2))
        ms = (time.perf_counter() - t0) * 1e3
        failed += not {first, second} <= {"pass", "-"}
        detail = d1 or d2
        print(f"{spec.id:<{width}}  {first:<5} {second:<5} {ms:7.1f}  {detail[:120]}".rstrip())
    print(f"{len(specs) - failed} passed, {failed} failed on {device}")
    return 1 if failed else 0
