"""conv2d forward + backward on the CPU paths: the NumPy path (im2col + OpenBLAS),
oneDNN (``tapegrad[onednn]``) and PyTorch, in the same run, at 1 and 2 threads.

Each row times ``y = conv2d(x, w, b); y.backward(ones)`` (input, weight and bias
gradients), float32, in alternating blocks (every path once per block); it prints
medians [mins] in ms and each path's ratio to PyTorch by median.

    python benchmarks/bench_onednn.py [--blocks 9] [--threads 1,2]
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

import tapegrad as tg

ROWS = [((32, 32, 32, 32), (32, 32, 3, 3), 1), ((32, 64, 16, 16), (64, 64, 3, 3), 1),
        ((64, 20, 12, 12), (50, 20, 5, 5), 0), ((32, 128, 8, 8), (128, 128, 3, 3), 1),
        ((32, 16, 32, 32), (16, 16, 3, 3), 1)]


def _timed(fns, blocks):
    for f in fns:
        f()
    times = [[] for _ in fns]
    for _ in range(blocks):
        for i, f in enumerate(fns):
            t0 = time.perf_counter()
            f()
            times[i].append(time.perf_counter() - t0)
    return [(np.median(t) * 1e3, min(t) * 1e3) for t in times]


def _ours(x, w, b, pad, on):
    X, W, B = (tg.tensor(a, requires_grad=True) for a in (x, w, b))

    def run():
        with tg.backends.onednn.flags(enabled=on):
            y = tg.ops.conv2d(X, W, B, padding=pad)
            y.backward(tg.tensor(np.ones(y.shape, np.float32)))

    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=9)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        torch = None
    print(f"machine: {platform.machine()}, {platform.processor() or 'cpu'}; numpy "
          f"{np.__version__}; {tg.backends.onednn.describe()}; torch "
          f"{torch.__version__ if torch else 'not installed'}")
    rng = np.random.default_rng(0)
    for threads in (int(t) for t in args.threads.split(",")):
        tg.set_num_threads(threads)
        if torch:
            torch.set_num_threads(threads)
        print(f"\n{threads} thread(s): conv2d fwd+bwd ms, median [min]; ratio to torch by median")
        print(f"{'x':>17} {'w':>17} | {'numpy path':>14} {'onednn':>14} {'torch':>14} | "
              "np/t  dnn/t")
        for xs, ws, pad in ROWS:
            x = rng.standard_normal(xs).astype(np.float32)
            w = rng.standard_normal(ws).astype(np.float32)
            b = rng.standard_normal(ws[0]).astype(np.float32)
            fns = [_ours(x, w, b, pad, False)]
            if tg.backends.onednn.is_available():
                fns.append(_ours(x, w, b, pad, True))
            if torch:
                xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))

                def th(xt=xt, wt=wt, bt=bt, pad=pad):
                    y = torch.nn.functional.conv2d(xt, wt, bt, padding=pad)
                    y.backward(torch.ones_like(y))

                fns.append(th)
            res = _timed(fns, args.blocks)
            npy = res[0]
            dnn = res[1] if tg.backends.onednn.is_available() else (float("nan"),) * 2
            ref = res[-1] if torch else (float("nan"),) * 2
            print(f"{str(xs):>17} {str(ws):>17} | {npy[0]:6.1f} [{npy[1]:5.1f}] "
                  f"{dnn[0]:6.1f} [{dnn[1]:5.1f}] {ref[0]:6.1f} [{ref[1]:5.1f}] | "
                  f"{npy[0] / ref[0]:4.2f}  {dnn[0] / ref[0]:4.2f}")


if __name__ == "__main__":
    main()
