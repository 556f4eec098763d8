"""The tensor ABI of plugin-host: dtypes, layouts, tensor specs, the op table and the errors.

Depends on numpy and msgpack only; plugin authors import it without the host. The artifact
file format is ``abi.artifact``.
"""

from abi.dtypes import DTYPES, from_numpy, is_float, is_int, to_numpy
from abi.errors import (ABIError, ArtifactError, ArtifactFormatError, BackendError,
                        ContractError, DomainError, DTypeError, GraphError,
                        IncompatibleArtifactError, IndexRangeError, OpError, PluginHostError,
                        ShapeError, SpecError, TensorHashError)
from abi.indices import check_indices
from abi.layouts import LAYOUTS, channel_axis, rank
from abi.ops import (AttrSpec, OpDef, get_op, infer_shapes, known_ops, normalize_attrs,
                     stored_attrs)
from abi.spec import Signature, TensorSpec, TensorType

from abi import artifact  # the file format (reads ABI_VERSION at call time, not import time)

#: The host ABI version: what an artifact's ``abi_version`` must equal for this host to load
#: it. Bumped whenever the meaning of the tensor ABI or the op table changes incompatibly.
ABI_VERSION = 1

__all__ = [
    # dtypes and layouts
    "DTYPES", "to_numpy", "from_numpy", "is_int", "is_float", "LAYOUTS", "rank", "channel_axis",
    # specs
    "TensorSpec", "TensorType", "Signature", "check_indices",
    # ops
    "OpDef", "AttrSpec", "get_op", "known_ops", "normalize_attrs", "stored_attrs",
    "infer_shapes",
    # errors
    "PluginHostError", "ContractError", "ShapeError", "DomainError", "DTypeError",
    "IndexRangeError", "ABIError", "SpecError", "OpError", "GraphError", "BackendError",
    "ArtifactError", "ArtifactFormatError", "TensorHashError", "IncompatibleArtifactError",
    # artifacts
    "ABI_VERSION", "artifact",
]
