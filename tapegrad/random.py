"""The global random state: one generator per device, seeded together.

``tapegrad.manual_seed(0)`` makes weight init, dropout masks and DataLoader
shuffles repeatable: two runs with one seed give identical numbers.
"""

from __future__ import annotations

import numpy as np

from . import device as _device
from .device import cpu, get_device

_seed = None
_generators: dict = {}


def manual_seed(seed: int) -> None:
    """Seed every device's generator (CPU now, CUDA ones on first use), and
    CuPy's own global generator too once CuPy is in use, as
    ``torch.manual_seed`` seeds every GPU.

    >>> tapegrad.manual_seed(0); a = tapegrad.randn(3)
    >>> tapegrad.manual_seed(0); bool((tapegrad.randn(3) == a).all())
    True
    """
    global _seed
    _seed = int(seed)
    _generators.clear()
    cupy = _device._cupy  # set once a CUDA device has been used; never imported here
    if cupy is not None:
        for index in range(cupy.cuda.runtime.getDeviceCount()):
            with cupy.cuda.Device(index):
                cupy.random.seed(_seed)


def initial_seed():
    return _seed


def get_generator(device=None):
    """The generator of ``device``: a NumPy or CuPy ``Generator``."""
    dev = get_device(device)
    gen = _generators.get(str(dev))
    if gen is None:
        gen = _generators[str(dev)] = _new_generator(dev, _seed)
    return gen


def seed_device(device, seed: int) -> None:
    """Seed ``device``'s generator alone (``torch.cuda.manual_seed``); the other
    devices keep their streams. ``manual_seed(s)`` then ``seed_device("cuda", s)``
    gives the GPU the stream ``manual_seed(s)`` alone gives it."""
    dev = get_device(device)
    _generators[str(dev)] = _new_generator(dev, int(seed))


def _new_generator(dev, seed):
    # each device gets its own stream derived from the one seed
    seq = np.random.SeedSequence(seed, spawn_key=(dev.index or 0, dev is not cpu))
    if dev is cpu:
        return np.random.default_rng(seq)
    with dev.use():  # CuPy's Generator takes an integer seed
        return dev.xp.random.default_rng(int(seq.generate_state(1)[0]))
