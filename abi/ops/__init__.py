"""The op table of the tensor ABI: versioned ops with attributes and shape rules.

``table`` defines OpDef/AttrSpec and the registry functions, ``layers`` the layer ops,
``glue`` the glue ops (``sampling`` the shape rules of its pooling, resize and grid sampling
ops), ``dims`` arithmetic on possibly symbolic dims, ``rules`` the checks the shape rules
share.
"""

from abi.ops.table import (ATTR_KINDS, REQUIRED, AttrSpec, OpDef, TensorType, check_values,
                           get_op, infer_shapes, known_ops, normalize_attrs, stored_attrs)

__all__ = ["ATTR_KINDS", "REQUIRED", "AttrSpec", "OpDef", "TensorType", "check_values",
           "get_op", "infer_shapes", "known_ops", "normalize_attrs", "stored_attrs"]
