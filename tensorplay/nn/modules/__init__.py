"""Layers of :mod:`tensorplay.nn`, one module per family."""
from __future__ import annotations

from .activation import (
                         ELU,
                         GELU,
                         GLU,
                         SELU,
                         Hardsigmoid,
                         Hardswish,
                         Hardtanh,
                         LeakyReLU,
                         LogSoftmax,
                         Mish,
                         PReLU,
                         ReLU,
                         ReLU6,
                         Sigmoid,
                         SiLU,
                         Softmax,
                         Softplus,
                         Tanh,
)
from .attention import MultiheadAttention
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d
from .linear import Bilinear, Flatten, Identity, Linear, Unflatten
from .loss import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, KLDivLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss
from .misc import Dropout, Embedding, EmbeddingBag, PixelShuffle, PixelUnshuffle, Upsample
from .module import Module, RemovableHandle
from .normalization import (
                         BatchNorm1d,
                         BatchNorm2d,
                         BatchNorm3d,
                         GroupNorm,
                         InstanceNorm1d,
                         InstanceNorm2d,
                         InstanceNorm3d,
                         LayerNorm,
                         RMSNorm,
)
from .pooling import (
                         AdaptiveAvgPool1d,
                         AdaptiveAvgPool2d,
                         AdaptiveMaxPool1d,
                         AdaptiveMaxPool2d,
                         AvgPool1d,
                         AvgPool2d,
                         MaxPool1d,
                         MaxPool2d,
)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .transformer import (
                         Transformer,
                         TransformerDecoder,
                         TransformerDecoderLayer,
                         TransformerEncoder,
                         TransformerEncoderLayer,
)

__all__ = [
    "Module", "RemovableHandle", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict",
    "Identity", "Linear", "Bilinear", "Flatten", "Unflatten", "Conv1d", "Conv2d", "ConvTranspose1d",
    "ConvTranspose2d", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d", "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "BatchNorm1d", "BatchNorm2d", "LayerNorm",
    "GroupNorm", "RMSNorm", "Embedding", "Dropout", "Upsample", "ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU",
    "GELU", "SiLU", "Mish", "Sigmoid", "Tanh", "Hardtanh", "Hardsigmoid", "Hardswish", "Softplus", "Softmax",
    "LogSoftmax", "MSELoss", "L1Loss", "SmoothL1Loss", "CrossEntropyLoss", "NLLLoss", "BCELoss",
    "BCEWithLogitsLoss", "KLDivLoss", "RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell",
    "MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
    "TransformerDecoder", "Transformer", "Conv3d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d",
    "InstanceNorm3d", "PixelShuffle", "PixelUnshuffle", "PReLU", "GLU", "EmbeddingBag",
]
