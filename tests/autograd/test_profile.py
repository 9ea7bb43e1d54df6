"""tapegrad.autograd.profile: Caffe's debug_info as records, table, summary and CSV."""

import csv

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import engine, nn
from tapegrad.autograd import detect_anomaly, instrument, is_anomaly_enabled, profile
from tapegrad.errors import ArgumentError
from tapegrad.tape import Function


def _net():
    tg.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def _profiled(net, x, backward=True):
    with profile(model=net) as prof:
        y = net(x)
        loss = (y * y).sum()
        saved = {e.seq: sum(a.nbytes for a in e.saved if a is not None)
                 for e in tg.tape.entries(loss)}
        if backward:
            loss.backward()
    return prof, y, saved


def test_one_record_per_op_with_caffe_numbers():
    net = _net()
    x = tg.randn(5, 4)
    prof, y, saved = _profiled(net, x)
    ops = [(r.op, r.layer) for r in prof.records]
    assert ops == [("linear", "0:Linear"), ("relu", "1:ReLU"), ("linear", "2:Linear"),
                   ("mul", ""), ("sum", "")]
    lin2, sq = prof.records[2], prof.records[3]
    assert lin2.shape == (5, 3) and prof.records[4].shape == ()
    assert lin2.mean_abs_output == pytest.approx(float(np.abs(y.array).mean()))
    # d(sum(y*y))/dy = 2y: the gradient reaching the last layer's output
    assert lin2.mean_abs_grad == pytest.approx(float(np.abs(2 * y.array).mean()))
    assert sq.mean_abs_grad == pytest.approx(1.0)
    assert sorted(r.saved_bytes for r in prof.records) == sorted(saved.values())
    assert sq.saved_bytes == 2 * y.array.nbytes  # mul keeps both operands
    assert all(r.forward_ms > 0 and r.backward_ms > 0 for r in prof.records)
    assert all(r.line.startswith("test_profile.py:") for r in prof.records)


def test_before_backward_and_unrecorded_ops():
    net = _net()
    prof, _, _ = _profiled(net, tg.randn(2, 4), backward=False)
    assert all(r.mean_abs_grad is None and r.backward_ms == 0 for r in prof.records)
    with profile() as prof, tg.no_grad():
        net(tg.randn(2, 4))
    assert prof.records == []  # nothing on the tape, nothing to report
    with profile() as prof:
        net(tg.randn(2, 4))
    assert [r.layer for r in prof.records] == ["Linear", "ReLU", "Linear"]  # no model: classes


def test_backward_outside_the_profile_is_not_timed_and_tape_still_correct():
    net = _net()
    x = tg.randn(3, 4, requires_grad=True)
    with profile() as prof:
        loss = net(x).sum()
    loss.backward()
    assert all(r.mean_abs_grad is None for r in prof.records)
    ref = tg.randn(3, 4, requires_grad=True)
    ref.array[...] = x.array
    net(ref).sum().backward()
    np.testing.assert_allclose(x.grad.array, ref.grad.array)


def test_summary_table_and_csv(tmp_path):
    net = _net()
    with profile(model=net) as prof:
        for _ in range(3):
            net(tg.randn(5, 4)).sum().backward()
    by_layer = {s["layer"]: s for s in prof.summary("layer")}
    assert set(by_layer) == {"0:Linear", "1:ReLU", "2:Linear", ""}
    assert by_layer["2:Linear"]["calls"] == 3 and by_layer["2:Linear"]["mean_abs_grad"] == 1.0
    recs = [r for r in prof.records if r.layer == "0:Linear"]
    assert by_layer["0:Linear"]["mean_abs_output"] == pytest.approx(
        np.mean([r.mean_abs_output for r in recs]))
    assert by_layer["0:Linear"]["forward_ms"] == pytest.approx(sum(r.forward_ms for r in recs))
    by_op = {s["op"]: s for s in prof.summary("op")}
    assert by_op["linear"]["calls"] == 6 and by_op["relu"]["calls"] == 3
    assert len(prof.summary(("layer", "op"))) == 4

    text = str(prof)
    head = text.splitlines()[0].split()
    assert head[:4] == ["#", "op", "layer", "line"] and "mean|grad|" in head
    assert len(text.splitlines()) == 1 + len(prof.records)
    assert "2:Linear" in prof.table(by="layer")

    path = tmp_path / "ops.csv"
    prof.to_csv(path)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(prof.records) and rows[0]["op"] == "linear"
    assert rows[0]["shape"] == "5x8" and float(rows[0]["mean_abs_grad"]) > 0
    prof.to_csv(path, by="layer")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["layer"] for r in rows} == set(by_layer) and rows[0]["calls"] == "3"
    with pytest.raises(ArgumentError, match="by must be"):
        prof.summary("module")


def test_free_when_off_and_nesting_with_anomaly_mode(monkeypatch):
    calls = []
    real = instrument.user_site
    monkeypatch.setattr(instrument, "user_site", lambda *a: calls.append(1) or real(*a))
    net = _net()
    net(tg.randn(2, 4)).sum().backward()
    assert calls == [] and engine._observe is None
    with profile() as prof:
        with detect_anomaly():
            net(tg.randn(2, 4)).sum()
        assert not is_anomaly_enabled() and engine._observe is not None  # profile still on
        net(tg.randn(2, 4)).sum().backward()
    assert len(prof.records) == 8 and calls
    assert Function.__dict__["apply"] is instrument._ORIG_APPLY and engine._observe is None
    n = len(prof.records)
    net(tg.randn(2, 4)).sum()
    assert len(prof.records) == n


def _records(net, forward):
    with profile(model=net) as prof:
        forward(tg.randn(3, 4)).sum().backward()
    return prof.records


def test_a_checkpoint_recomputation_reports_on_the_forward_records():
    # the recomputed ops are the forward's again: one record each, with its gradient
    # (and the recomputation's time in backward_ms), as without the checkpoint
    from tapegrad.utils import checkpoint, checkpoint_sequential

    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))

    def nested(t):
        inner = checkpoint(lambda u: net[2](net[1](u)), net[0](t))
        return net[4](net[3](inner))

    tg.manual_seed(1)
    plain = _records(net, net)
    for forward in (lambda t: checkpoint(net, t), lambda t: checkpoint(nested, t),
                    lambda t: checkpoint_sequential(net, 3, t)):
        tg.manual_seed(1)
        got = _records(net, forward)
        assert [(r.op, r.layer, r.shape) for r in got] == [(r.op, r.layer, r.shape) for r in plain]
        for a, b in zip(got, plain):
            assert a.mean_abs_output == pytest.approx(b.mean_abs_output)
            assert a.mean_abs_grad == pytest.approx(b.mean_abs_grad)
            assert a.backward_ms > 0
