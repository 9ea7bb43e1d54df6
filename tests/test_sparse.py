"""tapegrad.sparse: COO sparse matrices and their products with dense tensors.

Without torch: against a dense reference built here (np.add.at into zeros, then NumPy's
matmul), on both host kernels (scipy's CSR and the xp formula) and on the strict fake
device; gradchecks and gradgradchecks; the refusals. With torch (skipped without it):
values, gradients of values, dense operands and sparse leaves, coalesce, to_dense,
to_sparse, sparse.sum/softmax, and a GCN trained a few steps.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import sparse
from tapegrad.errors import ArgumentError, ArgumentTypeError, DTypeError, GraphError, ShapeError
from tapegrad.testing.gradcheck import gradcheck, gradgradcheck

TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-12),
       np.float16: dict(rtol=2e-2, atol=2e-2)}


try:
    import scipy.sparse as _scipy_sparse
except ImportError:
    _scipy_sparse = None
try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")
KERNELS = [pytest.param("scipy", marks=pytest.mark.skipif(_scipy_sparse is None,
                                                          reason="needs scipy")), "xp"]


def on_kernels(test):
    """Run ``test`` with the products on scipy's CSR kernels and on the xp formula (its
    ``kernel`` argument names which)."""

    @functools.wraps(test)
    def run(*args, kernel, **kwargs):
        before, sparse.USE_SCIPY = sparse.USE_SCIPY, kernel == "scipy"
        try:
            return test(*args, kernel=kernel, **kwargs)
        finally:
            sparse.USE_SCIPY = before

    return pytest.mark.parametrize("kernel", KERNELS)(run)


@st.composite
def cases(draw, dtypes=(np.float32, np.float64)):
    """A COO matrix (rows, cols, values, shape), repeats likely, and a dense operand."""
    m, k, n = draw(st.integers(0, 6)), draw(st.integers(0, 6)), draw(st.integers(0, 5))
    nnz = draw(st.integers(0, 14)) if m and k else 0
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows, cols = rng.integers(0, max(m, 1), nnz), rng.integers(0, max(k, 1), nnz)
    if nnz > 2 and draw(st.booleans()):  # repeated positions: coalesce sums them
        rows[-2:], cols[-2:] = rows[0], cols[0]
    dtype = draw(st.sampled_from(dtypes))
    values = rng.standard_normal(nnz).astype(dtype)
    dense = rng.standard_normal((k, n) if draw(st.integers(0, 3)) else (k,)).astype(dtype)
    return rows, cols, values, (m, k), dense


def reference(rows, cols, values, shape):
    out = np.zeros(shape, values.dtype)
    np.add.at(out, (rows, cols), values)
    return out


def make(rows, cols, values, shape, **kw):
    return tg.sparse_coo_tensor(np.stack([rows, cols]), values, shape, **kw)


# ------------------------------------------------------------------ without torch

@on_kernels
@given(case=cases())
def test_product_and_gradients_match_a_dense_reference(kernel, case):
    rows, cols, values, shape, dense = case
    tol = TOL[values.dtype.type]
    v = tg.tensor(values, requires_grad=True)
    d = tg.tensor(dense, requires_grad=True)
    out = make(rows, cols, v, shape) @ d
    a = reference(rows, cols, values, shape)
    assert out.dtype == values.dtype and out.shape == (a @ dense).shape
    np.testing.assert_allclose(out.numpy(), a @ dense, **tol)
    g = np.random.default_rng(1).standard_normal(out.shape).astype(values.dtype)
    out.backward(tg.tensor(g))
    g2, d2 = (g[:, None], dense[:, None]) if dense.ndim == 1 else (g, dense)
    # d(dense) = A^T g; d(values) = (g D^T) read at each entry, repeats alike
    np.testing.assert_allclose(d.grad.numpy(), (a.T @ g2).reshape(dense.shape), **tol)
    np.testing.assert_allclose(v.grad.numpy(), (g2 @ d2.T)[rows, cols], **tol)


@given(case=cases(dtypes=(np.float64,)))
def test_coalesce_and_to_dense_match_the_reference(case):
    rows, cols, values, shape, _ = case
    v = tg.tensor(values, requires_grad=True)
    s = make(rows, cols, v, shape)
    assert s.is_coalesced() == (len(rows) <= 1) and s._nnz() == len(rows)
    c = s.coalesce()
    a = reference(rows, cols, values, shape)
    keys = np.unique(rows * shape[1] + cols)
    assert c.is_coalesced() and c._nnz() == len(keys)
    np.testing.assert_array_equal(c.indices().numpy(), np.stack(np.divmod(keys, shape[1]))
                                  if len(keys) else np.zeros((2, 0), np.int64))
    np.testing.assert_allclose(c.values().numpy(), a.reshape(-1)[keys])
    np.testing.assert_allclose(s.to_dense().numpy(), a)
    np.testing.assert_allclose(c.to_dense().numpy(), a)
    w = np.arange(a.size, dtype=np.float64).reshape(a.shape)
    ((c.to_dense() * tg.tensor(w)).sum() + (c.values() * 2).sum()).backward()
    np.testing.assert_allclose(v.grad.numpy(), w[rows, cols] + 2)


@on_kernels
@pytest.mark.parametrize("vector", [False, True])
def test_gradcheck_and_second_order(kernel, vector):
    rng = np.random.default_rng(0)
    rows, cols = np.array([0, 2, 2, 1, 0, 2]), np.array([1, 0, 3, 3, 1, 0])
    values = rng.standard_normal(6)
    dense = rng.standard_normal(4 if vector else (4, 3))

    def f(v, d):
        return make(rows, cols, v, (3, 4)) @ d

    assert gradcheck(f, [values, dense])
    assert gradgradcheck(f, [values, dense])
    # the transposed product's own rules
    assert gradgradcheck(lambda v, d: make(rows, cols, v, (3, 4)).t() @ d,
                         [values, rng.standard_normal(3 if vector else (3, 2))])


@on_kernels
def test_every_product_entry_point_agrees(kernel):
    rows, cols = np.array([0, 1, 1, 3]), np.array([2, 0, 2, 1])
    s = make(rows, cols, np.array([1.0, -2.0, 0.5, 3.0]), (4, 3))
    x = tg.tensor(np.random.default_rng(2).standard_normal((3, 2)))
    want = reference(rows, cols, s._values().numpy(), (4, 3)) @ x.numpy()
    for got in (s @ x, tg.mm(s, x), tg.matmul(s, x), s.mm(x), s.matmul(x), tg.spmm(s, x),
                tg.sparse.mm(s, x), tg.addmm(tg.zeros(4, 2, dtype=tg.float64), s, x)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    # dense operands: tapegrad.mm's product
    np.testing.assert_allclose(tg.spmm(s.to_dense(), x).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(tg.sparse.mm(s.to_dense(), x).numpy(), want, rtol=1e-12)
    assert not tg.ones(2).is_sparse and s.is_sparse


@on_kernels
@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "float16"])
def test_other_dtypes(kernel, dtype):
    rows, cols = np.array([0, 1, 1, 0]), np.array([2, 0, 2, 2])
    values = np.array([1, 2, 3, 4], dtype=dtype)
    dense = np.arange(6, dtype=dtype).reshape(3, 2)
    out = make(rows, cols, values, (2, 3)) @ tg.tensor(dense)
    assert out.dtype == np.dtype(dtype)
    want = reference(rows, cols, values.astype(np.float64), (2, 3)) @ dense.astype(np.float64)
    np.testing.assert_allclose(out.numpy().astype(np.float64), want)


@on_kernels
def test_float16_gradients_follow_float32(kernel):
    rng = np.random.default_rng(3)
    rows, cols = rng.integers(0, 5, 20), rng.integers(0, 4, 20)
    values, dense = rng.standard_normal(20), rng.standard_normal((4, 3))
    grads = {}
    for dt in (np.float16, np.float32):
        v, d = tg.tensor(values, dtype=dt, requires_grad=True), tg.tensor(dense, dtype=dt,
                                                                       requires_grad=True)
        (make(rows, cols, v, (5, 4)) @ d).sum().backward()
        assert v.grad.dtype == dt and d.grad.dtype == dt
        grads[dt] = (v.grad.numpy().astype(np.float32), d.grad.numpy().astype(np.float32))
    for a, b in zip(grads[np.float16], grads[np.float32]):
        np.testing.assert_allclose(a, b, rtol=1e-2, atol=2e-2)


def test_sparse_leaf_gradient_is_sparse_at_the_coalesced_entries():
    rows, cols = np.array([0, 1, 1, 0]), np.array([2, 0, 2, 2])
    s = make(rows, cols, [1.0, 2.0, 3.0, 4.0], (2, 3), requires_grad=True)
    assert s.is_leaf and s.requires_grad and s.grad_fn is None and s.grad is None
    d = np.random.default_rng(4).standard_normal((3, 2)).astype(np.float32)
    tg.sparse.mm(s, tg.tensor(d)).sum().backward()
    g = s.grad
    assert g.is_sparse and g.is_coalesced()
    np.testing.assert_array_equal(g.indices().numpy(), [[0, 1, 1], [2, 0, 2]])
    np.testing.assert_allclose(g.values().numpy(), (np.ones((2, 2)) @ d.T)[[0, 1, 1], [2, 0, 2]],
                               rtol=1e-6)
    s.grad = None
    (s.to_dense() * 3).sum().backward()  # also through to_dense and sparse.sum
    tg.sparse.sum(s).backward()
    np.testing.assert_allclose(s.grad.values().numpy(), [4.0, 4.0, 4.0])
    # PyTorch's mm/matmul/spmm give a sparse leaf a dense gradient: refused, not masked
    for product in (lambda a, b: a @ b, tg.mm, tg.spmm, tg.matmul):
        with pytest.raises(GraphError, match="dense gradient.*tapegrad.sparse.mm"):
            product(s, tg.tensor(d))
        with pytest.raises(GraphError, match="dense gradient"):
            product(s.coalesce().t().t() * 2, tg.tensor(d))
    with tg.no_grad():
        np.testing.assert_allclose((s @ tg.tensor(d)).numpy(),
                                   reference(rows, cols, np.array([1, 2, 3, 4.0]), (2, 3)) @ d,
                                   rtol=1e-6)
    np.testing.assert_allclose((s.detach() @ tg.tensor(d)).numpy(),
                               tg.sparse.mm(s, tg.tensor(d)).detach().numpy())


def test_requires_grad_rules():
    v = tg.tensor([1.0, 2.0], requires_grad=True)
    s = tg.sparse_coo_tensor([[0, 1], [1, 0]], v, (2, 2))
    assert not s.is_leaf and s.grad_fn is not None and s.requires_grad
    with pytest.raises(GraphError, match="only leaf sparse tensors"):
        s.requires_grad_()
    assert not s._values().requires_grad  # as PyTorch: _values() is detached
    assert tg.sparse_coo_tensor([[0, 1], [1, 0]], v, (2, 2), requires_grad=True).grad_fn
    plain = tg.tensor([1.0, 2.0])
    leaf = tg.sparse_coo_tensor([[0, 1], [1, 0]], plain, (2, 2)).requires_grad_()
    assert leaf.is_leaf and not plain.requires_grad  # the user's values stay as they were
    with pytest.raises(DTypeError, match="floating"):
        tg.sparse_coo_tensor([[0], [1]], [1], (2, 2), requires_grad=True)


def test_values_share_memory_with_the_source():
    v = tg.tensor([1.0, 2.0])
    s = tg.sparse_coo_tensor([[0, 1], [1, 0]], v, (2, 2))
    v[0] = 5.0  # as PyTorch, which keeps the values tensor itself
    assert s.to_dense().numpy()[0, 1] == 5.0


def test_to_sparse_round_trip_and_masked_gradient():
    a = np.array([[0.0, 2.0, 0.0], [np.nan, 0.0, -3.0]])
    x = tg.tensor(a, requires_grad=True)
    s = x.to_sparse()
    assert s.is_coalesced() and s.shape == (2, 3) and s._nnz() == 3
    np.testing.assert_array_equal(s.indices().numpy(), [[0, 1, 1], [1, 0, 2]])
    np.testing.assert_array_equal(s.to_dense().numpy(), a)
    y = tg.tensor([[1.0], [2.0], [3.0]], dtype=tg.float64)
    x2 = tg.tensor(np.nan_to_num(a, nan=1.5), requires_grad=True)
    tg.sparse.mm(x2.to_sparse(), y).sum().backward()
    np.testing.assert_allclose(x2.grad.numpy(), [[0, 2, 0], [1, 0, 3]])
    with pytest.raises(GraphError, match="to_sparse.*dense gradient"):
        x2.to_sparse() @ y
    np.testing.assert_array_equal(tg.zeros(2, 3).to_sparse().to_dense().numpy(), 0)


def test_sum_and_softmax_match_references():
    rows, cols = np.array([0, 1, 1, 0, 1]), np.array([2, 0, 2, 2, 1])
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    s = make(rows, cols, values, (3, 3))
    assert float(tg.sparse.sum(s)) == 15.0 and tg.sparse.sum(s, (0, 1)).ndim == 0
    assert tg.sparse.sum(make(rows, cols, values.astype(np.int32), (3, 3))).dtype == np.int64
    assert tg.sparse.sum(s, dtype=tg.float32).dtype == np.float32
    dense = reference(rows, cols, values, (3, 3))
    present = reference(rows, cols, np.ones(5), (3, 3)) > 0
    for dim in (0, 1, -1):
        out = tg.sparse.softmax(s, dim)
        assert out.is_coalesced()
        e = np.where(present, np.exp(dense - dense.max(axis=dim, keepdims=True)), 0)
        want = e / np.where(present.any(axis=dim, keepdims=True), e.sum(axis=dim,
                                                                      keepdims=True), 1)
        np.testing.assert_allclose(out.to_dense().numpy(), want, rtol=1e-12)
    assert gradgradcheck(lambda v: tg.sparse.softmax(make(rows, cols, v, (3, 3)), 1).to_dense()
                         * tg.tensor(np.arange(9.0).reshape(3, 3)), [values])
    big = tg.sparse.softmax(make(rows, cols, values * 1000, (3, 3)), 0).values().numpy()
    assert np.isfinite(big).all()  # each group's largest value is subtracted first


def test_methods_and_printing():
    s = tg.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3))
    assert (s.shape, s.size(), s.size(-1), s.dim(), s.ndim, s.numel()) == ((2, 3), (2, 3), 3,
                                                                            2, 2, 6)
    assert (s.dtype, s.device, s.sparse_dim(), s.dense_dim()) == (tg.float32, tg.device("cpu"),
                                                                  2, 0)
    assert s.to(tg.float64).dtype == tg.float64 and s.double().is_coalesced() is False
    assert s.to("cpu") is s and s.cpu() is s and s.float() is s
    t = s.t()
    assert t.shape == (3, 2) and not t.is_coalesced()
    np.testing.assert_array_equal(t.to_dense().numpy(), s.to_dense().numpy().T)
    np.testing.assert_allclose((-(2 * s) / 4).to_dense().numpy(), -s.to_dense().numpy() / 2)
    assert tg.sparse_coo_tensor([[0, 1], [2, 0]], [1.0, 2.0]).shape == (2, 3)  # inferred
    assert tg.sparse_coo_tensor([[], []], [], (2, 3))._nnz() == 0
    assert repr(s) == (
        "tensor(indices=tensor([[0, 1, 1],\n"
        "                       [2, 0, 2]]),\n"
        "       values=tensor([3., 4., 5.]),\n"
        "       size=(2, 3), nnz=3, layout=sparse_coo)")
    v = tg.tensor([1.0, 2.0], dtype=tg.float64, requires_grad=True)
    assert repr(tg.sparse_coo_tensor([[0, 1], [0, 0]], v, (2, 2))).endswith(
        "size=(2, 2), nnz=2, dtype=float64, layout=sparse_coo, grad_fn=<SparseValues>)")
    with pytest.raises(GraphError, match="uncoalesced.*coalesce"):
        tg.sparse_coo_tensor([[0, 0], [1, 1]], [1.0, 2.0]).values()


def test_errors():
    i, v = [[0, 1], [2, 0]], [1.0, 2.0]
    with pytest.raises(ArgumentError, match=r"column indices must be in \[0, 2\).*got 2"):
        tg.sparse_coo_tensor(i, v, (2, 2))
    with pytest.raises(ArgumentError, match=">= 0"):
        tg.sparse_coo_tensor([[0, -1], [0, 0]], v, (2, 2))
    with pytest.raises(ShapeError, match="2-D"):
        tg.sparse_coo_tensor(i, v, (2, 3, 4))
    with pytest.raises(ShapeError, match=r"\(2, nnz\)"):
        tg.sparse_coo_tensor([[0, 1], [2, 0], [0, 0]], v, (2, 3, 1))
    with pytest.raises(ShapeError, match="same number of entries"):
        tg.sparse_coo_tensor(i, [1.0, 2.0, 3.0], (2, 3))
    with pytest.raises(ShapeError, match="hybrid"):
        tg.sparse_coo_tensor(i, [[1.0], [2.0]], (2, 3))
    with pytest.raises(DTypeError, match="indices must be integers"):
        tg.sparse_coo_tensor(np.array(i, dtype=float), v, (2, 3))
    with pytest.raises(ArgumentError, match="is_coalesced=True"):
        tg.sparse_coo_tensor([[1, 0], [0, 0]], v, (2, 2), is_coalesced=True)
    s = tg.sparse_coo_tensor(i, v, (2, 3))
    with pytest.raises(ShapeError, match=r"inner sizes 3 and 2 differ"):
        s @ tg.ones(2, 2)
    with pytest.raises(ShapeError, match="must be 2-D"):
        tg.mm(s, tg.ones(3))
    with pytest.raises(ShapeError, match="2-D or 1-D"):
        s @ tg.ones(2, 3, 4)
    with pytest.raises(DTypeError, match="one dtype"):
        s @ tg.ones(3, 2, dtype=tg.float64)
    with pytest.raises(DTypeError, match="bool"):
        tg.sparse_coo_tensor(i, [True, False], (2, 3)) @ tg.ones(3, 2, dtype=tg.bool)
    with pytest.raises(ArgumentTypeError, match=r"dense @ sparse.*\(s.t\(\) @ d.t\(\)\).t\(\)"):
        tg.ones(2, 2) @ s
    with pytest.raises(ArgumentTypeError, match="dense @ sparse"):
        tg.mm(tg.ones(2, 2), s)
    with pytest.raises(ArgumentTypeError, match="dense @ sparse"):
        np.ones((2, 2)) @ s
    with pytest.raises(ArgumentTypeError, match="sparse @ sparse"):
        s @ s.t()
    with pytest.raises(ArgumentTypeError, match="scaled by a number only"):
        s * tg.ones(2, 3)
    with pytest.raises(ArgumentTypeError, match="elementwise"):
        s + s
    with pytest.raises(ArgumentTypeError, match="in-place"):
        s *= 2
    with pytest.raises(ArgumentError, match="1-D sparse tensor"):
        tg.sparse.sum(s, 1)
    with pytest.raises(ArgumentError, match="twice"):
        tg.sparse.sum(s, (0, 0))
    with pytest.raises(ArgumentError, match="out of range"):
        tg.sparse.softmax(s, 2)
    with pytest.raises(DTypeError, match="floating"):
        tg.sparse.softmax(tg.sparse_coo_tensor(i, [1, 2], (2, 3)), 1)
    with pytest.raises(ArgumentError, match="reduce"):
        tg.sparse.mm(s, tg.ones(3, 2), reduce="amax")
    with pytest.raises(ShapeError, match="2-D"):
        tg.ones(3).to_sparse()
    with pytest.raises(ShapeError, match="2-D"):
        tg.ones(2, 2, 2).to_sparse()
    with pytest.raises(ShapeError, match="sparse_dim"):
        tg.ones(2, 2).to_sparse(1)
    with pytest.raises(ArgumentError, match="COO"):
        tg.ones(2, 2).to_sparse(layout="sparse_csr")
    with pytest.raises(ArgumentTypeError, match="sparse_coo_tensor"):
        sparse.SparseTensor()


def _on_device(device, dtype):
    """Products, gradients (of values, dense operands and a sparse leaf), coalesce,
    to_dense, to_sparse, softmax and sum on ``device``, as host arrays."""
    rng = np.random.default_rng(5)
    rows, cols = np.array([0, 2, 2, 1, 0]), np.array([1, 0, 3, 3, 1])
    values, dense = rng.standard_normal(5).astype(dtype), rng.standard_normal((4, 2)).astype(dtype)
    v = tg.tensor(values, device=device, requires_grad=True)
    d = tg.tensor(dense, device=device, requires_grad=True)
    s = tg.sparse_coo_tensor(np.stack([rows, cols]), v, (3, 4))
    leaf = tg.sparse_coo_tensor(np.stack([rows, cols]), values, (3, 4), device=device,
                                requires_grad=True)
    out = (s @ d).sum() + (s.t() @ d[:3, 0]).sum() + s.coalesce().to_dense().sum() \
        + (tg.sparse.softmax(s, 1).to_dense() * 2).sum() + tg.sparse.sum(s) \
        + tg.sparse.mm(leaf, d).sum() + tg.sparse.mm(d.to_sparse(), d.t()).sum()
    out.backward()
    for t in (v.grad, d.grad, leaf.grad.values(), s._indices()):
        assert t.device is tg.device(device) if isinstance(device, str) else device
    ints = make(rows, cols, np.arange(5, dtype=np.int32), (3, 4)).to(device) @ tg.tensor(
        np.arange(8, dtype=np.int32).reshape(4, 2), device=device)
    return [out.item(), v.grad._host(), d.grad._host(), leaf.grad.values()._host(),
            leaf.grad.indices()._host(), ints._host()]


def test_runs_on_the_fake_device():
    """The xp formulas keep to the device's array module (no host NumPy leaks)."""
    from tapegrad.testing.fakedevice import fake_device

    dev = fake_device()
    for a, b in zip(_on_device("cpu", np.float64), _on_device(dev, np.float64)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    rng = np.random.default_rng(0)
    rows, cols = np.array([0, 2, 2, 1, 0]), np.array([1, 0, 3, 3, 1])
    assert gradgradcheck(lambda v, d: make(rows, cols, v, (3, 4)) @ d,
                         [rng.standard_normal(5), rng.standard_normal((4, 2))], device=dev)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_the_cpu_on_a_gpu(dtype):
    """cuSPARSE's products (float32/float64) and the xp formula (int32) on CuPy."""
    for a, b in zip(_on_device("cpu", dtype), _on_device("cuda", dtype)):
        np.testing.assert_allclose(a, b, **TOL[dtype])


def test_gcn_with_sparse_and_dense_adjacency_agree():
    """A two-layer GCN trained with a sparse adjacency and with the same one dense."""
    idx, norm, x, y, w1, w2 = _graph()
    losses = {}
    for kind in ("sparse", "dense"):
        adj = tg.sparse_coo_tensor(idx, norm, (len(x), len(x)))
        adj = adj if kind == "sparse" else adj.to_dense()
        losses[kind] = _train(tg, tg.tensor(x), tg.tensor(y), adj, w1, w2)
    np.testing.assert_allclose(losses["sparse"][0], losses["dense"][0], rtol=1e-10)
    for a, b in zip(losses["sparse"][1], losses["dense"][1]):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def _graph(n=12, seed=6):
    """A random undirected graph with self-loops: its symmetric-normalized adjacency
    D^-1/2 (A + I) D^-1/2 as COO entries; features, labels, weights."""
    rng = np.random.default_rng(seed)
    a = np.triu(rng.random((n, n)) < 0.25, 1)
    a = a | a.T | np.eye(n, dtype=bool)
    deg = a.sum(1)
    rows, cols = np.nonzero(a)
    norm = 1 / np.sqrt(deg[rows] * deg[cols])
    return (np.stack([rows, cols]), norm, rng.standard_normal((n, 5)), rng.integers(0, 3, n),
            rng.standard_normal((5, 8)) * 0.5, rng.standard_normal((8, 3)) * 0.5)


def _train(lib, x, y, adj, w1, w2, steps=5):
    """``adj @ relu(adj @ (x @ W1)) @ W2`` (the sparse product written three ways), the
    cross entropy, SGD; the losses and final weights."""
    if lib is tg:
        params = [tg.nn.Parameter(tg.tensor(w)) for w in (w1, w2)]
        opt, ce = tg.optim.SGD(params, lr=0.5, momentum=0.9), tg.nn.functional.cross_entropy
    else:
        params = [lib.nn.Parameter(lib.tensor(w)) for w in (w1, w2)]
        opt, ce = lib.optim.SGD(params, lr=0.5, momentum=0.9), lib.nn.functional.cross_entropy
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        support = lib.mm(x, params[0])
        h = lib.relu(lib.spmm(adj, support) if adj.is_sparse else adj @ support)
        out = lib.sparse.mm(adj, h @ params[1]) if adj.is_sparse else adj.mm(h @ params[1])
        loss = ce(out, y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, [p.detach().numpy() for p in params]


# ------------------------------------------------------------------ against torch

def _torch_sparse(torch, rows, cols, values, shape, **kw):
    return torch.sparse_coo_tensor(torch.tensor(np.stack([rows, cols])), values, shape,
                                   check_invariants=True, **kw)


@needs_torch
@on_kernels
@given(case=cases())
def test_products_and_gradients_match_torch(kernel, case):
    rows, cols, values, shape, dense = case
    tol = TOL[values.dtype.type]
    g = np.random.default_rng(7).standard_normal(shape[:1] + dense.shape[1:]).astype(
        values.dtype)
    for name in ("@", "mm", "sparse.mm"):
        if name != "@" and dense.ndim == 1:
            continue
        got = []
        for lib in (tg, torch):
            v = lib.tensor(values, requires_grad=True)
            d = lib.tensor(dense, requires_grad=True)
            s = (make(rows, cols, v, shape) if lib is tg else
                 _torch_sparse(torch, rows, cols, v, shape))
            out = s @ d if name == "@" else lib.mm(s, d) if name == "mm" else lib.sparse.mm(s, d)
            out.backward(lib.tensor(g))
            got.append([out.detach().numpy(), v.grad.numpy(), d.grad.numpy()])
        for a, b in zip(*got):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_allclose(a, b, **tol)


@needs_torch
@given(case=cases(dtypes=(np.float64, np.float32)))
def test_coalesce_to_dense_and_leaf_gradients_match_torch(case):
    rows, cols, values, shape, _ = case
    tol = TOL[values.dtype.type]
    ours = make(rows, cols, values, shape, requires_grad=True)
    theirs = _torch_sparse(torch, rows, cols, torch.tensor(values), shape, requires_grad=True)
    assert ours.is_coalesced() == theirs.is_coalesced()
    c, tc = ours.coalesce(), theirs.coalesce()
    assert c.is_coalesced() and tc.is_coalesced()
    np.testing.assert_array_equal(c.indices().numpy(), tc.indices().numpy())
    np.testing.assert_allclose(c.values().detach().numpy(), tc.values().detach().numpy(), **tol)
    np.testing.assert_allclose(ours.to_dense().detach().numpy(),
                               theirs.to_dense().detach().numpy(), **tol)
    w = np.random.default_rng(8).standard_normal(shape).astype(values.dtype)
    (ours.to_dense() * tg.tensor(w)).sum().backward()
    (theirs.to_dense() * torch.tensor(w)).sum().backward()
    if ours.grad is None:  # no entries: nothing reached the values
        assert len(rows) == 0
        return
    tgrad = theirs.grad.coalesce()
    np.testing.assert_array_equal(ours.grad.indices().numpy(), tgrad.indices().numpy())
    np.testing.assert_allclose(ours.grad.values().numpy(), tgrad.values().numpy(), **tol)


@needs_torch
def test_torch_gives_a_sparse_leaf_a_dense_gradient_through_mm():
    """What the GraphError in _multiply stands for: PyTorch's mm/matmul give a sparse
    leaf (and x of x.to_sparse()) a dense gradient, torch.sparse.mm a sparse one."""
    s = _torch_sparse(torch, np.array([0, 1]), np.array([1, 0]), torch.tensor([1.0, 2.0]),
                      (2, 2), requires_grad=True)
    (s @ torch.ones(2, 2)).sum().backward()
    assert not s.grad.is_sparse and (s.grad != 0).all()
    s.grad = None
    torch.sparse.mm(s, torch.ones(2, 2)).sum().backward()
    assert s.grad.is_sparse


@needs_torch
def test_to_sparse_sum_and_softmax_match_torch():
    rng = np.random.default_rng(9)
    a = rng.standard_normal((4, 5)) * (rng.random((4, 5)) < 0.5)
    ours, theirs = tg.tensor(a).to_sparse(), torch.tensor(a).to_sparse()
    np.testing.assert_array_equal(ours.indices().numpy(), theirs.indices().numpy())
    np.testing.assert_array_equal(ours.values().numpy(), theirs.values().numpy())
    rows, cols = np.array([0, 1, 1, 0, 1, 3]), np.array([2, 0, 2, 2, 1, 4])
    values = rng.standard_normal(6)
    w = rng.standard_normal((4, 5))
    for dim in (0, 1, -1):
        got = []
        for lib in (tg, torch):
            v = lib.tensor(values, requires_grad=True)
            s = make(rows, cols, v, (4, 5)) if lib is tg else \
                _torch_sparse(torch, rows, cols, v, (4, 5))
            out = lib.sparse.softmax(s, dim)
            # torch 2.13's backward for a negative dim is wrong (central differences agree
            # with its dim=1 gradient, and with tapegrad's): the gradient is taken at dim % 2
            grad_out = out if lib is tg or dim >= 0 else lib.sparse.softmax(s, dim % 2)
            (grad_out.to_dense() * lib.tensor(w)).sum().backward()
            total = lib.sparse.sum(s)
            got.append([out.indices().numpy(), out.values().detach().numpy(), v.grad.numpy(),
                        total.detach().numpy()])
        for x, y in zip(*got):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-14)


@needs_torch
@on_kernels
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gcn_training_matches_torch(kernel, dtype):
    """A two-layer GCN (Kipf & Welling's layer, adj @ (x @ W)) trained five steps, and the
    same with learnable edge weights (the values require grad, as attention does)."""
    idx, norm, x, y, w1, w2 = _graph()
    x, norm, w1, w2 = (a.astype(dtype) for a in (x, norm, w1, w2))
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=2e-4, atol=2e-5)
    n = len(x)
    results = []
    for lib in (tg, torch):
        adj = (tg.sparse_coo_tensor(idx, norm, (n, n)) if lib is tg else
               torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(norm), (n, n),
                                       check_invariants=True))
        results.append(_train(lib, lib.tensor(x), lib.tensor(y), adj, w1, w2))
    np.testing.assert_allclose(results[0][0], results[1][0], **tol)
    for a, b in zip(results[0][1], results[1][1]):
        np.testing.assert_allclose(a, b, **tol)
    edge = []
    for lib in (tg, torch):
        e = lib.tensor(np.ones(len(norm), dtype), requires_grad=True)
        xs, ws = lib.tensor(x), lib.tensor(w1)
        for _ in range(3):
            adj = lib.sparse_coo_tensor(lib.tensor(idx), e * lib.tensor(norm), (n, n),
                                        check_invariants=True)
            loss = ((adj @ (xs @ ws)) ** 2).mean()
            e.grad = None
            loss.backward()
            with lib.no_grad():
                e -= 0.1 * e.grad
        edge.append((float(loss.detach()), e.detach().numpy()))
    np.testing.assert_allclose(edge[0][0], edge[1][0], **tol)
    np.testing.assert_allclose(edge[0][1], edge[1][1], **tol)
