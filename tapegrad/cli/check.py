"""``tapegrad check``: gradcheck every registered op on a device.

Runs :func:`~tapegrad.testing.specs.check_spec` -- the check the test suite
runs -- on each :class:`~tapegrad.testing.specs.OpSpec`, first and second
derivatives in their own columns (``-`` where an op is not twice
differentiable), on the chosen device, and prints a pass/fail table: the way
to validate a new machine or a new GPU. Off the CPU a third column compares
the op's outputs and first (and second) gradients on the device with the
CPU's (:func:`~tapegrad.testing.devicecheck.compare_devices`; ``-`` for ops
that draw random numbers). Exit status 0 when everything passes, 1 otherwise.
"""

from __future__ import annotations

import time

from ..backends import onednn as onednn_backend
from ..device import cpu, get_device
from ..testing import GradcheckError
from ..testing.devicecheck import RANDOM_OPS, DeviceMismatchError, compare_devices
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


def _versus_cpu(spec, device):
    """(status, detail) of the device-against-CPU comparison of ``spec``."""
    if spec.name in RANDOM_OPS:
        return "-", ""
    try:
        compare_devices(spec, device, orders=(1, 2) if spec.twice else (1,))
    except DeviceMismatchError as exc:
        return "FAIL", str(exc)
    except Exception as exc:  # noqa: BLE001 - an op that cannot run here is a failure too
        return "ERROR", f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return "pass", ""


def _describe(device) -> str:
    if device.type != "cuda":
        return str(device)
    props = device.xp.cuda.runtime.getDeviceProperties(device.index)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return f"{device} ({name}, CuPy {device.xp.__version__})"


def run(args) -> int:
    device = get_device(args.device or "cpu")
    specs = [s for s in all_specs() if not args.only or args.only in s.name]
    if not specs:
        print(f"no op spec matches {args.only!r}")
        return 1
    width = max(len(s.id) for s in specs)
    off_cpu = device is not cpu
    print(f"gradcheck of {len(specs)} op specs on {_describe(device)} (float64, central "
          "differences; - where an op is not twice differentiable"
          + ("; 'cpu' compares results with the CPU's" if off_cpu else "") + ")")
    print(f"CPU layers: {onednn_backend.describe()}; these float64 gradchecks run on NumPy")
    print(f"{'op':<{width}}  {'1st':<5} {'2nd':<5} " + ("cpu   " if off_cpu else "")
          + f"{'ms':>7}  detail")
    failed = 0
    t_all = time.perf_counter()
    for spec in specs:
        t0 = time.perf_counter()
        (first, d1), (second, d2) = (_order(spec, device, k) for k in (1, 2))
        statuses, detail = {first, second}, d1 or d2
        versus = ""
        if off_cpu:
            versus, d3 = _versus_cpu(spec, device)
            statuses.add(versus)
            detail = detail or d3
            versus = f"{versus:<5} "
        ms = (time.perf_counter() - t0) * 1e3
        failed += not statuses <= {"pass", "-"}
        print(f"{spec.id:<{width}}  {first:<5} {second:<5} {versus}{ms:7.1f}  "
              f"{detail[:120]}".rstrip())
    print(f"{time.perf_counter() - t_all:.1f} s in all")
    print(f"{len(specs) - failed} passed, {failed} failed on {device}")
    return 1 if failed else 0
