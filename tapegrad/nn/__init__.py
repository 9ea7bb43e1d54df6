"""Neural-network layers and the Module system (PyTorch's ``torch.nn`` API).

>>> import tapegrad as tg
>>> from tapegrad import nn
>>> tg.manual_seed(0)
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
>>> loss = nn.CrossEntropyLoss()(model(tg.randn(2, 4)), tg.tensor([0, 2]))
"""

from . import functional, init, utils
from .activation import LeakyReLU, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from .container import ModuleList, Sequential
from .conv import Conv2d, ConvTranspose2d
from .linear import Dropout, Flatten, Identity, Linear
from .loss import CrossEntropyLoss, MSELoss
from .module import IncompatibleKeys, Module, StateDictError
from .normalization import BatchNorm1d, BatchNorm2d, LocalResponseNorm
from .parameter import Parameter
from .pooling import AvgPool2d, MaxPool2d

__all__ = [
    "Module", "Parameter", "StateDictError", "IncompatibleKeys", "Sequential", "ModuleList",
    "Identity", "Linear", "Flatten", "Dropout", "Conv2d", "ConvTranspose2d", "MaxPool2d",
    "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "LocalResponseNorm", "ReLU", "LeakyReLU",
    "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "CrossEntropyLoss", "MSELoss", "init", "utils",
    "functional",
]
