"""The settings of a ``tapegrad train`` run: defaults and one checker per setting.

The same checkers validate the command line (text, through :func:`arg_type`)
and a checkpoint's ``args`` entry (values, through :func:`check_settings`),
so an option cannot be accepted in one place and refused in the other.
"""

from __future__ import annotations

import argparse
import math
import os

from ..errors import ArgumentError
from .models import DATA_SHAPES, MODELS

# Defaults, tuned for the bundled digits: >= 97% test accuracy well within a
# minute on a 2-core CPU.
DEFAULTS = {
    "model": "lenet", "data": "digits", "data_dir": None, "epochs": 20, "batch_size": 32,
    "lr": None, "optimizer": "adam", "momentum": 0.9, "weight_decay": 0.0, "device": "cpu",
    "seed": 0, "out": os.path.join("runs", "latest"), "train_samples": None,
    "test_samples": None, "schedule": "cosine", "threads": 0,
}
DEFAULT_LR = {"adam": 3e-3, "sgd": 0.05}
OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("cosine", "constant")


def _integer(minimum: int):
    what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"

    def check(v):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ArgumentError(f"expected {what}, got {v!r}")
        if v < minimum:
            raise ArgumentError(f"must be {what}, got {v}")
        return v
    return check


def _number(minimum: float, strict: bool):
    bound = f"{'>' if strict else '>='} {minimum:g}"

    def check(v):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ArgumentError(f"expected a number, got {v!r}")
        if not math.isfinite(v) or not (v > minimum if strict else v >= minimum):
            raise ArgumentError(f"must be a finite number {bound}, got {v!r}")
        return float(v)
    return check


def _choice(options):
    def check(v):
        if v not in options:
            raise ArgumentError(f"expected one of {', '.join(options)}, got {v!r}")
        return v
    return check


def _text(v):
    if not isinstance(v, str):
        raise ArgumentError(f"expected a string, got {v!r}")
    return v


def _optional(check):
    return lambda v: None if v is None else check(v)


CHECKS = {
    "model": _choice(MODELS), "data": _choice(tuple(DATA_SHAPES)),
    "data_dir": _optional(_text), "epochs": _integer(1), "batch_size": _integer(1),
    "lr": _optional(_number(0, True)), "optimizer": _choice(OPTIMIZERS),
    "momentum": _number(0, False), "weight_decay": _number(0, False), "device": _text,
    "seed": _integer(0), "out": _text, "train_samples": _optional(_integer(1)),
    "test_samples": _optional(_integer(1)), "schedule": _choice(SCHEDULES),
    "threads": _integer(0),
}
REQUIRED = ("model", "data")  # a checkpoint without these cannot be rebuilt


def arg_type(key: str, parse=int):
    """An argparse ``type``: text -> ``parse`` -> the checker of setting ``key``."""
    def convert(text: str):
        try:
            value = parse(text)
        except ValueError:
            value = text  # the checker says what it expected
        try:
            return CHECKS[key](value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def check_settings(settings, where: str) -> dict:
    """``settings`` (a checkpoint's ``args``) with every known key checked;
    ``ValueError("<where>.<key>: why")`` on the first bad one. Unknown keys are
    kept but ignored by the CLI; missing optional keys take their defaults."""
    if not isinstance(settings, dict):
        raise ArgumentError(f"{where}: expected a dict of settings, got {type(settings).__name__}")
    for key in REQUIRED:
        if key not in settings:
            raise ArgumentError(f"{where}.{key}: missing")
    out = dict(settings)
    for key, check in CHECKS.items():
        if key in settings:
            try:
                out[key] = check(settings[key])
            except ValueError as exc:
                raise ArgumentError(f"{where}.{key}: {exc}") from None
    return out
