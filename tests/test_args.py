"""The argument rules shared by ops, nn and optim (tapegrad/args.py)."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, ops
from tapegrad.args import (
    as_instance_weights,
    broadcasts_to,
    check_broadcasts,
    check_float,
    check_reduction,
    const,
    legacy_reduction,
    normalize_axes,
    normalize_axis,
    padding4,
    pair,
    raw,
)
from tapegrad.errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError

# ---------------------------------------------------------------- windows


def test_pair_and_padding4_forms():
    assert pair(3, "kernel_size", "op") == (3, 3)
    assert pair((3, np.int64(2)), "kernel_size", "op") == (3, 2)
    assert pair(np.int32(2), "stride", "op") == (2, 2)
    assert pair(0, "output_padding", "op", minimum=0) == (0, 0)
    assert padding4(1, "op") == (1, 1, 1, 1)
    assert padding4((1, 2), "op") == (1, 1, 2, 2)
    assert padding4([0, 1, 2, 3], "op") == (0, 1, 2, 3)
    assert padding4(np.array([1, 2]), "op") == (1, 1, 2, 2)


@pytest.mark.parametrize("kernel, dilation", [((3, 3), (1, 1)), ((4, 2), (1, 1)),
                                              ((3, 2), (2, 3)), ((1, 1), (1, 1))])
def test_same_padding_keeps_the_size(kernel, dilation):
    # "same": output = input at stride 1; an odd total pads one more at the end (PyTorch)
    t, b, left, r = padding4("same", "op", kernel, (1, 1), dilation)
    for k, d, before, after in ((kernel[0], dilation[0], t, b), (kernel[1], dilation[1], left, r)):
        assert before + after == d * (k - 1) and after - before in (0, 1)
    assert padding4("valid", "op", kernel) == (0, 0, 0, 0)


@pytest.mark.parametrize("call, words", [
    # before: (2.7, 2) silently became (2, 2), padding (1.5, 1) became (1, 1)
    (lambda: pair((2.7, 2), "kernel_size", "max_pool2d"), r"max_pool2d: kernel_size .*ints.*2\.7"),
    (lambda: pair(2.5, "kernel_size", "avg_pool2d"), r"avg_pool2d: kernel_size .*ints.*2\.5"),
    (lambda: pair(True, "stride", "conv2d"), r"conv2d: stride .*ints.*True"),
    (lambda: pair("3", "kernel_size", "conv2d"), r"conv2d: kernel_size .*ints.*'3'"),
    (lambda: pair((1, 2, 3), "stride", "conv2d"), r"conv2d: stride must be an int or a pair"),
    (lambda: pair((0, 1), "stride", "conv2d"), r"conv2d: stride must be >= 1"),
    (lambda: padding4((1.5, 1), "conv2d"), r"conv2d: padding .*ints.*1\.5"),
    (lambda: padding4((1, 2, 3), "conv2d"), r"conv2d: padding must be an int, \(h, w\) or"),
    (lambda: padding4(-1, "conv2d"), r"conv2d: padding must be non-negative"),
    # strings only where the caller passes its kernel
    (lambda: padding4("same", "max_pool2d"), r"max_pool2d: padding must be .*right\), got 'same'"),
    (lambda: padding4("full", "conv2d", (3, 3)), r"conv2d: padding .*'same', got 'full'"),
    (lambda: padding4("same", "conv2d", (3, 3), (2, 1)), r"'same' needs stride 1.*\(2, 1\)"),
])
def test_window_arguments_are_refused_with_a_named_error(call, words):
    with pytest.raises(ArgumentError, match=words):
        call()


def test_pooling_refuses_string_and_float_geometry():
    # before: padding="same" was int('s') (a bare ValueError), kernel (2.7, 2) pooled 2x2
    x = tg.tensor(np.ones((1, 1, 4, 4), np.float32))
    with pytest.raises(ArgumentError, match=r"max_pool2d: padding .*'same'"):
        ops.max_pool2d(x, 3, padding="same")
    with pytest.raises(ArgumentError, match=r"max_pool2d: kernel_size .*2\.7"):
        ops.max_pool2d(x, (2.7, 2))
    with pytest.raises(ArgumentError, match=r"Conv2d: padding .*1\.9"):
        nn.Conv2d(1, 1, 3, padding=(1.9, 0))


def test_conv_layers_parse_padding_as_their_op():
    assert nn.Conv2d(1, 1, 3, padding=1).padding == (1, 1)
    assert nn.Conv2d(1, 1, 3, padding=(1, 0, 2, 1)).padding == (1, 0, 2, 1)
    assert nn.Conv2d(1, 1, 3, padding="same").padding == "same"
    with pytest.raises(ArgumentError, match=r"ConvTranspose2d: padding .*got 'valid'"):
        nn.ConvTranspose2d(1, 1, 3, padding="valid")


# ---------------------------------------------------------------- axes


def test_normalize_axes_on_a_0d_input():
    assert normalize_axes("sum", (), 0) == ()
    assert normalize_axes("sum", (), -1) == ()
    assert normalize_axes("sum", (), None) == ()
    with pytest.raises(ShapeError, match=r"sum: axis 1 is out of range .*\(\)"):
        normalize_axes("sum", (), 1)
    x = tg.tensor(np.float64(2.0), requires_grad=True)
    y = ops.sum(x, 0)
    y.backward()
    assert y.item() == 2.0 and x.grad.item() == 1.0


def test_normalize_axes_sorts_unless_ordered():
    assert normalize_axes("sum", (2, 3, 4), (-1, 0)) == (0, 2)
    assert normalize_axes("permute", (2, 3, 4), (-1, 0, 1), ordered=True) == (2, 0, 1)
    assert normalize_axes("sum", (2, 3), [np.int64(1)]) == (1,)


def test_normalize_axis_takes_one_int():
    assert normalize_axis("softmax", (2, 5), -1) == 1
    assert normalize_axis("stack", (2, 5), 2, extra=1) == 2
    with pytest.raises(ArgumentError, match=r"softmax: axis must be one int, got \(0, 1\)"):
        normalize_axis("softmax", (2, 5), (0, 1))
    with pytest.raises(ShapeError, match=r"cat: axis 0 .*\(\) \(a 0-d array has no axes\)"):
        normalize_axis("cat", (), 0)


def test_one_message_style_for_every_axis_argument():
    # reductions and shape ops used to word the same mistakes differently
    x = tg.ones(2, 3)
    for call, op in ((lambda: ops.sum(x, (1, -1)), "sum"),
                     (lambda: ops.permute(x, 1, -1), "permute"),
                     (lambda: ops.squeeze(x, (1, -1)), "squeeze")):
        with pytest.raises(ShapeError, match=rf"^{op}: axes \(1, -1\) name an axis of shape "
                                             r"\(2, 3\) twice \(axis 1\); name each axis once$"):
            call()
    for call, op in ((lambda: ops.mean(x, 2), "mean"), (lambda: ops.swapaxes(x, 2, 0), "swapaxes"),
                     (lambda: x.size(2), "size")):
        with pytest.raises(ShapeError, match=rf"^{op}: axis 2 is out of range for shape \(2, 3\) "
                                             r"\(valid axes: -2 to 1\)$"):
            call()


def test_squeeze_of_a_0d_tensor_takes_axis_0_as_pytorch():
    # before: ShapeError "squeeze: axis 0 is out of range for shape ()"
    x = tg.tensor(2.0, requires_grad=True)
    y = ops.squeeze(x, 0)
    y.backward()
    assert y.shape == () and x.grad.item() == 1.0
    with pytest.raises(ShapeError, match=r"squeeze: axis 1 is out of range"):
        ops.squeeze(x, 1)


# ---------------------------------------------------------------- inputs


def test_raw_and_const():
    a = np.ones(3, np.float32)
    assert raw(tg.tensor(a)) is not a and raw(a) is a
    assert const(a, np) is a and const(None, np) is None
    assert const([1, 2], np, np.float32).dtype == np.float32
    assert const(tg.tensor(a), np).dtype == np.float32


def test_check_float_names_the_op_and_input():
    check_float("op", np.ones(2))
    check_float("op", tg.ones(2))
    for x in (np.ones(2, np.int64), tg.tensor(np.ones(2, np.int64)), [1.0]):
        with pytest.raises(DTypeError, match=r"^op: expected floating-point scores, got .*; cast"):
            check_float("op", x, "scores")


def test_check_broadcasts():
    assert broadcasts_to((3, 1), (2, 3, 4)) and not broadcasts_to((2, 3), (3,))
    check_broadcasts("op", "w", np.ones((1, 3)), (2, 3), "x's shape")
    with pytest.raises(ShapeError, match=r"^op: w \(4,\) float64 must broadcast to x's shape!$"):
        check_broadcasts("op", "w", np.ones(4), (2, 3), "x's shape", "!")


def test_instance_weights_per_image_or_broadcast():
    w = as_instance_weights("op", [1, 2], (2, 1, 3), np, np.float32, "y")
    assert w.shape == (2, 1, 1) and w.dtype == np.float32
    w = as_instance_weights("op", np.ones((1, 3)), (2, 1, 3), np, np.float64, "y")
    assert w.shape == (1, 3)
    with pytest.raises(ShapeError, match=r"^op: instance_weights \(3,\) float64 must broadcast "
                                         r"to y$"):
        as_instance_weights("op", np.ones(3), (2, 1, 2), np, np.float64, "y")


def test_check_reduction_is_one_rule_for_ops_and_layers():
    check_reduction("op", "sum")
    with pytest.raises(ArgumentError, match=r"op: reduction must be one of"):
        check_reduction("op", "avg")
    for make in (lambda: nn.MSELoss(reduction="avg"), lambda: nn.CrossEntropyLoss(reduction="avg"),
                 lambda: ops.mse_loss(tg.ones(2), np.ones(2), reduction="avg")):
        with pytest.raises(ArgumentError, match=r"reduction must be one of .*'avg'"):
            make()


@pytest.mark.parametrize("size_average,reduce,want", [
    (None, None, "sum"), (True, None, "mean"), (None, True, "mean"), (True, True, "mean"),
    (False, None, "sum"), (False, True, "sum"), (None, False, "none"), (True, False, "none"),
    (False, False, "none"), (0, 1, "sum"), (np.bool_(True), np.bool_(False), "none"),
])
def test_legacy_reduction_is_pytorchs_legacy_get_string(size_average, reduce, want):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert legacy_reduction("op", size_average, reduce, "sum", stacklevel=2) == want
    legacy = size_average is not None or reduce is not None
    assert [str(w.message) for w in caught] == (
        [f"size_average and reduce args will be deprecated, please use reduction='{want}' "
         "instead."] if legacy else [])
    assert all(w.category is UserWarning and w.filename == __file__ for w in caught)
    try:
        from torch.nn import _reduction
    except ImportError:
        return
    if legacy:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert _reduction.legacy_get_string(size_average, reduce) == want


def test_legacy_reduction_refuses_what_is_not_a_bool():
    with pytest.raises(ArgumentTypeError, match=r"op: size_average .* got 'sum'; for "
                                                r"reduction='sum' pass it by name"):
        legacy_reduction("op", "sum", None, "mean")
    with pytest.raises(ArgumentTypeError, match=r"op: reduce .* None or a bool, got 0.5$"):
        legacy_reduction("op", None, 0.5, "mean")
