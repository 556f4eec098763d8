"""nn layers with tinygrad ``nn`` semantics, as numpy kernels (kind: model-layer).

Layers are plain classes whose attribute names are the state-dict keys (``weight``, ``bias``,
``running_mean``, ...; plain float32 numpy arrays, readable and assignable) and whose
``__call__`` is a thin call into a kernel of :mod:`plugins.nn.functional`. For the graph
builder every layer also has ``abi_op`` (the op-table name), ``abi_attrs()`` (the kernel's
keyword attributes, msgpack-friendly) and ``abi_tensors()`` (its parameter and state tensors in
the op's positional order, None for an absent optional one).

Files follow the kernels' seams: ``conv`` (Conv1d/2d, ConvTranspose1d/2d), ``norm``
(BatchNorm, GroupNorm, InstanceNorm, LayerNorm, LayerNorm2d, RMSNorm), ``linear``,
``recurrent`` (LSTMCell), ``embedding``.
"""

from . import functional
from .conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from .embedding import Embedding
from .linear import Linear
from .norm import (BatchNorm, BatchNorm2d, BatchNorm3d, GroupNorm, InstanceNorm, LayerNorm,
                   LayerNorm2d, RMSNorm)
from .recurrent import LSTMCell

__all__ = ["functional", "BatchNorm", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d",
           "ConvTranspose1d", "ConvTranspose2d", "Linear", "LSTMCell", "GroupNorm",
           "InstanceNorm", "LayerNorm", "LayerNorm2d", "RMSNorm", "Embedding"]
