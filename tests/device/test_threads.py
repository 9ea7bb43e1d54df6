"""tapegrad.set_num_threads / get_num_threads: default, validation, BLAS pinning."""

import ast
import os
import subprocess
import sys

import pytest

import tapegrad as tg
from tapegrad.device import threads
from tapegrad.errors import ArgumentError, ArgumentTypeError


@pytest.fixture
def fresh(monkeypatch):
    """The module as if nothing had set the count yet; restored afterwards."""
    monkeypatch.setattr(threads, "_num_threads", None)
    return monkeypatch


def _cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def test_default_is_the_cores_available(fresh):
    fresh.delenv("OMP_NUM_THREADS", raising=False)
    assert tg.get_num_threads() == _cores() >= 1


@pytest.mark.parametrize("env, expect", [("3", 3), ("5,2", 5), (" 1 ", 1)])
def test_default_honours_omp_num_threads(fresh, env, expect):
    fresh.setenv("OMP_NUM_THREADS", env)
    assert tg.get_num_threads() == expect


@pytest.mark.parametrize("env", ["0", "-2", "many", ""])
def test_invalid_omp_num_threads_falls_back_to_cores(fresh, env):
    fresh.setenv("OMP_NUM_THREADS", env)
    assert tg.get_num_threads() == _cores()


def test_default_is_read_once(fresh):
    fresh.setenv("OMP_NUM_THREADS", "3")
    assert tg.get_num_threads() == 3
    fresh.setenv("OMP_NUM_THREADS", "4")  # as PyTorch: the environment is read at start
    assert tg.get_num_threads() == 3


@pytest.mark.parametrize("bad, exc", [(0, ArgumentError), (-1, ArgumentError),
                                      (1.5, ArgumentTypeError), ("2", ArgumentTypeError),
                                      (True, ArgumentTypeError), (None, ArgumentTypeError)])
def test_set_num_threads_rejects_non_positive_ints(fresh, bad, exc):
    with pytest.raises(exc, match="set_num_threads"):
        tg.set_num_threads(bad)
    assert threads._num_threads is None  # nothing changed


def test_set_without_threadpoolctl_records_the_count_and_keeps_the_pool_off(fresh):
    from tapegrad.device import pool

    fresh.setattr(threads, "_pinned", False)  # as if threadpoolctl were missing
    tg.set_num_threads(3)
    assert tg.get_num_threads() == 3
    assert pool.active_threads() == 1
    seen = []
    pool.parallel(10, lambda lo, hi: seen.append((lo, hi)))
    assert seen == [(0, 10)]  # one piece, in the caller


_BLAS_CHILD = """
import tapegrad as tg
from threadpoolctl import threadpool_info
blas = lambda: sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})
before = blas()
tg.set_num_threads(1)
one = blas(), tg.get_num_threads()
tg.set_num_threads(2)
print(repr((before, one, (blas(), tg.get_num_threads()))))
"""


def test_set_num_threads_pins_blas_to_one_thread():
    pytest.importorskip("threadpoolctl")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", _BLAS_CHILD], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout.split("\n")[0]
    before, one, two = ast.literal_eval(out)
    if not before:
        pytest.skip("no BLAS library that threadpoolctl controls")
    assert before == [2]
    assert one == ([1], 1)
    assert two == ([1], 2)  # tapegrad's pool has 2 threads, each calling BLAS on one
