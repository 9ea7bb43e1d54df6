"""``tapegrad check``: gradcheck every registered op on a device.

Runs each :class:`~tapegrad.testing.specs.OpSpec` (first derivatives against
central differences, and second derivatives for specs marked ``twice``) on
the chosen device and prints a pass/fail table -- the way to validate a new
machine or a new GPU. Exit status 0 when everything passes, 1 otherwise.
"""

from __future__ import annotations

import time

import numpy as np

from ..device import get_device
from ..testing import GradcheckError, gradcheck, gradgradcheck
from ..testing.specs import all_specs


def run(args) -> int:
    device = get_device(args.device or "cpu")
    specs = [s for s in all_specs() if not args.only or args.only in s.name]
    if not specs:
        print(f"no op spec matches {args.only!r}")
        return 1
    width = max(len(s.id) for s in specs)
    print(f"gradcheck of {len(specs)} op specs on {device} (float64, central differences)")
    print(f"{'op':<{width}}  {'checks':<8} {'result':<6} {'ms':>7}  detail")
    failed = 0
    for spec in specs:
        checks = "1st+2nd" if spec.twice else "1st"
        t0 = time.perf_counter()
        status, detail = "pass", ""
        try:
            inputs = spec.inputs(np.random.default_rng(0))
            kw = dict(eps=spec.eps, rtol=spec.rtol, device=device, name=spec.id)
            gradcheck(spec.fn, inputs, atol=spec.atol, **kw)
            if spec.twice:
                gradgradcheck(spec.fn, inputs, atol=spec.atol * 10, **kw)
        except GradcheckError as exc:
            status, detail = "FAIL", str(exc).split(". Worst")[0]
        except Exception as exc:  # an op that cannot run here is a failure too
            status, detail = "ERROR", f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        failed += status != "pass"
        ms = (time.perf_counter() - t0) * 1e3
        print(f"{spec.id:<{width}}  {checks:<8} {status:<6} {ms:7.1f}  {detail[:120]}")
    print(f"{len(specs) - failed} passed, {failed} failed on {device}")
    return 1 if failed else 0
