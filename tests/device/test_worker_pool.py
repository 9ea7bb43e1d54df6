"""tapegrad.device.pool: the split, its fallbacks, and that every split op gives
the same bits at every thread count."""

import gc
import os
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import memory_formats, ops
from tapegrad.device import pool
from tapegrad.ops import _conv_blocks, normalization

# these test the NumPy paths (oneDNN, where installed, has tests of its own)
pytestmark = pytest.mark.usefixtures("numpy_path")


@pytest.fixture
def two_threads(monkeypatch, num_threads):
    """The pool on with 2 threads and no work threshold; the count restored after."""
    num_threads(2)
    monkeypatch.setattr(pool, "MIN_WORK", 0)


@pytest.mark.parametrize("n, k, expect", [(5, 2, [(0, 3), (3, 5)]), (4, 2, [(0, 2), (2, 4)]),
                                          (1, 4, [(0, 1)]), (7, 3, [(0, 3), (3, 5), (5, 7)])])
def test_chunks_are_contiguous_and_balanced(n, k, expect):
    assert pool.chunks(n, k) == expect


def test_parallel_runs_every_chunk_once_in_two_threads(two_threads):
    seen, names = [], set()
    lock = threading.Lock()

    def part(lo, hi):
        with lock:
            seen.append((lo, hi))
            names.add(threading.current_thread().name)

    pool.parallel(9, part)
    assert sorted(seen) == [(0, 5), (5, 9)]
    assert len(names) == 2 and threading.current_thread().name in names


def test_small_work_or_one_item_runs_in_one_piece(two_threads, monkeypatch):
    seen = []
    pool.parallel(1, lambda lo, hi: seen.append((lo, hi)))
    monkeypatch.setattr(pool, "MIN_WORK", 100)
    pool.parallel(8, lambda lo, hi: seen.append((lo, hi)), work=99)
    assert seen == [(0, 1), (0, 8)]


def test_nested_and_concurrent_calls_run_in_the_caller(two_threads):
    inner = []

    def part(lo, hi):  # a chunk that splits again: the pool is busy, so one piece
        pool.parallel(4, lambda a, b: inner.append((lo, a, b)))

    pool.parallel(2, part)
    assert sorted(inner) == [(0, 0, 4), (1, 0, 4)]


def test_an_exception_in_a_worker_reaches_the_caller_and_the_pool_survives(two_threads):
    def part(lo, hi):
        if lo > 0:
            raise ValueError(f"chunk {lo}")

    with pytest.raises(ValueError, match="chunk"):
        pool.parallel(4, part)
    seen = []
    pool.parallel(4, lambda lo, hi: seen.append(lo))
    assert sorted(seen) == [0, 2]


@pytest.mark.parametrize("fails", [False, True])
def test_idle_workers_keep_nothing_of_the_last_task(two_threads, fails):
    """A chunk's closure holds the op's arrays (columns, gradients): once the call
    returns, no worker may keep it alive (tapegrad.memory_report counts what only
    the tape holds, and backward frees a saved array when its last user is done)."""
    class Held:
        pass

    held = Held()
    ref = weakref.ref(held)

    def part(lo, hi, held=held):
        if fails and lo > 0:
            raise ValueError("chunk")

    if fails:
        with pytest.raises(ValueError):
            pool.parallel(2, part)
    else:
        pool.parallel(2, part)
    del part, held
    gc.collect()
    assert ref() is None


def test_pool_matmul_splits_rows_and_falls_back_elsewhere(two_threads, monkeypatch):
    monkeypatch.setattr(pool, "ROW_BLOCK", 4)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((37, 50), dtype=np.float32), rng.standard_normal((50, 9),
                                                                              dtype=np.float32)
    af = np.asfortranarray(a)  # strided rows (BLAS's transposed path: other bits than a's)
    ref = np.concatenate([a[r:r + 4] @ b for r in range(0, 37, 4)])  # blocks of ROW_BLOCK rows
    ref_f = np.concatenate([af[r:r + 4] @ b for r in range(0, 37, 4)])
    for n in (1, 2, 3):
        tg.set_num_threads(n)
        assert np.array_equal(pool.matmul(a, b), ref)
        assert np.array_equal(pool.matmul(af, b), ref_f)
    a3 = a[:36].reshape(4, 9, 50)
    assert np.array_equal(pool.matmul(a3, b), ref[:36].reshape(4, 9, 9))
    batched = rng.standard_normal((4, 50, 9), dtype=np.float32)
    assert np.array_equal(pool.matmul(a3, batched), a3 @ batched)
    np.testing.assert_allclose(ref, a @ b, rtol=1e-5, atol=1e-5)
    col, row = a[:, :1], b[:1]  # k = 1 (a linear layer's weight gradient at batch 1)
    assert pool.matmul(col, row).tobytes() == (col @ row).tobytes()


def test_pool_matmul_splits_columns_from_two_blocks_up(two_threads, monkeypatch):
    monkeypatch.setattr(pool, "COL_BLOCK", 4)
    monkeypatch.setattr(pool, "MIN_WORK", 1000)
    calls = []
    run = pool._Pool.run
    monkeypatch.setattr(pool._Pool, "run",
                        lambda self, f, spans: (calls.append(spans), run(self, f, spans)))
    rng = np.random.default_rng(5)
    a = rng.standard_normal((6, 3, 50), dtype=np.float32)  # 18 rows: fewer than ROW_BLOCK x 2
    for n, width in ((9, 4), (21, 8)):  # 2 blocks and a short one; from 4 blocks up, 2x wide
        w = rng.standard_normal((n, 50), dtype=np.float32)
        b = w.T  # a linear layer's (in, out) view of its weight
        ref = np.concatenate([a.reshape(18, 50) @ b[:, c:c + width] for c in range(0, n, width)],
                             axis=1).reshape(6, 3, n)
        calls.clear()
        for threads in (1, 2, 3):
            tg.set_num_threads(threads)
            assert pool.matmul(a, b).tobytes() == ref.tobytes()
        assert calls and calls[-1][-1][1] == -(-n // width)  # the spans count column blocks
        np.testing.assert_allclose(ref, a @ b, rtol=1e-5, atol=1e-5)


# every op that splits, on shapes that take each of its kernels' branches
_CONVS = [  # (x shape, w shape, kwargs)
    ((5, 3, 9, 9), (4, 3, 3, 3), dict(padding=1)),                 # correlation input grad
    ((5, 2, 11, 11), (8, 2, 3, 3), dict(stride=2)),                # col2im input grad
    ((16, 4, 10, 10), (12, 4, 5, 5), dict()),                       # channels-last input grad
    ((4, 4, 8, 8), (6, 2, 3, 3), dict(groups=2, padding=(1, 0, 2, 1), dilation=2)),
    ((4, 16, 9, 9), (16, 16, 3, 3), dict(padding=1)),              # channels-last columns
    ((3, 32, 8, 8), (24, 16, 3, 3), dict(groups=2, stride=2, dilation=(1, 2))),
    ((6, 16, 9, 9), (24, 8, 1, 1), dict(groups=2)),                # pointwise: x its columns
]


def _grads(fn, arrays):
    leaves = [tg.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*leaves)
    y.backward(tg.tensor(np.cos(np.arange(y.numel(), dtype=y.dtype)).reshape(y.shape)))
    return [y.array.copy()] + [t.grad.array.copy() for t in leaves]


def _recording_gemms(monkeypatch):
    """Make every NumPy matmul (``np.matmul`` and the host backend's) append each GEMM it
    runs as ``(M, K, N)`` to the returned list: one entry per matrix pair of its batch.
    OpenBLAS's bits for a row depend on the call's shape (its row- and column-tail
    kernels differ, and which rows are tail rows differs between AVX2's Haswell and
    AVX-512's SkylakeX kernels), so the same bits on every CPU need the same GEMM
    shapes at every thread count -- which this checks on whatever CPU runs it."""
    gemms = []
    real = np.matmul

    def matmul(a, b, *args, **kwargs):
        a2, b2 = np.asarray(a), np.asarray(b)
        if a2.ndim >= 2 and b2.ndim >= 2:
            batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
            gemms.extend([(a2.shape[-2], a2.shape[-1], b2.shape[-1])] * int(np.prod(batch)))
        return real(a, b, *args, **kwargs)

    monkeypatch.setattr(np, "matmul", matmul)
    monkeypatch.setattr(tg.device.cpu.backend, "matmul", matmul, raising=False)
    return gemms


def _same_bits_at_1_and_2_threads(fn, arrays, monkeypatch=None, block_bytes=8192):
    """Output and every gradient bitwise equal at 1 and 2 threads, and (``monkeypatch``
    given) the same GEMM shapes at both, which makes the bits equal on every CPU kind;
    with ``monkeypatch``, also that the 2-thread run did split (handed chunks to a
    worker), with channels-last convs' blocks (_conv_blocks) of ``block_bytes``: a few
    output rows each by default, two or more whole images at 1 << 17."""
    if monkeypatch is not None:
        monkeypatch.setattr(_conv_blocks, "BLOCK_BYTES", block_bytes)
        gemms = _recording_gemms(monkeypatch)
    tg.set_num_threads(1)
    one = _grads(fn, arrays)
    if monkeypatch is not None:
        at_one, gemms[:] = sorted(gemms), []
    tg.set_num_threads(2)
    splits = []
    if monkeypatch is not None:
        run = pool._Pool.run
        monkeypatch.setattr(pool._Pool, "run",
                            lambda self, f, spans: (splits.append(len(spans)), run(self, f, spans)))
    two = _grads(fn, arrays)
    for a, b in zip(one, two):  # the same bytes (NaNs included)
        assert a.shape == b.shape and a.tobytes() == b.tobytes()
    if monkeypatch is not None:
        assert splits, "nothing was split"
        assert sorted(gemms) == at_one, "GEMM shapes (M, K, N) differ at 2 threads"


_ARCH = "from threadpoolctl import threadpool_info; import numpy; print([i['architecture'] " \
    "for i in threadpool_info() if i['user_api'] == 'blas'])"


def test_the_same_bits_hold_on_avx2_haswell_kernels_too():
    """CI machines differ in their OpenBLAS kernels (AVX2 Haswell on AMD EPYC, AVX-512
    SkylakeX on Xeon), and a conv once kept its bits across thread counts on one and
    not the other. Run this file's bitwise tests again with OpenBLAS forced to its
    Haswell kernels (every x86-64 CPU here has AVX2), so each machine checks both."""
    pytest.importorskip("threadpoolctl")
    import platform
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("OpenBLAS's Haswell kernels are x86-64's")
    env = dict(os.environ, OPENBLAS_CORETYPE="Haswell")
    arch = subprocess.run([sys.executable, "-c", _ARCH], env=env, capture_output=True,
                          text=True, timeout=60)
    if "Haswell" not in arch.stdout:
        pytest.skip(f"NumPy's BLAS does not take OPENBLAS_CORETYPE: {arch.stdout.strip()}")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          __file__, "-k", "bitwise"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "deselected" in out.stdout


@pytest.mark.parametrize("block_bytes", [8192, 1 << 17])
@pytest.mark.parametrize("xs, ws, kw", _CONVS)
def test_conv2d_is_bitwise_equal_at_every_thread_count(two_threads, xs, ws, kw, block_bytes,
                                                       monkeypatch):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal(xs, dtype=np.float32), rng.standard_normal(ws, dtype=np.float32)
    b = rng.standard_normal(ws[0], dtype=np.float32)
    _same_bits_at_1_and_2_threads(lambda x, w, b: ops.conv2d(x, w, b, **kw), [x, w, b],
                                  monkeypatch, block_bytes)


@pytest.mark.parametrize("block_bytes", [8192, 1 << 17])
@pytest.mark.parametrize("xs, ws, kw", _CONVS)
def test_conv_transpose2d_is_bitwise_equal_at_every_thread_count(two_threads, xs, ws, kw,
                                                                  block_bytes, monkeypatch):
    rng = np.random.default_rng(2)
    # the adjoint's shapes: x has the conv's output channels, w is (in, out/groups, kh, kw)
    x = rng.standard_normal((xs[0], ws[0], 6, 7), dtype=np.float32)
    w = rng.standard_normal(ws, dtype=np.float32)
    _same_bits_at_1_and_2_threads(lambda x, w: ops.conv_transpose2d(x, w, **kw), [x, w],
                                  monkeypatch, block_bytes)


@pytest.mark.parametrize("blocks", ["rows", "columns"])
def test_linear_is_bitwise_equal_at_every_thread_count(two_threads, blocks, monkeypatch):
    monkeypatch.setattr(pool, "ROW_BLOCK", 8)
    # 30 outputs: two blocks of 8 columns and more (one of 6), or fewer than two of 128
    monkeypatch.setattr(pool, "COL_BLOCK", 8 if blocks == "columns" else 128)
    monkeypatch.setattr(pool, "MIN_WORK", 1000)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 21, 40), dtype=np.float32)
    w, b = rng.standard_normal((30, 40), dtype=np.float32), rng.standard_normal(30,
                                                                              dtype=np.float32)
    _same_bits_at_1_and_2_threads(ops.linear, [x, w, b], monkeypatch)


@pytest.mark.parametrize("shape, layout", [((7, 3, 5, 6), "contiguous"),
                                           ((7, 3, 5, 6), "channels_last"), ((9, 5), "")])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batch_norm_is_bitwise_equal_at_every_thread_count_and_block_size(
        two_threads, shape, layout, training, affine, dtype, monkeypatch):
    """Blocks of 3 samples (a last one shorter) at 1 and 2 threads, and the whole batch
    in one block: the same bits (per-sample sums, summed in sample order), on (N, C*L)
    rows and on a channels-last x's (N*L, C) rows."""
    rng = np.random.default_rng(5)
    c = shape[1]
    x = (rng.standard_normal(shape) * 2 + 5).astype(dtype)
    w, b = (rng.standard_normal(c).astype(dtype) for _ in range(2))

    def bn(x, *wb):
        rm, rv = tg.tensor(np.zeros(c, dtype)), tg.tensor(np.ones(c, dtype))
        if layout == "channels_last":
            x = x.contiguous(memory_format=tg.channels_last)
        y = ops.batch_norm(x, rm, rv, *wb, training=training)
        assert y.is_contiguous(memory_format=tg.channels_last) == (layout == "channels_last")
        return y

    arrays = [x, w, b] if affine else [x]
    monkeypatch.setattr(normalization, "SAMPLE_BLOCK_BYTES", 3 * x[0].nbytes)
    _same_bits_at_1_and_2_threads(bn, arrays, monkeypatch)
    blocked = _grads(bn, arrays)
    monkeypatch.setattr(normalization, "SAMPLE_BLOCK_BYTES", x.nbytes)
    for a, d in zip(blocked, _grads(bn, arrays)):
        assert a.tobytes() == d.tobytes()


def test_split_conv_matches_torch(two_threads):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 3, 12, 12)).astype(np.float64)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float64)
    out = _grads(lambda x, w: ops.conv2d(x, w, padding=1, stride=2), [x, w])
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    yt = torch.nn.functional.conv2d(xt, wt, padding=1, stride=2)
    yt.backward(torch.cos(torch.arange(yt.numel(), dtype=torch.float64)).reshape(yt.shape))
    for a, b in zip(out, (yt, xt.grad, wt.grad)):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-10, atol=1e-10)


_FORK_CHILD = """
import os, numpy as np, tapegrad as tg
from tapegrad import ops
from tapegrad.device import pool

pool.MIN_WORK = 0
tg.set_num_threads(2)
x = tg.tensor(np.ones((4, 2, 6, 6), np.float32))
w = tg.tensor(np.ones((3, 2, 3, 3), np.float32))
ops.conv2d(x, w)  # the pool's threads start in the parent
pid = os.fork()
if pid == 0:  # the child has no worker threads: a new pool must start
    os._exit(0 if float(ops.conv2d(x, w).array.sum()) == 4 * 3 * 16 * 18 else 3)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_its_own_pool():
    pytest.importorskip("threadpoolctl")
    out = subprocess.run([sys.executable, "-c", _FORK_CHILD], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "0", out.stderr


@pytest.mark.parametrize("kw", [dict(kernel_size=2),                            # tiles
                                dict(kernel_size=3, stride=2, padding=1),       # windows
                                dict(kernel_size=2, ceil_mode=True)])           # ragged edge
@pytest.mark.parametrize("special", [False, True])
def test_max_pool_is_bitwise_equal_at_every_thread_count(two_threads, kw, special, monkeypatch):
    x = np.random.default_rng(4).standard_normal((6, 3, 9, 9)).astype(np.float32)
    if special:  # PyTorch's argmax rules for NaN and -inf windows run after the split
        x[0, 0, :3, :3], x[5, 2, 4, 4] = -np.inf, np.nan
    _same_bits_at_1_and_2_threads(lambda x: ops.max_pool2d(x, **kw), [x], monkeypatch)


@pytest.mark.parametrize("shape", [(3, 5, 4096 // 5 + 7), (2 * 4096,), (7,)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_relu_is_bitwise_equal_at_every_thread_count_and_to_maximum(two_threads, shape, dtype,
                                                                    monkeypatch):
    x = np.random.default_rng(5).standard_normal(shape).astype(dtype)
    x.reshape(-1)[:4] = (-0.0, 0.0, np.nan, -np.inf)  # PyTorch's NaN rule, signed zeros
    split = monkeypatch if x.size >= 2 * pool.STREAM_ROW else None  # rows to split
    _same_bits_at_1_and_2_threads(ops.relu, [x], split)
    xt = tg.tensor(x, requires_grad=True)
    y = ops.relu(xt)
    assert y.array.tobytes() == np.maximum(x, 0).tobytes()
    g = np.cos(np.arange(x.size)).reshape(shape).astype(dtype)
    y.backward(tg.tensor(g))
    assert xt.grad.array.tobytes() == (g * (y.array != 0)).tobytes()


def test_streamed_leaves_other_layouts_to_the_caller():
    a = np.ones((4, 6), np.float32)
    assert not pool.streamed(lambda o, x: None, a, a.T)  # another shape
    assert not pool.streamed(lambda o, x: None, a, a[:2])  # another shape
    sq = np.ones((6, 6), np.float32)
    assert not pool.streamed(lambda o, x: None, sq, np.ones_like(sq).T)  # mixed layouts
    assert not pool.streamed(lambda o, x: None, sq[:, ::2], sq[:, ::2])  # not dense
    out = np.empty_like(a)
    assert pool.streamed(lambda o, x: np.negative(x, out=o), out, a) and (out == -1).all()


def test_streamed_runs_on_one_shared_layout(two_threads, monkeypatch):
    """Arrays dense in one layout other than C order (channels-last activations and their
    gradients) stream over their memory, split as C-ordered ones are."""
    splits = []
    run = pool._Pool.run
    monkeypatch.setattr(pool._Pool, "run",
                        lambda self, f, spans: (splits.append(len(spans)), run(self, f, spans)))
    x = np.random.default_rng(0).standard_normal((4, 2 * pool.STREAM_ROW // 16, 4, 4))
    x = memory_formats.as_format(np, x.astype(np.float32), memory_formats.channels_last)
    out = np.empty_like(x)
    assert out.strides == x.strides
    assert pool.streamed(lambda o, a: np.negative(a, out=o), out, x) and splits
    np.testing.assert_array_equal(out, -x)
    c = pool.copy(x)
    assert c.strides == x.strides and c.tobytes() == x.tobytes()


def test_copy_splits_and_leaves_other_arrays_to_the_caller(two_threads, monkeypatch):
    splits = []
    run = pool._Pool.run
    monkeypatch.setattr(pool._Pool, "run",
                        lambda self, f, spans: (splits.append(len(spans)), run(self, f, spans)))
    a = np.arange(3 * pool.STREAM_ROW + 5, dtype=np.float32).reshape(1, -1)
    c = pool.copy(a)
    assert splits and c.shape == a.shape and c.tobytes() == a.tobytes()
    assert not np.shares_memory(a, c)
    assert pool.copy(a[:, ::2]) is None  # not C-contiguous: the caller copies
    assert pool.copy([1.0]) is None


def test_leaf_gradients_are_private_copies_when_split(two_threads):
    """A rule that hands the same array to two leaves (add) and the seed itself: every
    ``.grad`` its own array."""
    seed = np.ones((4, pool.STREAM_ROW), np.float32)
    x, y = (tg.tensor(np.zeros_like(seed), requires_grad=True) for _ in range(2))
    (x + y).backward(tg.tensor(seed))
    x.grad.array[0, 0] = 7
    assert y.grad.array[0, 0] == 1 and seed[0, 0] == 1
    z = tg.tensor(np.zeros_like(seed), requires_grad=True)
    s = tg.tensor(seed)
    z.backward(s)
    assert not np.shares_memory(z.grad.array, s.array)


@pytest.mark.parametrize("kw", [dict(momentum=0.9, weight_decay=1e-2),
                                dict(momentum=0.9, nesterov=True),
                                dict(momentum=0.5, dampening=0.3), dict(weight_decay=1e-3)])
def test_sgd_is_bitwise_equal_at_every_thread_count(two_threads, kw, monkeypatch):
    from tapegrad import optim

    rng = np.random.default_rng(6)
    p0 = rng.standard_normal((3, pool.STREAM_ROW + 5)).astype(np.float32)  # rows and a tail
    grads = [rng.standard_normal(p0.shape).astype(np.float32) for _ in range(3)]
    splits = []
    run = pool._Pool.run

    def steps(n):
        tg.set_num_threads(n)
        p = tg.tensor(p0.copy(), requires_grad=True)
        opt = optim.SGD([p], lr=0.1, **kw)
        for g in grads:  # the first step sets the momentum buffer, the others update it
            p.grad = tg.tensor(g)
            opt.step()
        return p.array

    one = steps(1)
    monkeypatch.setattr(pool._Pool, "run",
                        lambda self, f, spans: (splits.append(len(spans)), run(self, f, spans)))
    assert steps(2).tobytes() == one.tobytes() and splits
