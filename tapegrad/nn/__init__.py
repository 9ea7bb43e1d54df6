"""Neural-network layers and the Module system (PyTorch's ``torch.nn`` API).

>>> import tapegrad as tg
>>> from tapegrad import nn
>>> tg.manual_seed(0)
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
>>> loss = nn.CrossEntropyLoss()(model(tg.randn(2, 4)), tg.tensor([0, 2]))
"""

from . import functional, init, parallel, utils
from .activation import (
    ELU,
    GELU,
    GLU,
    SELU,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    PReLU,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Softsign,
    Tanh,
    Tanhshrink,
)
from .attention import MultiheadAttention
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .conv import Conv2d, ConvTranspose2d
from .linear import Dropout, Dropout2d, Flatten, Identity, Linear, Unflatten
from .loss import BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss
from .module import IncompatibleKeys, Module, StateDictError
from .normalization import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, LocalResponseNorm
from .pairwise import (
    BCELoss,
    CosineEmbeddingLoss,
    CosineSimilarity,
    HuberLoss,
    KLDivLoss,
    MarginRankingLoss,
    TripletMarginLoss,
)
from .parameter import Parameter
from .pooling import AdaptiveAvgPool2d, AdaptiveMaxPool2d, AvgPool2d, MaxPool2d
from .resample import PixelShuffle, PixelUnshuffle, Upsample
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .sparse import Embedding
from .sync_batchnorm import SyncBatchNorm
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "Module", "Parameter", "StateDictError", "IncompatibleKeys", "Sequential", "ModuleList",
    "ModuleDict", "ParameterList", "ParameterDict", "Identity", "Linear", "Flatten",
    "Unflatten", "Dropout", "Dropout2d", "Embedding", "NLLLoss", "L1Loss", "SmoothL1Loss",
    "BCEWithLogitsLoss", "Conv2d", "ConvTranspose2d", "MaxPool2d",
    "AvgPool2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "Upsample", "PixelShuffle",
    "PixelUnshuffle", "BatchNorm1d", "BatchNorm2d", "LocalResponseNorm", "ReLU", "LeakyReLU",
    "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "GELU", "SiLU", "ELU", "Softplus", "PReLU",
    "ReLU6", "Hardtanh", "Hardsigmoid", "Hardswish", "SELU", "Mish", "LogSigmoid", "Softsign",
    "Tanhshrink", "GLU",
    "LayerNorm", "GroupNorm", "CrossEntropyLoss", "MSELoss", "HuberLoss", "BCELoss",
    "KLDivLoss", "MarginRankingLoss", "CosineEmbeddingLoss", "TripletMarginLoss",
    "CosineSimilarity", "init", "utils",
    "functional", "SyncBatchNorm", "parallel",
    "MultiheadAttention", "Transformer", "TransformerEncoder", "TransformerDecoder",
    "TransformerEncoderLayer", "TransformerDecoderLayer",
    "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
]
