"""tapegrad.autograd anomaly mode: lines, forward notes/errors, backward errors,
the masked-branch diagnosis, and that it costs nothing when off."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import engine
from tapegrad.autograd import (
    AnomalyError,
    detect_anomaly,
    instrument,
    is_anomaly_enabled,
    set_detect_anomaly,
)
from tapegrad.errors import GraphError, NonFiniteError
from tapegrad.tape import Function

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # log(0) etc. on purpose


def _x(values):
    return tg.tensor(np.array(values, dtype=np.float64), requires_grad=True)


def _raises(fn):
    with pytest.raises(AnomalyError) as info:
        fn()
    return str(info.value)


def _hot_path_is_original():
    return (Function.__dict__["apply"] is instrument._ORIG_APPLY
            and Function.__dict__["_apply_unary"] is instrument._ORIG_UNARY
            and engine._observe is None)


# ------------------------------------------------------------------ switches
def test_torch_names_and_aliases():
    assert tg.autograd.grad is tg.grad and tg.autograd.backward is tg.backward
    assert tg.autograd.Function is tg.Function
    assert issubclass(AnomalyError, NonFiniteError) and issubclass(AnomalyError, RuntimeError)
    assert not is_anomaly_enabled()
    with detect_anomaly():
        assert is_anomaly_enabled()
        with set_detect_anomaly(False):
            assert not is_anomaly_enabled()
        assert is_anomaly_enabled()
    assert not is_anomaly_enabled()
    set_detect_anomaly(True)
    try:
        assert is_anomaly_enabled()
    finally:
        set_detect_anomaly(False)
    assert not is_anomaly_enabled() and _hot_path_is_original()


def test_decorator():
    @detect_anomaly()
    def f():
        return is_anomaly_enabled()

    assert f() and not is_anomaly_enabled()


def test_off_costs_nothing(monkeypatch):
    """Off, the hot functions are the uninstrumented ones, no frame is walked and
    entries keep their own vjps; on, every recorded op gets its line."""
    calls = []
    real = instrument.user_site
    monkeypatch.setattr(instrument, "user_site", lambda *a: calls.append(1) or real(*a))
    assert _hot_path_is_original()
    x = _x([1.0, 2.0])
    y = (tg.log(x) * 2 + 1).sum()
    y.backward()
    assert calls == []
    assert all(e.site is None and "_tg_observed" not in e.fn.__dict__
               for e in tg.tape.entries(y))
    with detect_anomaly():
        assert not _hot_path_is_original()
        y = (tg.log(x) * 2 + 1).sum()
        y.backward()
    assert len(calls) >= 4 and _hot_path_is_original()
    assert all(e.site[0] == __file__ for e in tg.tape.entries(y))


# ------------------------------------------------------------------- forward
def test_forward_notes_without_raising():
    x = _x([0.0, 1.0, -1.0])
    with detect_anomaly() as anomaly:
        y = tg.where(x > 0, tg.log(x), 0.0)  # log(0) = -inf, log(-1) = NaN: thrown away
        z = tg.exp(x * 1000)  # +inf
    assert np.isfinite(y.array).all() and not np.isfinite(z.array).all()
    notes = {n.op: n for n in anomaly.forward_nonfinite}
    assert set(notes) == {"log", "exp"}
    assert notes["log"].kinds == ("NaN", "-inf") and notes["log"].shape == (3,)
    assert notes["log"].site[0] == __file__ and notes["exp"].kinds == ("inf",)
    assert y.grad_fn.edges[0][1].nonfinite is not None  # log's entry keeps a code mask


def test_check_forward_raises_at_first_op_with_finite_inputs():
    x = _x([0.0, 1.0])
    with detect_anomaly(check_forward=True):
        msg = _raises(lambda: tg.log(x))
        assert "`log`" in msg and "-inf x1" in msg and "from finite inputs" in msg
        assert "(2,) float64" in msg and "tg.log(x)" in msg and "test_anomaly.py" in msg
    nan = tg.tensor([np.nan, 1.0], requires_grad=True)
    with detect_anomaly(check_forward=True):
        y = tg.exp(nan)  # non-finite input: not this op's doing
        msg = _raises(lambda: tg.log(tg.tensor([1.0, 0.0])) + y)  # not recorded: still checked
        assert "`log`" in msg


def test_check_forward_unary_and_binary_paths():
    a, b = _x([1.0, 2.0]), _x([0.0, 1.0])
    with detect_anomaly(check_forward=True):
        assert "`div`" in _raises(lambda: a / b)
        assert "`div`" in _raises(lambda: a / 0.0)


# ------------------------------------------------------------------ backward
def test_genuine_nan_gets_the_plain_message():
    x = _x([0.0, 1.0])
    with detect_anomaly():
        y = tg.sqrt(x).sum()  # d sqrt/dx at 0 is inf, with incoming gradient 1
        msg = _raises(y.backward)
    assert "vjp of `sqrt`" in msg and "input 0" in msg and "tg.sqrt(x).sum()" in msg
    assert "incoming gradient was finite (and nonzero at 1 of those positions)" in msg
    assert "did not select" not in msg


def test_nonfinite_incoming_gradient_is_said():
    x = _x([1.0, 2.0])
    with detect_anomaly():
        y = tg.exp(x)
        msg = _raises(lambda: y.backward(tg.tensor([np.nan, 1.0])))
    assert "vjp of `exp`" in msg and "already non-finite" in msg


def test_no_error_when_gradients_are_finite():
    x = _x([1.0, 2.0])
    with detect_anomaly():
        tg.where(x > 1.5, tg.log(x), x).sum().backward()
    np.testing.assert_allclose(x.grad.array, [1.0, 0.5])


def test_check_nan_false_only_records():
    x = _x([0.0, 1.0])
    with detect_anomaly(check_nan=False):
        y = tg.where(x > 0, tg.log(x), 0.0)
        y.sum().backward()
    assert np.isnan(x.grad.array[0])
    assert y.grad_fn.site[0] == __file__


# ---------------------------------------------------- masked-branch diagnosis
def _masked(build, x):
    with detect_anomaly():
        y = build(x)
        return _raises(lambda: y.sum().backward())


def test_where_masked_log():
    msg = _masked(lambda x: tg.where(x > 0, tg.log(x), 0.0), _x([0.0, 1.0, 2.0]))
    assert "the gradient is NaN because `log`" in msg
    assert "produced -inf at 1 position that `where` did not select" in msg
    assert "mask the input of `log` as well" in msg.lower()
    assert "`log(where(mask, x, 1))`" in msg and "tg.where(x > 0, tg.log(x), 0.0)" in msg


def test_where_masked_sqrt_of_negative_and_of_zero():
    msg = _masked(lambda x: tg.where(x > 0, tg.sqrt(x), 0.0), _x([-1.0, 4.0]))
    assert "`sqrt`" in msg and "produced NaN at 1 position that `where` did not select" in msg
    # sqrt(0) = 0 is finite; its derivative is the infinite part
    msg = _masked(lambda x: tg.where(x > 0, tg.sqrt(x), 0.0), _x([0.0, 4.0]))
    assert "`sqrt`" in msg and "has an infinite derivative at 1 position" in msg
    assert "`where` did not select" in msg


def test_where_masked_division():
    d = _x([0.0, 2.0, 4.0])
    msg = _masked(lambda d: tg.where(d != 0, 1 / d, 0.0), d)
    assert "`div`" in msg and "produced inf at 1 position that `where`" in msg
    assert "a / where(mask, b, 1)" in msg


def test_masked_fill():
    def build(x):
        return tg.log(x).masked_fill(x <= 0, 0.0)

    msg = _masked(build, _x([0.0, 3.0]))
    assert "`log`" in msg and "did not select" in msg and "masked_fill(x <= 0, 0.0)" in msg


def test_multiplication_by_a_mask_and_indexing():
    def by_mask(x):
        return tg.log(x) * tg.tensor([0.0, 1.0], dtype=tg.float64)

    msg = _masked(by_mask, _x([0.0, 2.0]))
    assert "`log`" in msg and "`mul` did not select" in msg
    msg = _masked(lambda x: tg.log(x)[1:], _x([0.0, 2.0]))
    assert "`log`" in msg and "`getitem` did not select" in msg


def test_the_zeroing_op_is_found_through_ops_that_pass_zeros_on():
    # where zeroes the gradient; mul by 3 and add 1 only carry the zeros down to log
    msg = _masked(lambda x: tg.where(x > 0, tg.log(x) * 3 + 1, 0.0), _x([0.0, 2.0]))
    assert "`log`" in msg and "`where` did not select" in msg


def test_mixed_masked_and_genuine_is_plain():
    # position 0 is masked away, position 1 (x = 0 too) is selected: a real NaN/inf
    x = _x([0.0, 0.0, 1.0])
    mask = tg.tensor([False, True, True])
    msg = _masked(lambda x: tg.where(mask, tg.log(x), 0.0), x)
    assert "vjp of `log`" in msg and "nonzero at 1 of those positions" in msg


def test_a_user_function_is_named_by_its_class():
    class Recip(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return 1 / x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return -g / (x * x)

    msg = _masked(lambda x: tg.where(x != 0, Recip.apply(x), 0.0), _x([0.0, 2.0]))
    assert "`Recip`" in msg and "`Recip(where(mask, x, 1))`" in msg
    x = _x([2.0])
    Recip.apply(x).sum().backward()  # the class itself was left alone
    np.testing.assert_allclose(x.grad.array, [-0.25])


def test_create_graph_under_anomaly_mode():
    x = _x([1.0, 2.0])
    with detect_anomaly():
        (g,) = tg.grad((x ** 3).sum(), x, create_graph=True)
        (h,) = tg.grad(g.sum(), x)
    np.testing.assert_allclose(h.array, [6.0, 12.0])


def test_entry_recorded_under_anomaly_backward_after_it():
    """A tape recorded in anomaly mode backpropagates normally once it is off."""
    x = _x([0.0, 1.0])
    with detect_anomaly():
        y = tg.where(x > 0, tg.log(x), 0.0).sum()
    y.backward()  # PyTorch's rule: the check runs only while anomaly mode is on
    assert np.isnan(x.grad.array[0]) and _hot_path_is_original()


def _device(kind):
    if kind == "cuda":
        return tg.get_device("cuda")
    return pytest.importorskip("tapegrad.testing.fakedevice").fake_device()


@pytest.mark.parametrize("kind", ["fake", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_off_the_host(kind):
    """The checks use the device's array module (a strict stand-in for CuPy, or CuPy)."""
    dev = _device(kind)
    x = tg.tensor(np.array([0.0, 1.0, 2.0], dtype=np.float32), device=dev, requires_grad=True)
    with detect_anomaly() as anomaly:
        y = tg.where(x > 0, tg.log(x), 0.0)
        msg = _raises(lambda: y.sum().backward())
    assert "`log`" in msg and "produced -inf at 1 position that `where` did not select" in msg
    assert anomaly.forward_nonfinite[0].kinds == ("-inf",)
    with detect_anomaly(check_forward=True):
        assert "`log`" in _raises(lambda: tg.log(x))
    net = tg.nn.Linear(3, 2).to(dev)
    with tg.autograd.profile(model=net) as prof:
        net(x.reshape(1, 3)).sum().backward()
    assert [r.op for r in prof.records] == ["reshape", "linear", "sum"]
    assert prof.records[1].mean_abs_grad == pytest.approx(1.0)


def test_the_op_that_made_the_values_is_named_not_the_one_that_carried_them():
    # x * log(x) at 0: log makes -inf, mul turns it into NaN, and mul's vjp is where
    # the NaN gradient appears (0 * -inf); the fix is still log's input
    msg = _masked(lambda x: tg.where(x > 0, x * tg.log(x), 0.0), _x([0.0, 2.0]))
    assert "because `log`" in msg and "produced -inf at 1 position that `where`" in msg
    assert "the vjp of `mul`" in msg and "turns it into NaN (0 * inf)" in msg
    assert "Mask the input of `log` as well" in msg


def _train_two_steps(ctx):
    """Losses, input gradients, parameter gradients and state of two Adam steps of a
    small conv net with batch norm, dropout and a checkpointed block, run under ``ctx``."""
    from tapegrad import nn
    from tapegrad.utils import checkpoint

    tg.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Dropout(0.5), nn.Flatten(), nn.Linear(64, 3))
    opt = tg.optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    x0, y = rng.standard_normal((4, 3, 8, 8)).astype(np.float32), rng.integers(0, 3, 4)
    out = []
    for it in range(2):
        tg.manual_seed(7 + it)
        with ctx():
            x = tg.tensor(x0, requires_grad=True)
            logits = checkpoint(model[:5], x) if it else model[:5](x)
            loss = tg.nn.functional.cross_entropy(model[5:](logits), y)
            (gx,) = tg.grad(loss, x, create_graph=True)
            (loss + (gx * gx).sum()).backward()
        out += [loss.numpy(), x.grad.numpy()] + [p.grad.numpy().copy() for p in model.parameters()]
        opt.step()
        opt.zero_grad()
    return out + [v.numpy() for v in model.state_dict().values()]


def test_results_and_gradients_bitwise_unchanged():
    import contextlib

    off = _train_two_steps(contextlib.nullcontext)
    for ctx in (detect_anomaly, tg.autograd.profile, lambda: detect_anomaly(check_nan=False)):
        on = _train_two_steps(ctx)
        assert len(on) == len(off)
        assert all(np.array_equal(a, b) for a, b in zip(off, on))
    assert _hot_path_is_original()


def test_exceptions_inside_leave_the_instrumentation_removed():
    x = _x([0.0, 1.0])
    with pytest.raises(AnomalyError), tg.autograd.profile(), detect_anomaly():
        tg.where(x > 0, tg.log(x), 0.0).sum().backward()  # raises in backward
    assert _hot_path_is_original() and not is_anomaly_enabled() and tg.is_grad_enabled()
    with pytest.raises(AnomalyError), detect_anomaly(check_forward=True):
        tg.log(x)  # raises in forward
    assert _hot_path_is_original() and not is_anomaly_enabled()
    with pytest.raises(KeyError), detect_anomaly(), tg.autograd.profile():
        raise KeyError("user code")
    assert _hot_path_is_original()
    with pytest.raises(GraphError, match="no backward is running"):
        engine.queue_callback(print)  # the engine's callback queue was closed too
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.array, [3.0, 3.0])
