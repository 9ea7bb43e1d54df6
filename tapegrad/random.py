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
    key = str(dev)
    gen = _generators.get(key)
    if gen is None:
        # each device gets its own stream derived from the one seed
        seq = np.random.SeedSequence(_seed, spawn_key=(dev.index or 0, dev is not cpu))
        if dev is not cpu:  # CuPy's Generator takes an integer seed
            with dev.use():
                gen = dev.xp.random.default_rng(int(seq.generate_state(1)[0]))
        else:
            gen = np.random.default_rng(seq)
        _generators[key] = gen
    return gen
