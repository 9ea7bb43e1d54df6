"""The global random state: one generator per device, seeded together.

``tapegrad.manual_seed(0)`` makes weight init, dropout masks and DataLoader
shuffles repeatable: two runs with one seed give identical numbers.
"""

from __future__ import annotations

import numpy as np

from . import device as _device
from .device import cpu, get_device
from .errors import DeviceError

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


class Generator(np.random.Generator):
    """PyTorch's ``torch.Generator`` for the CPU: a NumPy ``Generator`` (PCG64) that
    ``DataLoader``, ``random_split`` and the samplers take as ``generator=``.

    >>> train, val = random_split(ds, [0.8, 0.2], generator=tg.Generator().manual_seed(42))

    Seeded as PyTorch's (``manual_seed`` returns the generator; a new one starts
    from PyTorch's default seed 67280421310721), it gives one stream per seed, but
    not PyTorch's numbers.
    """

    _DEFAULT_SEED = 67280421310721

    def __init__(self, device="cpu"):
        dev = get_device(device)
        if dev is not cpu:
            raise DeviceError(f"Generator(device={device!r}): only CPU generators; the GPU "
                              "draws from tapegrad's own stream (tapegrad.cuda.manual_seed)")
        super().__init__(np.random.PCG64(self._DEFAULT_SEED))
        self.device = dev
        self._initial = self._DEFAULT_SEED

    def manual_seed(self, seed: int) -> Generator:
        self._initial = int(seed)
        self.bit_generator.state = np.random.PCG64(self._initial).state
        return self

    def initial_seed(self) -> int:
        return self._initial

    def seed(self) -> int:
        """Reseed from fresh OS entropy; the new seed is returned, as PyTorch's."""
        return self.manual_seed(int(np.random.SeedSequence().generate_state(1, np.uint64)[0]
                                    >> 1)).initial_seed()

    def get_state(self) -> dict:
        return self.bit_generator.state

    def set_state(self, state: dict) -> Generator:
        self.bit_generator.state = state
        return self
