"""Full SGD-momentum training steps (zero_grad, forward, loss, backward, step):

  lenet      Caffe's LeNet, batch 64, 1x28x28 float32 inputs (lenet-b1, lenet-b256:
             batch 1 for latency and 256 for throughput)
  vgg-small  conv3x3-32 BN ReLU, conv3x3-32 BN ReLU, max pool 2, conv3x3-64 BN
             ReLU, conv3x3-64 BN ReLU, max pool 2, dropout 0.5, linear 4096->256,
             ReLU, linear 256->10; batch 32, 3x32x32

Prints ms/step (median after warm-up) and images/s for tapegrad -- on the CPU
both its NumPy path (``tapegrad.backends.onednn`` off) and its oneDNN path (on,
where installed) -- and, in the same run when torch is installed, the same nets in
PyTorch, at each thread count of ``--threads``, their ratios, and the fraction of
the machine's float32 GEMM rate (measured here with numpy) that the step's conv/linear
FLOPs represent
(forward + backward MACs x 2). Then each tapegrad step's peak memory
(tracemalloc: NumPy allocations are tracked), the arrays the tape actually
saved, and an estimate of what backward needs (saved activations plus each conv
layer's buffer: its im2col columns, or a padded NHWC copy of its input).

    python benchmarks/bench_train.py [--steps 21] [--warmup 3] [--nets lenet,vgg-small,...]
                                     [--device cpu|cuda] [--batch N] [--threads 1,2] [--profile]
                                     [--memory-format contiguous_format|channels_last]

``--memory-format channels_last`` runs both frameworks' models and inputs channels-last
(PyTorch's recipe: ``model.to(memory_format=...)``, ``x.contiguous(memory_format=...)``):
oneDNN's convolutions, pooling and batch norm then read and write NHWC arrays with no
reorder between layers.

On ``--device cuda`` both nets run at batch 256 (``--batch`` overrides; on the
CPU the batches above stay the default), PyTorch runs on CUDA in the same
process, and every timed step ends with a device synchronize on both sides.

The steps of the paths and PyTorch alternate in blocks (5 by default), and the min columns
(best step) are less sensitive than the medians to other processes on a
shared machine.

With torch imported (the comparison), oneDNN runs on torch's own ``libgomp.so.1`` (the
soname it asks for), which keeps GNU OpenMP's default 300k-spin wait: tapegrad's own
``GOMP_SPINCOUNT`` (device/onednn.py) then cannot act. ``--no-torch`` times tapegrad as a
process without torch runs it (VGG-small at 2 threads, AMD EPYC: mins 38.4-39.7 ms
against 41.9-42.6 with the default spin).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import tracemalloc

import numpy as np

import tapegrad as tg
from tapegrad import tape
from tapegrad.device import pool
from tapegrad.ops import _conv_blocks

# ------------------------------------------------------------------ the nets
# One spec per net; tapegrad and torch models, FLOPs and memory estimates
# are all derived from it.
LENET = [("conv", 1, 20, 5, 0), ("maxpool", 2), ("conv", 20, 50, 5, 0), ("maxpool", 2),
         ("flatten",), ("linear", 800, 500), ("relu",), ("linear", 500, 10)]
VGG_SMALL = [("conv", 3, 32, 3, 1), ("bn", 32), ("relu",), ("conv", 32, 32, 3, 1), ("bn", 32),
             ("relu",), ("maxpool", 2), ("conv", 32, 64, 3, 1), ("bn", 64), ("relu",),
             ("conv", 64, 64, 3, 1), ("bn", 64), ("relu",), ("maxpool", 2), ("dropout", 0.5),
             ("flatten",), ("linear", 4096, 256), ("relu",), ("linear", 256, 10)]
NETS = {"lenet": (LENET, 64, (1, 28, 28)), "vgg-small": (VGG_SMALL, 32, (3, 32, 32)),
        # the latency and throughput rows: LeNet at a fixed batch on every device
        "lenet-b1": (LENET, 1, (1, 28, 28)), "lenet-b256": (LENET, 256, (1, 28, 28))}
FIXED_BATCH = {"lenet-b1", "lenet-b256"}  # --batch and the GPU batch leave these alone
DEFAULT_NETS = {"cpu": "lenet,vgg-small,lenet-b1,lenet-b256", "cuda": "lenet,vgg-small"}
GPU_BATCH = 256  # the GPU rows: VGG-small and LeNet at B=256
# the targets the ratio lines quote: tapegrad ms/step over torch ms/step, at most
TARGETS = {"cpu": {"lenet": 0.7, "vgg-small": 0.9}, "cuda": {"lenet": 2.0, "vgg-small": 1.5}}
N_CLASSES = 10


def build(spec, nn):
    """The net of ``spec`` with ``nn`` = tapegrad.nn or torch.nn (same API)."""
    layers = []
    for kind, *a in spec:
        if kind == "conv":
            layers.append(nn.Conv2d(a[0], a[1], a[2], padding=a[3]))
        elif kind == "linear":
            layers.append(nn.Linear(a[0], a[1]))
        elif kind == "bn":
            layers.append(nn.BatchNorm2d(a[0]))
        elif kind == "relu":
            layers.append(nn.ReLU())
        elif kind == "maxpool":
            layers.append(nn.MaxPool2d(a[0]))
        elif kind == "dropout":
            layers.append(nn.Dropout(a[0]))
        elif kind == "flatten":
            layers.append(nn.Flatten())
    return nn.Sequential(*layers)


def analyse(spec, batch, in_shape):
    """Per-step GEMM FLOPs and a lower estimate of the memory backward needs.

    FLOPs: 2 x MACs of conv/linear forward, weight gradient and input gradient
    (none for the first layer: its input needs no gradient).
    Memory (bytes): what each layer's backward must keep -- conv and linear
    inputs, ReLU outputs, BN's normalised input, a one-byte argmax per pool
    output and dropout mask element, the loss's softmax -- each activation
    counted once, plus the buffer each conv layer saves for its weight gradient: its
    im2col columns, or from ``_conv_blocks.MIN_CG`` input channels up the padded NHWC
    copy of its input.
    """
    shape = (batch, *in_shape)
    macs = 0
    saved_float = {}  # activation index -> bytes (float32), counted once
    saved_small = 0  # masks and argmax, one byte per element
    im2col = []
    for i, (kind, *a) in enumerate(spec):
        n = int(np.prod(shape))
        if kind == "conv":
            cin, cout, k, p = a
            ho, wo = shape[2] + 2 * p - k + 1, shape[3] + 2 * p - k + 1
            fwd = batch * cout * ho * wo * cin * k * k
            macs += fwd * (2 if i == 0 else 3)
            saved_float[i] = 4 * n
            if cin >= _conv_blocks.MIN_CG:  # channels-last: the padded NHWC copy of x
                im2col.append(4 * batch * cin * (shape[2] + 2 * p) * (shape[3] + 2 * p))
            else:
                im2col.append(4 * batch * cin * k * k * ho * wo)
            shape = (batch, cout, ho, wo)
        elif kind == "linear":
            fwd = batch * a[0] * a[1]
            macs += fwd * (2 if i == 0 else 3)
            saved_float[i] = 4 * n
            shape = (batch, a[1])
        elif kind == "relu":
            saved_float[i + 1] = 4 * n  # its output is the next layer's input
        elif kind == "bn":
            saved_float[("bn", i)] = 4 * n
        elif kind == "maxpool":
            shape = (shape[0], shape[1], shape[2] // a[0], shape[3] // a[0])
            saved_small += int(np.prod(shape))
        elif kind == "dropout":
            saved_small += n
        elif kind == "flatten":
            shape = (batch, int(np.prod(shape[1:])))
            # a flatten is a view: move a pending "input of next layer" mark along
            if i in saved_float:
                saved_float[i + 1] = saved_float.pop(i)
    saved = sum(saved_float.values()) + saved_small + 4 * batch * N_CLASSES
    return 2 * macs, saved, im2col


# ------------------------------------------------------------- measurements

def gemm_rate(n=1024, repeats=7, device="cpu") -> float:
    """float32 matmul FLOP/s, best of ``repeats``: on the CPU through tapegrad's pool
    (``tapegrad.device.pool.matmul``: blocks split over ``get_num_threads()`` threads, BLAS
    at one thread each, as the ops run), on cuda CuPy's."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    sync = lambda: None
    mm = pool.matmul
    if device == "cuda":
        dev = tg.get_device("cuda")
        a, b = dev.xp.asarray(a), dev.xp.asarray(b)
        sync = dev.xp.cuda.Device(dev.index).synchronize
        mm = lambda a, b: a @ b
    mm(a, b)
    sync()
    best = min(_timed(lambda: (mm(a, b), sync())) for _ in range(repeats))
    return 2 * n ** 3 / best


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class _Step:
    """One SGD-momentum training step; the same script drives both frameworks."""

    def __call__(self):
        self.opt.zero_grad()
        loss = self.loss_fn(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        return loss


class TapegradStep(_Step):
    def __init__(self, spec, batch, in_shape, device, fmt="contiguous_format"):
        from tapegrad import nn, optim

        tg.manual_seed(0)
        self.device = tg.get_device(device)
        self.model = build(spec, nn).to(self.device)
        self.model.train()
        self.opt = optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()
        rng = np.random.default_rng(0)
        self.x = tg.tensor(rng.standard_normal((batch, *in_shape), dtype=np.float32),
                           device=self.device)
        if fmt != "contiguous_format":  # PyTorch's recipe: the model and its input
            self.model.to(memory_format=getattr(tg, fmt))
            self.x = self.x.contiguous(memory_format=getattr(tg, fmt))
        self.y = tg.tensor(rng.integers(0, N_CLASSES, batch), device=self.device)

    def sync(self):
        if self.device.type == "cuda":
            self.device.xp.cuda.Device(self.device.index).synchronize()

    def saved_on_tape(self) -> int:
        """Bytes of the arrays the tape holds for backward after one forward."""
        loss = self.loss_fn(self.model(self.x), self.y)
        arrays = {}
        for entry in tape.entries(loss):
            for a in entry.saved or ():
                if hasattr(a, "nbytes"):
                    base = a.base if getattr(a, "base", None) is not None else a
                    arrays[id(base)] = base.nbytes
        total = sum(arrays.values())
        del loss
        return total

    def backward_memory(self) -> tuple[int, int]:
        """(predicted, measured) peak of one backward above the memory before its
        forward: tapegrad.memory_report against tracemalloc (the CuPy pool on cuda)."""
        from tapegrad.memory import PeakMeter

        self()  # .grad and the optimizer's state exist, as in training
        self.opt.zero_grad()
        self.sync()
        with PeakMeter(self.device) as meter:
            before = meter.now()
            loss = self.loss_fn(self.model(self.x), self.y)
            predicted = tg.memory_report(loss).predicted_peak
            meter.reset_peak()
            loss.backward()
            self.sync()
            return predicted, meter.peak() - before

    def peak_memory(self) -> int:
        """Peak bytes allocated during one step, above what was held before it."""
        self()  # grads and optimizer state exist from here on
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            self()
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()


class TorchStep(_Step):
    def __init__(self, spec, batch, in_shape, device, fmt="contiguous_format"):
        import torch

        torch.manual_seed(0)
        self.torch = torch
        self.device = torch.device(device)
        self.model = build(spec, torch.nn).to(self.device)
        self.model.train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        rng = np.random.default_rng(0)
        self.x = torch.from_numpy(rng.standard_normal((batch, *in_shape),
                                                      dtype=np.float32)).to(self.device)
        if fmt != "contiguous_format":
            self.model.to(memory_format=getattr(torch, fmt))
            self.x = self.x.contiguous(memory_format=getattr(torch, fmt))
        self.y = torch.from_numpy(rng.integers(0, N_CLASSES, batch)).to(self.device)

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()


class Switched:
    """A tapegrad step run with the oneDNN switch at ``on`` (its forward and backward)."""

    def __init__(self, step, on):
        self.step, self.on = step, on

    def __call__(self):
        with tg.backends.onednn.flags(enabled=self.on):
            return self.step()

    def sync(self):
        self.step.sync()


def time_steps(steppers, steps, warmup, rounds=5):
    """``{name: (median ms, min ms)}``: the steppers take turns, ``rounds`` blocks
    each, so a burst of load from other processes hits all of them alike."""
    for step in steppers.values():
        for _ in range(warmup):
            step()
        step.sync()
    times = {name: [] for name in steppers}
    per_round = max(1, -(-steps // rounds))
    for _ in range(rounds):
        for name, step in steppers.items():
            for _ in range(per_round):
                t0 = time.perf_counter()
                step()
                step.sync()
                times[name].append(time.perf_counter() - t0)
    return {k: (1e3 * statistics.median(v), 1e3 * min(v)) for k, v in times.items()}


def profile(step, steps, top=18):
    import cProfile
    import pstats

    step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    step.sync()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def _blas() -> str:
    try:
        cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{cfg.get('name', '?')} {cfg.get('version', '')}".strip()
    except Exception:  # noqa: BLE001 - older numpy: just say unknown
        return "unknown BLAS"


def _gpu_name() -> str:
    dev = tg.get_device("cuda")
    props = dev.xp.cuda.runtime.getDeviceProperties(dev.index)
    name = props["name"]
    return f"{name.decode() if isinstance(name, bytes) else name} (cuda:{dev.index}), " \
           f"CuPy {dev.xp.__version__}, CUDA runtime {dev.xp.cuda.runtime.runtimeGetVersion()}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=21, help="timed steps (median)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--nets", default="",
                    help="comma-separated, from: " + ", ".join(NETS) + " (default: "
                    + "; ".join(f"{d}: {v}" for d, v in DEFAULT_NETS.items()) + ")")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--batch", type=int, default=0,
                    help="batch size of every net (default: the table above on cpu, "
                         f"{GPU_BATCH} on cuda)")
    ap.add_argument("--threads", default="",
                    help="thread counts, comma-separated (tapegrad.set_num_threads and "
                         "torch.set_num_threads); default: tapegrad's (the cores available)")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    ap.add_argument("--memory-format", default="contiguous_format",
                    choices=("contiguous_format", "channels_last"),
                    help="the models' and inputs' memory format, tapegrad's and torch's alike "
                         "(model.to(memory_format=...), x.contiguous(memory_format=...))")
    ap.add_argument("--profile", action="store_true",
                    help="also print a cProfile of the tapegrad steps (by own time)")
    args = ap.parse_args(argv)
    nets = [n.strip() for n in (args.nets or DEFAULT_NETS[args.device]).split(",") if n.strip()]
    for n in nets:
        if n not in NETS:
            ap.error(f"unknown net {n!r}: choose from {', '.join(NETS)}")

    counts = [int(t) for t in args.threads.split(",")] if args.threads else \
        [tg.get_num_threads()]
    torch = None
    if not args.no_torch:
        try:
            import torch
        except ImportError:
            torch = None
    dev = "cuda" if args.device == "cuda" else "cpu"
    if dev == "cuda" and not tg.cupy_available():
        ap.exit(2, "bench_train: --device cuda needs CuPy and an NVIDIA GPU; none here "
                   "(pip install 'tapegrad[cuda]' on a GPU machine)\n")
    if dev == "cuda" and torch is not None and not torch.cuda.is_available():
        print("torch: CUDA not available, PyTorch rows skipped")
        torch = None
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python "
          f"{platform.python_version()}, numpy {np.__version__} ({_blas()}), threads "
          f"{','.join(map(str, counts))} (tapegrad.set_num_threads and torch.set_num_threads; "
          f"BLAS 1 per call), torch {torch.__version__ if torch else 'not installed'}; "
          f"device {dev}; tapegrad CPU layers: {tg.backends.onednn.describe()}; memory "
          f"format {args.memory_format}")
    if dev == "cuda":
        print(f"GPU: {_gpu_name()}")
    print(f"load average before the run: {os.getloadavg()[0]:.2f} (other processes skew "
          "the medians; the min columns are less sensitive)")
    for threads in counts:
        tg.set_num_threads(threads)  # tapegrad's pool; BLAS runs at one thread per call
        if torch is not None:
            torch.set_num_threads(threads)
        print(f"\n======== {threads} thread(s)")
        _run_nets(nets, args, dev, torch)


def _paths(spec, batch, in_shape, dev, fmt):
    """The tapegrad steppers: on the CPU its NumPy path and (where installed) its oneDNN
    path, each a model of its own from the same seed; on cuda the one path."""
    if dev != "cpu":
        return {"tapegrad": TapegradStep(spec, batch, in_shape, dev, fmt)}
    out = {"numpy": Switched(TapegradStep(spec, batch, in_shape, dev, fmt), False)}
    if tg.backends.onednn.is_available():
        out["onednn"] = Switched(TapegradStep(spec, batch, in_shape, dev, fmt), True)
    return out


def _run_nets(nets, args, dev, torch):
    rate = gemm_rate(device=dev)
    summary = []
    bwd_memory = {}  # net -> (predicted, measured) peak of backward
    for name in nets:
        spec, batch, in_shape = NETS[name]
        if name not in FIXED_BATCH:
            batch = args.batch or (GPU_BATCH if dev == "cuda" else batch)
        flops, needed, im2col = analyse(spec, batch, in_shape)
        steppers = _paths(spec, batch, in_shape, dev, args.memory_format)
        ours = list(steppers.values())[-1]  # the default path (oneDNN where installed)
        if torch is not None:
            steppers["torch"] = TorchStep(spec, batch, in_shape, dev, args.memory_format)
        timed = time_steps(steppers, args.steps, args.warmup)
        with tg.backends.onednn.flags(enabled=getattr(ours, "on", False)):
            step = getattr(ours, "step", ours)
            peak = step.peak_memory() if dev == "cpu" else float("nan")  # host allocations
            tape = step.saved_on_tape()
            bwd_memory[name] = step.backward_memory()
        summary.append((name, batch, flops, timed, peak, tape, needed, im2col))
        if args.profile:
            print(f"\ncProfile of {args.steps} tapegrad {name} steps:")
            profile(ours, args.steps)
    # the roof is the best GEMM rate seen: measured before and after the steps
    rates = (rate, gemm_rate(device=dev))
    rate = max(rates)
    lib = "cupy" if dev == "cuda" else "numpy"
    print(f"float32 GEMM rate ({lib}, 1024^3 matmul, best of 7, before/after the steps): "
          f"{rates[0] / 1e9:.1f} / {rates[1] / 1e9:.1f} GFLOP/s; roof = the larger")
    print()
    head = (f"{'net':<10} {'batch':>5} {'framework':<9} {'ms/step':>8} {'min ms':>8} "
            f"{'img/s':>8} {'GFLOP/step':>10} {'% GEMM roof':>11}")
    print(head)
    print("-" * len(head))
    for name, batch, flops, timed, *_ in summary:
        for fw, (med, best) in timed.items():
            print(f"{name:<10} {batch:>5} {fw:<9} {med:8.2f} {best:8.2f} "
                  f"{batch / med * 1e3:8.0f} {flops / 1e9:10.3f} "
                  f"{100 * flops / (med / 1e3) / rate:10.1f}%")
    print()
    if torch is not None:
        goals = TARGETS[dev]
        print("ratio = tapegrad ms/step / torch ms/step, from medians [from mins] (the issue's "
              "targets: " + ", ".join(f"<= {v} {k}" for k, v in goals.items()) + ")")
        for name, batch, _, timed, *_ in summary:
            if dev == "cpu":
                print(f"  {name:<10} " + "  ".join(
                    f"{fw} {timed[fw][0] / timed['torch'][0]:.2f} "
                    f"[{timed[fw][1] / timed['torch'][1]:.2f}]" for fw in timed if fw != "torch"))
            else:  # one line per net that gpu_check.sh's summary picks up
                r = timed["tapegrad"][0] / timed["torch"][0]
                rmin = timed["tapegrad"][1] / timed["torch"][1]
                verdict = "meets" if r <= goals.get(name, r) else "MISSES"
                print(f"  {name:<10} B={batch} {r:.2f} [{rmin:.2f}] {verdict} "
                      f"<= {goals.get(name)}")
        print()
    print("memory per tapegrad step (MiB), on the default path (oneDNN where installed):")
    print(f"  {'net':<10} {'peak':>8} {'tape':>8} {'needed':>8}  = saved activations + "
          "conv buffers (columns or NHWC copy, one per layer)")
    for name, _, _, _, peak, tape, needed, im2col in summary:
        mib = 2 ** 20
        print(f"  {name:<10} {peak / mib:8.1f} {tape / mib:8.1f} "
              f"{(needed + sum(im2col)) / mib:8.1f}  = {needed / mib:.1f} + "
              f"{sum(im2col) / mib:.1f} ({', '.join(f'{b / mib:.1f}' for b in im2col)})")
    print("  peak: tracemalloc peak during one step above what was held before it;")
    print("  tape: bytes of the arrays the tape saved for backward after forward;")
    print("  needed: an estimate (see analyse()); % GEMM roof uses the median ms/step.")
    print("\npeak during backward (MiB, above the memory before the forward): "
          "tapegrad.memory_report's prediction vs measured")
    for name, (pred, meas) in bwd_memory.items():
        print(f"  {name:<10} predicted {pred / 2 ** 20:8.2f}  measured {meas / 2 ** 20:8.2f}  "
              f"({pred / meas - 1:+.1%})")


if __name__ == "__main__":
    main()
