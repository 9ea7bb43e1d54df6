"""``torch.utils.data`` under PyTorch's name: :mod:`tapegrad.data` itself.

>>> from tapegrad.utils.data import DataLoader, TensorDataset   # import torch.utils.data too
"""

from ..data import *  # noqa: F403
from ..data import __all__  # noqa: F401
