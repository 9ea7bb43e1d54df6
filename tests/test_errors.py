"""Error hierarchy and the messages of core ops."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import errors, ops


def test_hierarchy():
    for cls in (errors.ShapeError, errors.DTypeError, errors.DeviceError, errors.GraphError,
                errors.ArgumentError):
        assert issubclass(cls, errors.TapegradError)
    assert issubclass(errors.ShapeError, ValueError)
    assert issubclass(errors.GraphError, RuntimeError)
    assert issubclass(errors.DTypeError, TypeError)


@pytest.mark.parametrize("call, pattern", [
    (lambda: ops.matmul(tg.ones(2, 3), tg.ones(2, 3)),
     r"matmul: shapes \(2, 3\) float32, \(2, 3\) float32 do not fit"),
    (lambda: ops.linear(tg.ones(2, 3), tg.ones(4, 5)),
     r"linear: input \(2, 3\) float32 and weight \(4, 5\) float32"),
    (lambda: ops.reshape(tg.ones(2, 3), (4,)), r"reshape: cannot reshape \(2, 3\) float32"),
    (lambda: ops.sum(tg.ones(2, 3), axis=2), r"sum: axis 2 is out of range .*\(2, 3\)"),
    (lambda: ops.concatenate([tg.ones(2, 3), tg.ones(3, 2)]), r"concatenate: inputs"),
    (lambda: ops.broadcast_to(tg.ones(3), (2, 4)), r"broadcast_to: cannot broadcast \(3,\)"),
    (lambda: ops.squeeze(tg.ones(2, 3), 0), r"squeeze: axis 0 of shape \(2, 3\) is not 1"),
    (lambda: ops.where(tg.ones(2), tg.ones(2), tg.ones(2)), r"where: the condition must be "
                                                            r"boolean"),
    (lambda: ops.pad(tg.ones(2, 3), (1, 2)), r"pad: pad_width"),
    (lambda: ops.transpose(tg.ones(2, 3), (0, 0)), r"transpose: axes \(0, 0\)"),
    (lambda: ops.leaky_relu(tg.ones(2), -0.1), r"negative_slope must be >= 0"),
    (lambda: ops.var(tg.ones(1), ddof=1), r"var: 1 elements"),
    (lambda: tg.ones(2, 3)[5], r"getitem: index 5 does not fit \(2, 3\) float32"),
])
def test_messages_name_op_shapes_and_dtypes(call, pattern):
    with pytest.raises(errors.TapegradError, match=pattern):
        call()


def test_no_assert_on_user_input_paths():
    import pathlib

    import tapegrad

    root = pathlib.Path(tapegrad.__file__).parent
    offenders = [str(p) for p in root.rglob("*.py")
                 if any(line.strip().startswith("assert ") for line in p.read_text().splitlines())
                 and "testing" not in p.parts]
    assert not offenders, offenders


def test_describe():
    assert errors.describe(np.zeros((2, 3), np.float32), 1.0) == "(2, 3) float32, float"


# exceptions that are protocol, not user-input errors: getattr's AttributeError,
# the abstract methods' NotImplementedError, and the reader's internal EOFError
# (caught and turned into a SerializationError naming the file), and a held Ctrl-C re-raised
_PROTOCOL = {"AttributeError", "NotImplementedError", "EOFError", "KeyboardInterrupt"}


def test_every_raise_in_the_package_is_a_tapegrad_error():
    """nn and optim used to raise 19 plain ValueError/TypeErrors: every error a
    user can cause derives from TapegradError (and from the builtin one)."""
    import ast
    import builtins
    import pathlib

    root = pathlib.Path(tg.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                name = getattr(exc, "id", None)
                if name in vars(builtins) and name not in _PROTOCOL:
                    found.append(f"{path.relative_to(root)}:{node.lineno} raises {name}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("cls, builtin", [
    (errors.ArgumentError, ValueError), (errors.ArgumentTypeError, TypeError),
    (errors.ArgumentKeyError, KeyError), (errors.OutOfRangeError, IndexError),
    (errors.NonFiniteError, RuntimeError), (errors.DTypeError, TypeError),
])
def test_error_classes_are_also_the_matching_builtin(cls, builtin):
    assert issubclass(cls, errors.TapegradError) and issubclass(cls, builtin)


def test_nn_and_optim_errors_are_tapegrad_errors():
    from tapegrad import nn, optim

    with pytest.raises(errors.ArgumentError):
        nn.Dropout(1.5)
    with pytest.raises(errors.ArgumentError):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(errors.OutOfRangeError):
        nn.Sequential(nn.ReLU())[3]
    with pytest.raises(errors.ArgumentTypeError):
        optim.SGD(tg.zeros(2, requires_grad=True), lr=0.1)
    with pytest.raises(errors.ArgumentKeyError, match="without '.'"):
        nn.Module().register_buffer("a.b", tg.zeros(1))
