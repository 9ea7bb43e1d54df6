"""Does splitting a conv across our own threads beat OpenBLAS's threading?

The experiment of issue 11 (see docs/performance.md): persistent
workers, one per core (the calling thread is one of them), a SimpleQueue
handoff, and conv2d's forward and backward split by batch halves with
im2col + GEMM (+ col2im) inside each worker. Weight-gradient partial
products land in one buffer that is summed over images in order afterwards,
so results are bitwise those of the single path. BLAS runs one thread per
worker meanwhile.

OpenBLAS (pthreads build, as in NumPy's wheels) keeps ONE thread count for the
whole process: ``openblas_set_num_threads`` and even
``openblas_set_num_threads_local`` called in a worker change it for every
thread (printed below). So per-worker pinning is impossible; the variants are

* ``single``  today's conv.py, BLAS at N threads;
* ``single1`` today's conv.py, BLAS at 1 thread (what one core does);
* ``toggle``  the split, with BLAS set to 1 thread around each split region
              (a direct ctypes call through threadpoolctl's controller,
              about 1 us, not threadpoolctl's context manager); ``toggle-big``
              the same for convs of >= 150M multiply-adds only;
* ``global1`` the split, BLAS at 1 thread for the whole process (every other
              GEMM, linear layers included, runs on one core);
* ``task``    backward only: the weight gradient in a worker while the
              calling thread computes the input gradient (no partial sums).

Each variant runs in the same process, in many short alternating blocks,
medians and mins; PyTorch in the same run at the same thread count.

    python benchmarks/bench_threads.py [--rounds 8] [--block 5] [--vgg-steps 4]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import threading
import time

import numpy as np

import tapegrad as tg
from tapegrad import ops
from tapegrad.device import pool
from tapegrad.ops import _conv_blocks
from tapegrad.ops import _conv_columns as CC
from tapegrad.ops import conv as C

# The experiment predates the channels-last convolutions (_conv_blocks): its split
# variants re-implement the (N, G, Kg, P) columns path, so every conv here takes it,
# the "single" baselines too.
_conv_blocks.MIN_CG = 10 ** 9

# ------------------------------------------------------------------ the pool
# The variants run on tapegrad's own worker pool (tapegrad.device.pool._Pool: the
# caller plus n - 1 threads); what differs between them is how BLAS is set around it.


class Blas:
    """Set the process's BLAS thread count cheaply (threadpoolctl's controllers,
    looked up once)."""

    def __init__(self):
        from threadpoolctl import ThreadpoolController

        self.libs = [lc for lc in ThreadpoolController().lib_controllers
                     if lc.user_api == "blas"]

    def set(self, n):
        for lc in self.libs:
            lc.set_num_threads(n)

    def get(self):
        return self.libs[0].get_num_threads()


# ----------------------------------------------------- the split conv kernels

MODE = {"mode": "single", "threads": 2, "pool": None, "blas": None, "min_work": 0}


def _numpy(xp):
    """ctx.xp is an ArrayBackend over NumPy on the CPU fast path."""
    return getattr(xp, "module", None) is np


def _part(g, n):
    p = copy.copy(g)
    p.n = n
    return p


def _region(fn, spans):
    """Run ``fn(lo, hi)`` over ``spans`` on the pool, BLAS at one thread meanwhile
    (toggle mode)."""
    blas = MODE["blas"] if MODE["mode"] in ("toggle", "task") else None
    if blas is not None:
        blas.set(1)
    try:
        MODE["pool"].run(fn, spans)
    finally:
        if blas is not None:
            blas.set(MODE["threads"])


def _by_chunks(fn, n):
    """``fn(lo, hi)`` over one chunk of ``[0, n)`` per thread (:func:`_region`)."""
    _region(fn, pool.chunks(n, MODE["pool"].n))


def _use_split(g):
    work = g.n * g.o * g.ho * g.wo * g.kg * g.groups  # forward MACs
    return (MODE["mode"] in ("toggle", "global1") and g.n >= 2 and work >= MODE["min_work"])


_orig_forward = C.Conv2d.forward
_orig_grads = C.Conv2d.grads


def split_forward(ctx, x, w, b, stride=1, padding=0, dilation=1, groups=1):
    if not _numpy(ctx.xp) or isinstance(padding, str):
        return _orig_forward(ctx, x, w, b, stride, padding, dilation, groups)
    C._check_common("conv2d", x, w, b, groups, 1, 0)
    g = C._conv_geom("conv2d", x, w, stride, padding, dilation, groups)
    if not _use_split(g):
        return _orig_forward(ctx, x, w, b, stride, padding, dilation, groups)
    nx, nw, _ = ctx.needs_input_grad
    cols = np.empty((g.n, g.c, g.kh, g.kw, g.ho, g.wo), dtype=x.dtype)
    y = np.empty((g.n, g.o, g.ho, g.wo), dtype=x.dtype)
    wmat = CC.wmat(w, g)
    ym = y.reshape(g.n, g.groups, g.o // g.groups, g.ho * g.wo)
    colsm = cols.reshape(g.n, g.groups, g.kg, g.ho * g.wo)

    def part(lo, hi):
        p = _part(g, hi - lo)  # (n, C, kh, kw, Ho, Wo) -> (n, G, Kg, P), a view
        CC.im2col(np, x[lo:hi], p, cols[lo:hi].reshape(p.n, p.groups, p.kg, p.ho * p.wo))
        np.matmul(wmat, colsm[lo:hi], out=ym[lo:hi])
        if b is not None:
            y[lo:hi] += b.reshape(1, b.size, 1, 1)

    _by_chunks(part, g.n)
    ctx.geo = g
    ctx.save_for_backward(colsm if nw else None, w if nx else None, x if nx and nw else None)
    return y


def _gx_plan(gy, w, g):
    """The single path's input-gradient choice, as a per-chunk writer, or None
    when it is the channels-last path (not split by batch here)."""
    if g.stride == (1, 1) and g.o <= 2 * g.c:
        def gx_part(lo, hi, gx):
            p = _part(g, hi - lo)
            gx[lo:hi] = C._input_grad(np, gy[lo:hi], w, p)  # its own im2col + GEMM
        return gx_part
    if g.wo < C._CHANNELS_LAST_BELOW_WO and g.n * (g.c // g.groups) >= 8 * g.wo:
        return None
    wmat_t = CC.wmat(w, g).transpose(0, 2, 1)
    gm = gy.reshape(g.n, g.groups, g.o // g.groups, g.ho * g.wo)

    def gx_part(lo, hi, gx):
        p = _part(g, hi - lo)
        gcols = np.matmul(wmat_t, gm[lo:hi])
        CC.col2im(np, gcols, p, gx.dtype, gx[lo:hi])
    return gx_part


def split_grads(xp, gy, cols, w, g, nx, nw):
    if MODE["mode"] == "task" and nx and nw and _numpy(xp):
        out = {}

        def wgrad():
            out["gw"] = CC.weight_grad(np, gy, cols, g)
        jobs = (lambda: out.__setitem__("gx", C._input_grad(np, gy, w, g)), wgrad)
        _region(lambda lo, hi: jobs[lo](), [(0, 1), (1, 2)])  # one job per thread
        return out["gx"], out["gw"]
    if not _numpy(xp) or not _use_split(g):
        return _orig_grads(xp, gy, cols, w, g, nx, nw)
    og = g.o // g.groups
    gm = gy.reshape(g.n, g.groups, og, g.ho * g.wo)
    wide = cols.shape[2] >= 4 * og  # the single path's orientation choice
    buf = None
    if nw:
        buf = np.empty((g.n, g.groups) + ((g.kg, og) if wide else (og, g.kg)), dtype=gy.dtype)
    gx_part = _gx_plan(gy, w, g) if nx else None
    gx = None
    if gx_part is not None:
        gx = (np.empty if g.stride == (1, 1) and g.o <= 2 * g.c else np.zeros)(
            (g.n, g.c, g.h, g.w), dtype=gy.dtype)

    def part(lo, hi):
        if buf is not None:
            if wide:
                np.matmul(cols[lo:hi], gm[lo:hi].transpose(0, 1, 3, 2), out=buf[lo:hi])
            else:
                np.matmul(gm[lo:hi], cols[lo:hi].transpose(0, 1, 3, 2), out=buf[lo:hi])
        if gx_part is not None:
            gx_part(lo, hi, gx)

    _by_chunks(part, g.n)
    gw = None
    if buf is not None:
        s = buf.sum(axis=0)  # over images, in order: the single path's sum
        gw = (s.transpose(0, 2, 1) if wide else s).reshape(g.o, g.c // g.groups, g.kh, g.kw)
    if nx and gx is None:
        gx = C._input_grad(np, gy, w, g)  # channels-last, in the caller
    return gx, gw


def install():
    C.Conv2d.forward = staticmethod(split_forward)
    C.Conv2d.grads = staticmethod(split_grads)


# variant name -> (kind, smallest conv to split, in forward multiply-adds)
BIG = 150_000_000
VARIANTS = {"single": ("single", 0), "single1": ("single1", 0), "toggle": ("toggle", 0),
            "toggle-big": ("toggle", BIG), "global1": ("global1", 0), "task": ("task", 0)}


def set_mode(name):
    MODE["mode"], MODE["min_work"] = VARIANTS[name]
    if MODE["blas"] is not None:
        MODE["blas"].set(1 if MODE["mode"] in ("global1", "single1") else MODE["threads"])


# ------------------------------------------------------------- measurements


def roundtrip_us(workers, n=3000):
    t = []
    spans = [(i, i + 1) for i in range(workers.n)]
    for _ in range(n):
        t0 = time.perf_counter()
        workers.run(lambda lo, hi: None, spans)
        t.append(time.perf_counter() - t0)
    return statistics.median(t) * 1e6, min(t) * 1e6


def blas_scope_check(blas):
    """Is a BLAS thread count set in a worker thread seen by the main thread?"""
    import ctypes

    lib = ctypes.CDLL(blas.libs[0].filepath)
    seen = {}
    has_local = hasattr(lib, "openblas_set_num_threads_local")

    def worker():
        if has_local:
            lib.openblas_set_num_threads_local(1)
            seen["local"] = blas.get()
        blas.set(1)
    before = blas.get()
    th = threading.Thread(target=worker)
    th.start()
    th.join()
    after = blas.get()
    blas.set(before)
    return before, seen.get("local"), after


def conv_case(n, c, h, o, k, pad, rng):
    x = tg.tensor(rng.standard_normal((n, c, h, h), dtype=np.float32), requires_grad=True)
    w = tg.tensor(rng.standard_normal((o, c, k, k), dtype=np.float32), requires_grad=True)
    b = tg.tensor(rng.standard_normal(o, dtype=np.float32), requires_grad=True)

    def run():
        y = ops.conv2d(x, w, b, padding=pad)
        y.backward(tg.ones_like(y))
        out = (y.array, x.grad.array, w.grad.array, b.grad.array)
        x.grad = w.grad = b.grad = None
        return out
    return run, (x, w, b)


def torch_conv_case(torch, leaves, pad):
    tx, tw, tb = (torch.tensor(t.array, requires_grad=True) for t in leaves)

    def run():
        y = torch.nn.functional.conv2d(tx, tw, tb, padding=pad)
        y.backward(torch.ones_like(y))
        tx.grad = tw.grad = tb.grad = None
    return run


def alternate(runs, rounds, block):
    """runs: {name: (setup, fn)}; ``rounds`` alternating blocks of ``block`` calls."""
    times = {k: [] for k in runs}
    for setup, fn in runs.values():
        setup()
        fn()
        fn()
    for _ in range(rounds):
        for name, (setup, fn) in runs.items():
            setup()
            time.sleep(0.05)
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {k: (statistics.median(v) * 1e3, min(v) * 1e3) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--vgg-steps", type=int, default=4, help="steps per VGG block")
    ap.add_argument("--threads", type=int, default=tg.get_num_threads())
    ap.add_argument("--only", default="", help="layers|vgg|lenet (default: all)")
    args = ap.parse_args()
    import torch

    tg.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    MODE.update(threads=args.threads, pool=pool._Pool(args.threads), blas=Blas())
    install()
    print(f"load average: {os.getloadavg()}, threads {args.threads}, torch {torch.__version__}, "
          f"numpy {np.__version__}, BLAS {MODE['blas'].libs[0].internal_api} "
          f"{MODE['blas'].libs[0].version}")
    before, local, after = blas_scope_check(MODE["blas"])
    print(f"BLAS threads in main: {before}; after openblas_set_num_threads_local(1) in a worker: "
          f"{local}; after set_num_threads(1) in a worker: {after} -> process-global")
    med, mn = roundtrip_us(MODE["pool"])
    print(f"pool round trip (no-op task on each of {args.threads} threads): median {med:.1f} us, "
          f"min {mn:.1f} us")
    t = []
    for _ in range(2000):
        t0 = time.perf_counter()
        MODE["blas"].set(1)
        MODE["blas"].set(args.threads)
        t.append(time.perf_counter() - t0)
    print(f"BLAS toggle 1 -> {args.threads} (controller.set_num_threads): median "
          f"{statistics.median(t) * 1e6:.1f} us")
    from threadpoolctl import threadpool_limits
    t = []
    for _ in range(200):
        t0 = time.perf_counter()
        with threadpool_limits(1, user_api="blas"):
            pass
        t.append(time.perf_counter() - t0)
    print(f"threadpoolctl.threadpool_limits(1) context (the earlier attempt): median "
          f"{statistics.median(t) * 1e6:.1f} us")

    rng = np.random.default_rng(0)
    from bench_layers import CONVS
    if args.only in ("", "layers"):
        print("\nconv2d fwd+bwd, ms: median / min over "
              f"{args.rounds} alternating blocks of {args.block}; bitwise = toggle,global1,task "
              "== single (all at 1 BLAS thread)")
        modes = list(VARIANTS)
        print(f"{'layer':28s} " + " ".join(f"{m:>15s}" for m in modes + ["torch"]) + "  bitwise")
        for label, n, c, h, o, k, pad in CONVS:
            run, leaves = conv_case(n, c, h, o, k, pad, rng)
            # the reference is the single path at 1 BLAS thread: OpenBLAS's 1- and
            # 2-thread sgemm differ in the last bits, and the split runs at 1
            threads, MODE["threads"] = MODE["threads"], 1
            set_mode("single")
            ref = [a.copy() for a in run()]
            same = []
            for m in ("toggle", "global1", "task"):
                set_mode(m)
                got = run()
                same.append(all(np.array_equal(a, r) for a, r in zip(got, ref)))
            MODE["threads"] = threads
            runs = {m: ((lambda m=m: set_mode(m)), run) for m in modes}
            runs["torch"] = ((lambda: set_mode("single")), torch_conv_case(torch, leaves, pad))
            res = alternate(runs, args.rounds, args.block)
            set_mode("single")
            macs = n * o * (h + 2 * pad - k + 1) ** 2 * c * k * k
            print(f"{label:28s} " + " ".join(f"{res[m][0]:7.2f}/{res[m][1]:<7.2f}"
                                             for m in runs)
                  + "  " + ",".join("y" if s else "NO" for s in same)
                  + f"  ({macs / 1e6:.0f}M MACs)")
    for net in ("vgg-small", "lenet"):
        if args.only not in ("", net.split("-")[0]):
            continue
        import bench_train as bt
        spec, batch, in_shape = bt.NETS[net]
        ours = bt.TapegradStep(spec, batch, in_shape, "cpu")
        theirs = bt.TorchStep(spec, batch, in_shape, "cpu")
        runs = {m: ((lambda m=m: set_mode(m)), ours) for m in VARIANTS}
        runs["torch"] = ((lambda: set_mode("single")), theirs)
        res = alternate(runs, args.rounds, args.vgg_steps)
        set_mode("single")
        print(f"\n{net} B={batch} SGD step, ms median / min ({args.rounds} alternating blocks "
              f"of {args.vgg_steps} steps):")
        for m, (md, mn) in res.items():
            print(f"  {m:8s} {md:8.2f} {mn:8.2f}   ratio to torch {md / res['torch'][0]:.2f} "
                  f"[{mn / res['torch'][1]:.2f}]")
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
