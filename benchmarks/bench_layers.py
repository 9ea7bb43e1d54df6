"""Forward + backward time of the layer ops, tapegrad against PyTorch.

Each row runs ``y = op(inputs)``, ``y.backward(ones)`` (the input requires
grad, so the input gradient is computed too) and reports the median of many
repeats after a warm-up, in float32. PyTorch runs in the same process with
``torch.set_num_threads`` set to the machine's cores; ``ratio`` is
tapegrad / PyTorch (below 1 is faster). Ops that do not exist yet print n/a.

    python benchmarks/bench_layers.py [--device cpu|cuda] [--repeats 30] [--only conv]
                                      [--threads N]

On ``--device cuda`` PyTorch runs on CUDA in the same process and every timed
repeat ends with a device synchronize on both sides (CuPy's current stream,
``torch.cuda.synchronize``); the first, untimed runs include CuPy's kernel
compilation.

The min columns are the best repeat of each side: less sensitive to other
processes on a shared machine than the medians.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

import tapegrad as tg
from tapegrad import ops

# (label, N, C, H, O, k, pad)
CONVS = [
    ("conv 64x1x28 -> 20 k5", 64, 1, 28, 20, 5, 0),
    ("conv 64x20x12 -> 50 k5", 64, 20, 12, 50, 5, 0),
    ("conv 32x3x32 -> 32 k3 p1", 32, 3, 32, 32, 3, 1),
    ("conv 32x32x32 -> 32 k3 p1", 32, 32, 32, 32, 3, 1),
    ("conv 32x64x16 -> 64 k3 p1", 32, 64, 16, 64, 3, 1),
    ("conv 32x64x16 -> 128 k1", 32, 64, 16, 128, 1, 0),
]


def _machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def _blas():
    try:
        from threadpoolctl import threadpool_info

        infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        if infos:
            return "; ".join(f"{i.get('internal_api')} {i.get('version')} "
                             f"({i.get('architecture')}, {i.get('num_threads')} threads)"
                             for i in infos)
    except ImportError:
        pass
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version')} (threads: see OPENBLAS_NUM_THREADS)"
    except Exception:  # older NumPy: print the whole config
        np.show_config()
        return "see above"


def _time_pair(ours, theirs, repeats, sync_ours, sync_theirs, rounds=3):
    """Median and min (ms) of each side. The two alternate in ``rounds`` blocks
    with short pauses, so both see the same background load, and OpenBLAS's and
    PyTorch's OpenMP worker threads (which spin a while after each call) do not
    compete for the cores with the other library's timed block."""
    sides = [(ours, sync_ours, [])] + ([(theirs, sync_theirs, [])] if theirs else [])
    for run, sync, _ in sides:  # warm-up
        for _ in range(max(3, repeats // 10)):
            run()
        sync()
    block = max(1, repeats // rounds)
    for _ in range(rounds):
        for run, sync, times in sides:
            time.sleep(0.3)  # OpenBLAS workers spin ~0.1 s after a call
            for _ in range(block):
                t0 = time.perf_counter()
                run()
                sync()
                times.append(time.perf_counter() - t0)
    return [(statistics.median(t) * 1e3, min(t) * 1e3) for _, _, t in sides]


# ------------------------------------------------------------------ cases
# Each case returns (tapegrad_run, torch_run or None); a run does fwd+bwd.


def _tg(shape, rng, device, requires_grad=True):
    return tg.tensor(rng.standard_normal(shape).astype(np.float32), device=device,
                     requires_grad=requires_grad)


def _th(torch, a, dev, requires_grad=True):
    return torch.tensor(np.asarray(a.array.get() if hasattr(a.array, "get") else a.array),
                        device=dev, requires_grad=requires_grad)


def _fwd_bwd_tg(fn, leaves):
    def run():
        y = fn()
        y.backward(tg.ones_like(y) if y.array.size > 1 else None)
        for t in leaves:
            t.grad = None
    return run


def _fwd_bwd_torch(torch, fn, leaves):
    def run():
        y = fn()
        y.backward(torch.ones_like(y) if y.numel() > 1 else None)
        for t in leaves:
            t.grad = None
    return run


def case_conv(n, c, h, o, k, pad, rng, device, torch, tdev):
    x, w, b = _tg((n, c, h, h), rng, device), _tg((o, c, k, k), rng, device), \
        _tg((o,), rng, device)
    ours = _fwd_bwd_tg(lambda: ops.conv2d(x, w, b, padding=pad), (x, w, b))
    theirs = None
    if torch is not None:
        tx, tw, tb = (_th(torch, t, tdev) for t in (x, w, b))
        F = torch.nn.functional
        theirs = _fwd_bwd_torch(torch, lambda: F.conv2d(tx, tw, tb, padding=pad), (tx, tw, tb))
    return ours, theirs


def case_pool(rng, device, torch, tdev):
    if not hasattr(ops, "max_pool2d"):
        return None, None
    x = _tg((64, 20, 24, 24), rng, device)
    ours = _fwd_bwd_tg(lambda: ops.max_pool2d(x, 2), (x,))
    theirs = None
    if torch is not None:
        tx = _th(torch, x, tdev)
        theirs = _fwd_bwd_torch(torch, lambda: torch.nn.functional.max_pool2d(tx, 2), (tx,))
    return ours, theirs


def case_bn(rng, device, torch, tdev):
    if not hasattr(ops, "batch_norm"):
        return None, None
    c = 32
    x = _tg((32, c, 32, 32), rng, device)
    w = _tg((c,), rng, device)
    b = _tg((c,), rng, device)
    xp = x.device.xp
    rm, rv = xp.zeros(c, np.float32), xp.ones(c, np.float32)
    rm_t, rv_t = tg.tensor(rm, device=device), tg.tensor(rv, device=device)
    ours = _fwd_bwd_tg(lambda: ops.batch_norm(x, rm_t, rv_t, w, b, True), (x, w, b))
    theirs = None
    if torch is not None:
        tx, tw, tb = (_th(torch, t, tdev) for t in (x, w, b))
        trm = torch.zeros(c, device=tdev)
        trv = torch.ones(c, device=tdev)
        F = torch.nn.functional
        theirs = _fwd_bwd_torch(torch, lambda: F.batch_norm(tx, trm, trv, tw, tb, True),
                                (tx, tw, tb))
    return ours, theirs


def case_xent(rng, device, torch, tdev):
    if not hasattr(ops, "cross_entropy"):
        return None, None
    logits = _tg((256, 10), rng, device)
    target_np = rng.integers(0, 10, 256)
    target = tg.tensor(target_np, device=device)
    ours = _fwd_bwd_tg(lambda: ops.cross_entropy(logits, target), (logits,))
    theirs = None
    if torch is not None:
        tl = _th(torch, logits, tdev)
        tt = torch.tensor(target_np, device=tdev)
        F = torch.nn.functional
        theirs = _fwd_bwd_torch(torch, lambda: F.cross_entropy(tl, tt), (tl,))
    return ours, theirs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--only", default="", help="run only rows whose label contains this")
    ap.add_argument("--threads", type=int, default=tg.get_num_threads(),
                    help="tapegrad.set_num_threads and torch.set_num_threads; default: "
                         "tapegrad's default (the cores available)")
    args = ap.parse_args()
    tg.set_num_threads(args.threads)  # tapegrad's pool; BLAS runs at one thread per call
    device = args.device
    if device == "cuda" and not tg.cupy_available():
        ap.exit(2, "bench_layers: --device cuda needs CuPy and an NVIDIA GPU; none here "
                   "(pip install 'tapegrad[cuda]' on a GPU machine)\n")
    rng = np.random.default_rng(0)
    try:
        import torch

        torch.set_num_threads(args.threads)
        tdev = "cuda" if device == "cuda" else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            print("torch: CUDA not available, PyTorch column skipped")
            torch = None
    except ImportError:
        torch = None
        tdev = None

    if device == "cuda":
        xp = tg.get_device("cuda").xp
        sync_ours = xp.cuda.get_current_stream().synchronize
        sync_theirs = torch.cuda.synchronize if torch is not None else (lambda: None)
    else:
        sync_ours = sync_theirs = lambda: None

    print(f"machine: {_machine()}")
    if device == "cuda":
        props = xp.cuda.runtime.getDeviceProperties(xp.cuda.runtime.getDevice())
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        print(f"GPU: {name}, CuPy {xp.__version__}"
              + (f", torch CUDA {torch.version.cuda}" if torch is not None else ""))
    print(f"python {platform.python_version()}, numpy {np.__version__}, BLAS: {_blas()}")
    if torch is not None:
        print(f"torch {torch.__version__}, torch.set_num_threads({torch.get_num_threads()}), "
              f"interop threads {torch.get_num_interop_threads()}")
    else:
        print("torch: not installed")
    print(f"device {device}, float32, fwd+bwd (input requires grad), {args.repeats} repeats "
          "each, in 3 alternating blocks; ratio = tapegrad / torch")
    print(f"load average before the run: {os.getloadavg()[0]:.2f} "
          "(other processes on these cores skew both columns)")
    print()
    print(f"{'':32s} {'--------- median ---------':>31s} {'---------- min ----------':>27s}")
    print(f"{'layer':32s} {'tapegrad ms':>12s} {'torch ms':>10s} {'ratio':>7s} "
          f"{'tapegrad':>9s} {'torch':>9s} {'ratio':>7s}")

    rows = [(lbl, (lambda a=a: case_conv(*a, rng, device, torch, tdev)))
            for lbl, *a in CONVS]
    rows += [("max_pool2d 2x2 64x20x24x24", lambda: case_pool(rng, device, torch, tdev)),
             ("batch_norm train 32x32x32x32", lambda: case_bn(rng, device, torch, tdev)),
             ("cross_entropy 256x10", lambda: case_xent(rng, device, torch, tdev))]
    for label, make in rows:
        if args.only and args.only not in label:
            continue
        try:
            ours, theirs = make()
        except Exception as exc:  # an op still being written
            print(f"{label:32s} {'n/a':>12s}   ({type(exc).__name__}: {exc})")
            continue
        if ours is None:
            print(f"{label:32s} {'n/a':>12s} {'':>10s} {'':>7s}  (op not in tapegrad.ops yet)")
            continue
        res = _time_pair(ours, theirs, args.repeats, sync_ours, sync_theirs)
        (t_ours, m_ours) = res[0]
        if theirs is not None:
            (t_theirs, m_theirs) = res[1]
            print(f"{label:32s} {t_ours:12.3f} {t_theirs:10.3f} {t_ours / t_theirs:7.2f} "
                  f"{m_ours:9.3f} {m_theirs:9.3f} {m_ours / m_theirs:7.2f}")
        else:
            print(f"{label:32s} {t_ours:12.3f} {'n/a':>10s} {'':>7s} {m_ours:9.3f}")

if __name__ == "__main__":
    main()
