"""One checker per setting, shared by the command line and the checkpoint schema."""

import argparse
import math

import pytest

from tapegrad.cli.settings import CHECKS, DEFAULTS, arg_type, check_settings


def test_every_setting_has_a_checker_and_the_defaults_pass():
    assert set(CHECKS) == set(DEFAULTS)
    assert check_settings(DEFAULTS, "args") == DEFAULTS


@pytest.mark.parametrize("key, text", [("lr", "inf"), ("lr", "-inf"), ("lr", "nan"),
                                       ("lr", "0"), ("momentum", "-0.1"),
                                       ("weight_decay", "inf"), ("seed", "-1"),
                                       ("epochs", "0"), ("threads", "-1"), ("seed", "1.5")])
def test_command_line_refuses(key, text):
    parse = float if key in ("lr", "momentum", "weight_decay") else int
    with pytest.raises(argparse.ArgumentTypeError):
        arg_type(key, parse)(text)


def test_command_line_accepts():
    assert arg_type("lr", float)("1e-3") == 1e-3
    assert arg_type("seed")("0") == 0 and arg_type("threads")("0") == 0


@pytest.mark.parametrize("key, value", [("lr", "fast"), ("lr", math.inf), ("lr", True),
                                        ("epochs", 2.0), ("seed", None),
                                        ("optimizer", "rmsprop"), ("data_dir", 7)])
def test_checkpoint_settings_refused_with_the_field(key, value):
    with pytest.raises(ValueError, match=rf"^args\.{key}: "):
        check_settings({**DEFAULTS, key: value}, "args")


def test_optional_settings_may_be_none_and_missing_ones_default():
    assert check_settings({"model": "mlp", "data": "digits", "lr": None}, "args")["lr"] is None
