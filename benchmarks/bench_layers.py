"""Forward + backward time of the layer ops: tapegrad's paths against PyTorch.

Each row runs ``y = op(inputs)``, ``y.backward(g)`` (the input requires grad, so the
input gradient is computed too), float32. On the CPU every row runs tapegrad's NumPy
path (``tapegrad.backends.onednn`` off), its oneDNN path (on, where installed: the ops
that have no oneDNN kernel run the NumPy path there too) and PyTorch, in the same
process, at each thread count of ``--threads`` (``tapegrad.set_num_threads`` and
``torch.set_num_threads``), in ``--blocks`` alternating blocks of ``--repeats``
calls each (every path once per block, so all see the same background load). Rows
named "(channels_last)" give both libraries channels-last inputs and conv weights
(``model.to(memory_format=torch.channels_last)``; tapegrad: NHWC-strided arrays). It
prints medians and mins (ms) and each path's ratio to PyTorch by median; ``roof`` is
the conv rows' fwd+bwd FLOPs (3 x 2 x MACs) per second on the oneDNN path as a % of a
large SGEMM's rate at that thread count (NumPy's BLAS, measured in the same run: the
practical FLOP roof of the machine).

    python benchmarks/bench_layers.py [--device cpu|cuda] [--threads 1,2] [--blocks 7]
                                      [--repeats 5] [--only conv]

On ``--device cuda`` tapegrad (CuPy) runs against PyTorch on CUDA, and every timed
repeat ends with a device synchronize on both sides (CuPy's current stream,
``torch.cuda.synchronize``); the first, untimed runs include CuPy's kernel
compilation.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import time

import numpy as np

import tapegrad as tg
from tapegrad import memory_formats, ops

# (label, N, C, H, O, k, pad): LeNet's, VGG-small's and CIFAR nets' shapes
CONVS = [
    ("conv 64x1x28 -> 20 k5", 64, 1, 28, 20, 5, 0),
    ("conv 64x20x12 -> 50 k5", 64, 20, 12, 50, 5, 0),
    ("conv 32x3x32 -> 32 k3 p1", 32, 3, 32, 32, 3, 1),
    ("conv 32x32x32 -> 32 k3 p1", 32, 32, 32, 32, 3, 1),
    ("conv 32x64x16 -> 64 k3 p1", 32, 64, 16, 64, 3, 1),
    ("conv 32x64x16 -> 128 k1", 32, 64, 16, 128, 1, 0),
    ("conv 32x16x32 -> 16 k3 p1", 32, 16, 32, 16, 3, 1),
    ("conv 32x128x8 -> 128 k3 p1", 32, 128, 8, 128, 3, 1),
]

# (label, input shape, tapegrad's op, torch's op on torch.nn.functional)
POOLS = [
    ("max_pool2d 2x2 64x20x24x24", (64, 20, 24, 24), lambda x: ops.max_pool2d(x, 2),
     lambda F, x: F.max_pool2d(x, 2)),
    ("max_pool2d 3s2 ceil 32x64x32x32", (32, 64, 32, 32),
     lambda x: ops.max_pool2d(x, 3, 2, ceil_mode=True),
     lambda F, x: F.max_pool2d(x, 3, 2, ceil_mode=True)),
    ("avg_pool2d 3s2p1 32x64x32x32", (32, 64, 32, 32), lambda x: ops.avg_pool2d(x, 3, 2, 1),
     lambda F, x: F.avg_pool2d(x, 3, 2, 1)),
]

# the rows also run on channels-last inputs and weights
CHANNELS_LAST = ("conv 64x20x12 -> 50 k5", "conv 32x32x32 -> 32 k3 p1",
                 "conv 32x64x16 -> 64 k3 p1", "max_pool2d 3s2 ceil 32x64x32x32",
                 "avg_pool2d 3s2p1 32x64x32x32")


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


def _tg(shape, rng, device, requires_grad=True, channels_last=False):
    a = rng.standard_normal(shape).astype(np.float32)
    if channels_last and len(shape) == 4:
        a = memory_formats.as_format(np, a, memory_formats.channels_last)
    return tg.tensor(a, device=device, requires_grad=requires_grad)


def _th(torch, a, dev, requires_grad=True):
    """A torch leaf with ``a``'s values, channels-last where ``a``'s array suggests it."""
    t = torch.tensor(np.asarray(a.array.get() if hasattr(a.array, "get") else a.array),
                     device=dev)
    if memory_formats.suggested(a.array) is memory_formats.channels_last:
        t = t.contiguous(memory_format=torch.channels_last)
    return t.requires_grad_(requires_grad)


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


def _one_input(shape, ours, theirs, channels_last=False):
    """A case of one input tensor: ``ours(x)`` on tapegrad, ``theirs(F, x)`` on torch."""
    def case(rng, device, torch, tdev):
        x = _tg(shape, rng, device, channels_last=channels_last)
        tx = None if torch is None else _th(torch, x, tdev)
        return (_fwd_bwd_tg(lambda: ours(x), (x,)),
                None if torch is None else
                _fwd_bwd_torch(torch, lambda: theirs(torch.nn.functional, tx), (tx,)))
    return case


def case_conv(n, c, h, o, k, pad, channels_last=False):
    def case(rng, device, torch, tdev):
        x, w = (_tg(s, rng, device, channels_last=channels_last)
                for s in ((n, c, h, h), (o, c, k, k)))
        b = _tg((o,), rng, device)
        ours = _fwd_bwd_tg(lambda: ops.conv2d(x, w, b, padding=pad), (x, w, b))
        theirs = None
        if torch is not None:
            tx, tw, tb = (_th(torch, t, tdev) for t in (x, w, b))
            F = torch.nn.functional
            theirs = _fwd_bwd_torch(torch, lambda: F.conv2d(tx, tw, tb, padding=pad),
                                    (tx, tw, tb))
        return ours, theirs
    return case


def _conv_flops(n, c, h, o, k, pad):
    """fwd + bwd (input and weight gradients) FLOPs: 3 products of 2 * MACs each."""
    ho = h + 2 * pad - k + 1
    return 3 * 2 * n * o * ho * ho * c * k * k


def case_bn(training, channels_last=False):
    def case(rng, device, torch, tdev):
        c = 32
        x, w, b = _tg((32, c, 32, 32), rng, device, channels_last=channels_last), \
            _tg((c,), rng, device), _tg((c,), rng, device)
        xp = x.device.xp
        rm = tg.tensor(xp.zeros(c, np.float32), device=device)
        rv = tg.tensor(xp.ones(c, np.float32), device=device)
        ours = _fwd_bwd_tg(lambda: ops.batch_norm(x, rm, rv, w, b, training), (x, w, b))
        theirs = None
        if torch is not None:
            tx, tw, tb = (_th(torch, t, tdev) for t in (x, w, b))
            trm, trv = torch.zeros(c, device=tdev), torch.ones(c, device=tdev)
            F = torch.nn.functional
            theirs = _fwd_bwd_torch(
                torch, lambda: F.batch_norm(tx, trm, trv, tw, tb, training), (tx, tw, tb))
        return ours, theirs
    return case


def case_xent(rng, device, torch, tdev):
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


def rows():
    """(label, case, conv FLOPs or None) of every row."""
    out = [(label, case_conv(*a), _conv_flops(*a)) for label, *a in CONVS]
    out += [(label, _one_input(*a), None) for label, *a in POOLS]
    out += [(f"{label} (channels_last)", case_conv(*a, channels_last=True), _conv_flops(*a))
            for label, *a in CONVS if label in CHANNELS_LAST]
    out += [(f"{label} (channels_last)", _one_input(*a, channels_last=True), None)
            for label, *a in POOLS if label in CHANNELS_LAST]
    out += [
        ("batch_norm train 32x32x32x32", case_bn(True), None),
        ("batch_norm eval 32x32x32x32", case_bn(False), None),
        ("batch_norm train 32x32x32x32 (channels_last)", case_bn(True, True), None),
        ("batch_norm eval 32x32x32x32 (channels_last)", case_bn(False, True), None),
        ("lrn 5 32x64x32x32", _one_input(
            (32, 64, 32, 32), lambda x: ops.local_response_norm(x, 5),
            lambda F, x: F.local_response_norm(x, 5)), None),
        ("cross_entropy 256x10", case_xent, None),
    ]
    return out


# ------------------------------------------------------------------ timing


def _time_paths(runs, blocks, repeats, sync):
    """(median, min) ms of each run: ``blocks`` alternating blocks of ``repeats`` calls,
    a short pause before each block (OpenBLAS's and OpenMP's workers spin a while after
    a call and would compete with the next path's block)."""
    for run in runs:  # warm-up (CuPy compiles, oneDNN builds its primitives)
        for _ in range(2):
            run()
        sync()
    times = [[] for _ in runs]
    for _ in range(blocks):
        for run, t in zip(runs, times):
            time.sleep(0.1)
            for _ in range(repeats):
                t0 = time.perf_counter()
                run()
                sync()
                t.append(time.perf_counter() - t0)
    return [(statistics.median(t) * 1e3, min(t) * 1e3) for t in times]


def _gemm_gflops(threads):
    """A large float32 GEMM's rate (GFLOP/s) through NumPy's BLAS at ``threads``."""
    from threadpoolctl import threadpool_limits

    a = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)
    with threadpool_limits(threads, user_api="blas"):
        a @ a
        best = min(_timed_once(lambda: a @ a) for _ in range(3))
    return 2 * 2048 ** 3 / best / 1e9


def _timed_once(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _flags(on):
    return tg.backends.onednn.flags(enabled=on) if on is not None else contextlib.nullcontext()


def _under(run, on):
    def wrapped():
        with _flags(on):
            run()
    return wrapped


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", default="1,2",
                    help="thread counts, comma-separated (tapegrad and torch alike)")
    ap.add_argument("--blocks", type=int, default=7, help="alternating blocks (>= 5)")
    ap.add_argument("--repeats", type=int, default=5, help="calls per block")
    ap.add_argument("--only", default="", help="run only rows whose label contains this")
    args = ap.parse_args()
    device = args.device
    if device == "cuda" and not tg.cupy_available():
        ap.exit(2, "bench_layers: --device cuda needs CuPy and an NVIDIA GPU; none here "
                   "(pip install 'tapegrad[cuda]' on a GPU machine)\n")
    try:
        import torch

        tdev = "cuda" if device == "cuda" else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            print("torch: CUDA not available, PyTorch column skipped")
            torch = None
    except ImportError:
        torch = None
        tdev = None

    if device == "cuda":
        xp = tg.get_device("cuda").xp
        stream_sync = xp.cuda.get_current_stream().synchronize
        torch_sync = torch.cuda.synchronize if torch is not None else (lambda: None)

        def sync():
            stream_sync()
            torch_sync()
        paths = [("tapegrad", None)]
    else:
        sync = lambda: None  # noqa: E731
        paths = [("numpy", False)]
        if tg.backends.onednn.is_available():
            paths.append(("onednn", True))

    print(f"machine: {_machine()}")
    if device == "cuda":
        props = xp.cuda.runtime.getDeviceProperties(xp.cuda.runtime.getDevice())
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        print(f"GPU: {name}, CuPy {xp.__version__}"
              + (f", torch CUDA {torch.version.cuda}" if torch is not None else ""))
    print(f"python {platform.python_version()}, numpy {np.__version__}, BLAS: {_blas()}")
    print(f"tapegrad CPU layers: {tg.backends.onednn.describe()}")
    print(f"torch {torch.__version__}" if torch is not None else "torch: not installed")
    print(f"device {device}, float32, fwd+bwd (input requires grad); {args.blocks} alternating "
          f"blocks of {args.repeats} calls per path; ratio = path / torch by median")
    print(f"load average before the run: {os.getloadavg()[0]:.2f} "
          "(other processes on these cores skew every column)")
    names = [n for n, _ in paths] + (["torch"] if torch is not None else [])
    width = max(len(label) for label, _, _ in rows())
    for threads in (int(t) for t in args.threads.split(",")):
        tg.set_num_threads(threads)
        if torch is not None:
            torch.set_num_threads(threads)
        roof = _gemm_gflops(threads) if device == "cpu" else None
        print(f"\n{threads} thread(s)" + (f"; SGEMM 2048^3 roof {roof:.0f} GFLOP/s" if roof
                                          else ""))
        head = " ".join(f"{n + ' ms':>17s}" for n in names)
        ratios = " ".join(f"{n[:6] + '/t':>9s}" for n, _ in paths) if torch is not None else ""
        print(f"{'layer (ms: median [min])':{width}s} {head}  {ratios}"
              + ("  roof%" if roof else ""))
        rng = np.random.default_rng(0)
        for label, make, flops in rows():
            if args.only and args.only not in label:
                continue
            ours, theirs = make(rng, device, torch, tdev)
            runs = [_under(ours, on) for _, on in paths] + ([theirs] if theirs else [])
            res = _time_paths(runs, args.blocks, args.repeats, sync)
            cells = " ".join(f"{med:8.3f} [{mn:6.3f}]" for med, mn in res)
            line = f"{label:{width}s} {cells}"
            if theirs is not None:
                line += "  " + " ".join(f"{res[i][0] / res[-1][0]:9.2f}"
                                        for i in range(len(paths)))
            if roof and flops:
                line += f"  {100 * flops / (res[len(paths) - 1][0] * 1e-3) / (roof * 1e9):5.1f}"
            print(line)


if __name__ == "__main__":
    main()
