"""Read an ONNX file as hostile input: size caps first, then parse, then check the structure.

Nothing is trusted before it is checked. The file size is capped before a byte is read;
protobuf parsing errors and onnx's checker become :class:`ModelFileError`; tensors are turned
into numpy arrays only after their element count and byte length agree with their dims and are
under the caps. External data (weights stored beside the model) is refused unless the caller
allows it, and then it must be a plain relative file inside the model's own folder, read at the
declared offset and length and nowhere else.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ModelFileError, UnsupportedModelError
from ..files import open_regular

__all__ = ["ReadLimits", "DEFAULT_READ_LIMITS", "EXTERNAL_DATA_OPTION", "read_model",
           "parse_model", "to_array", "ONNX_DTYPES", "OPSETS", "UPGRADED_OPSETS",
           "default_opset"]


@dataclass(frozen=True)
class ReadLimits:
    """Caps applied before anything is allocated."""

    max_file_bytes: int = 1 << 30          # the .onnx file itself
    max_external_bytes: int = 2 << 30      # all external data together
    max_tensor_elements: int = 1 << 28     # one tensor (initializer, Constant, folded value)
    max_nodes: int = 100_000
    max_initializers: int = 100_000


DEFAULT_READ_LIMITS = ReadLimits()

#: The keyword argument that reads external data; a refusal for want of it carries it as its
#: ``option`` and the refusal itself as ``refused`` in the error's context.
EXTERNAL_DATA_OPTION = "allow_external_data"

#: Default-domain opsets this importer maps (torch 2.x exports 17 to 20 by default, its dynamo
#: exporter up to 25 on request; 23 adds RMSNormalization and Attention; 24 to 28 mostly add
#: element types the ABI has none of).
OPSETS = range(13, 29)
#: Older default-domain opsets that are read and upgraded to ``OPSETS.start`` before the import
#: (:mod:`.upgrade`); onnxruntime, the reference, runs them as they are (below 7, where it has
#: no kernel for a node's old version, the upgraded model).
UPGRADED_OPSETS = range(1, 13)

#: ONNX TensorProto element types the ABI has, by their ONNX enum value.
ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
               7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32",
               13: "uint64"}

#: 4-bit element types (UINT4, INT4): no ABI dtype, but the constant weights and zero points of
#: weight-only quantization; such a constant is read as the 8-bit dtype here, holding the same
#: values, where every node reading it is a DequantizeLinear or com.microsoft's
#: GatherBlockQuantized (:func:`to_array` with ``four_bit=True``), which dequantize it at import
FOUR_BIT = {21: "uint8", 22: "int8"}

#: ONNX's BFLOAT16: no ABI dtype; a model holding it is read to be upcast to float32
#: (:mod:`.float_width`), its tensors by :func:`to_array` with ``bfloat16=True``. Its values
#: are kept as their 16-bit patterns, as uint16's are.
BFLOAT16 = 16


def element_type(code: int) -> str:
    """An ONNX element type as a message names it: its TensorProto name and number
    (``INT2 (26)``), the number alone when ONNX has no name for it."""
    try:
        return f"{_onnx().TensorProto.DataType.Name(code)} ({code})"
    except ValueError:
        return str(code)


#: Element types whose values ONNX keeps in int32_data when not raw, with the range there
#: (float16 and bfloat16 as their bit patterns); a value outside it would wrap silently when
#: converted.
_INT32_DATA_RANGE = {"bool": (0, 1), "int8": (-128, 127), "uint8": (0, 255),
                     "int16": (-32768, 32767), "uint16": (0, 65535), "float16": (0, 65535),
                     "bfloat16": (0, 65535)}


def _onnx():
    try:
        import onnx
    except ImportError:  # pragma: no cover - the onnx extra is part of the test setup
        from ..errors import UsageError
        raise UsageError("ONNX import needs the 'onnx' package: pip install "
                         "'plugin-host[onnx]'") from None
    return onnx


def read_model(path: str | os.PathLike, *, allow_external_data: bool = False,
               limits: ReadLimits = DEFAULT_READ_LIMITS):
    """The checked ``onnx.ModelProto`` in ``path`` (external data resolved into memory).

    External data is read from the model's own data file beside it, ``path``'s name and
    ``.data`` (``model.onnx.data``, where torch's exporter writes the weights by default);
    from any other file inside the model's folder only with ``allow_external_data``."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise ModelFileError(f"{path}: not a regular file")
        if size > limits.max_file_bytes:
            raise ModelFileError(f"{path}: {size} bytes exceed the cap of "
                                 f"{limits.max_file_bytes}")
        with open_regular(path) as f:
            data = f.read(limits.max_file_bytes + 1)
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_model(data, where=str(path), folder=path.parent, limits=limits,
                       only=None if allow_external_data else _own_data_file(path))


def _own_data_file(path: str | os.PathLike) -> str:
    """The location of a model's own external data file: its name and ``.data``."""
    return Path(path).name + ".data"


def parse_model(data: bytes, *, where: str = "model", folder: Path | None = None,
                limits: ReadLimits = DEFAULT_READ_LIMITS, only: str | None = None):
    """Parse and check serialized model bytes. ``folder`` allows external data inside it;
    ``only``, then, at that location alone (the model's own data file)."""
    onnx = _onnx()
    from google.protobuf.message import DecodeError

    if len(data) > limits.max_file_bytes:
        raise ModelFileError(f"{where}: {len(data)} bytes exceed the cap of "
                             f"{limits.max_file_bytes}")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ModelFileError(f"{where}: not an ONNX model (protobuf: {exc})") from None
    _check_text(model, where)
    g = model.graph
    if not model.ir_version or not g.node or not g.output:
        raise ModelFileError(f"{where}: not an ONNX model (no IR version, nodes or outputs)")
    if len(g.node) > limits.max_nodes or len(g.initializer) > limits.max_initializers:
        raise ModelFileError(f"{where}: {len(g.node)} nodes / {len(g.initializer)} initializers "
                             f"exceed the caps {limits.max_nodes} / {limits.max_initializers}")
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    version = opsets.get("ai.onnx")
    if version is None:
        have = ", ".join(f"{d} {v}" for d, v in sorted(opsets.items())) or "none"
        raise UnsupportedModelError(f"{where}: the model imports no default-domain (ai.onnx) "
                                    f"opset, so none of its nodes is an ONNX operator this "
                                    f"importer maps (its opset imports: {have})")
    if version not in OPSETS and version not in UPGRADED_OPSETS:
        raise UnsupportedModelError(f"{where}: default-domain opset {version} is not supported "
                                    f"(supported: {UPGRADED_OPSETS.start}..{OPSETS.stop - 1}; "
                                    f"{UPGRADED_OPSETS.start}..{UPGRADED_OPSETS.stop - 1} are "
                                    f"upgraded to {OPSETS.start})")
    functions = model_functions(model)
    for node in g.node:
        if (node.domain, node.op_type, node.overload) in functions:
            continue  # a call of the model's own function, inlined before the import
        if node.domain not in ("", "ai.onnx") and op_key(node) not in CONTRIB_MAPPED:
            raise UnsupportedModelError(f"custom domain {node.domain!r} is not supported"
                                        f"{_custom_domain_hint(node)}",
                                        node=_node_name(node), op=node.op_type)
        if node.domain == CONTRIB and opsets.get(CONTRIB) != 1:
            raise UnsupportedModelError(f"{where}: {node.op_type} is a {CONTRIB} op but the "
                                        f"model imports {CONTRIB} opset "
                                        f"{opsets.get(CONTRIB)}, not 1",
                                        node=_node_name(node), op=node.op_type)
        if node.domain == CONTRIB:
            _check_contrib_schema(node, where)
    named: set[str] = set()
    for node in g.node:  # onnxruntime refuses it too, once the import has spent its time
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            continue  # onnxruntime makes Constants initializers first: their names may repeat
        if node.name and node.name in named:
            raise ModelFileError(f"{where}: two nodes are named {node.name!r}; onnxruntime "
                                 f"refuses a model whose node names repeat",
                                 node=node.name, op=node.op_type)
        named.add(node.name)
    _resolve_external(model, where, folder, limits, only)
    _initializers_as_ir4(model)
    own = [(node, node.domain if node.HasField("domain") else None) for node in g.node
           if node.domain in ("", "ai.onnx")
           and ONNXRUNTIME_DEFAULT_DOMAIN.get(node.op_type, 0) > version]
    try:  # onnx's checker does not know onnxruntime's own ops: it checks them as custom ones
        for node, _ in own:
            node.domain = _UNCHECKED
        if own:
            model.opset_import.add(domain=_UNCHECKED, version=1)
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__  # its lines, as one
        if len(text) > 400:
            text = text[:400] + "..."
        raise ModelFileError(f"{where}: the ONNX checker refuses the model: {text}") from None
    finally:
        for node, domain in own:  # as it was, down to the field's presence
            if domain is None:
                node.ClearField("domain")
            else:
                node.domain = domain
        if own:
            del model.opset_import[-1]
    return model


#: onnxruntime's own ops in the default domain (its schemas there, from version 1) -> the first
#: default-domain opset that has them: LayerNormalization before opset 17, and
#: SimplifiedLayerNormalization (RMSNorm), which ONNX does not have, as its graph optimizer
#: writes them into a model of any opset
ONNXRUNTIME_DEFAULT_DOMAIN = {"LayerNormalization": 17, "SimplifiedLayerNormalization": 10 ** 6}
_UNCHECKED = "ai.onnxruntime.unchecked"


def _initializers_as_ir4(model) -> None:
    """An IR version 3 model must list every initializer among the graph inputs; onnxruntime
    reads one that does not as IR version 4 allows (an initializer is a constant, or an input's
    default when listed), and so does this reader, by raising the model's IR version to 4.
    onnxruntime's own example ``mul_1.onnx`` is such a model, and the version converter writes
    one when it turns an attribute of an IR 3 model into an initializer (Pad's pads, from
    opset 11)."""
    if model.ir_version < 4:
        inputs = {vi.name for vi in model.graph.input}
        if any(t.name not in inputs for t in model.graph.initializer):
            model.ir_version = 4


#: onnxruntime's contrib-op domain, and those of its ops that map (:mod:`.qoperator`,
#: :mod:`.qsoftmax`): quantize_static's operator-oriented (QOperator) format.
CONTRIB = "com.microsoft"


@dataclass(frozen=True)
class ContribSchema:
    """What onnxruntime's schema of a contrib op declares, which onnx's checker does not know
    and onnxruntime checks when it loads the model: its ``inputs``, one letter each (``S``
    given, ``O`` optional, ``V`` one or more to the end), and its ``attributes`` with their
    types (AttributeProto type names)."""
    inputs: str
    attributes: dict


_POOL_ATTRIBUTES = {"auto_pad": "STRING", "kernel_shape": "INTS", "strides": "INTS",
                    "pads": "INTS", "ceil_mode": "INT", "count_include_pad": "INT",
                    "channels_last": "INT"}
CONTRIB_SCHEMAS: dict[str, ContribSchema] = {
    "QLinearAdd": ContribSchema("SSOSSOSO", {}), "QLinearMul": ContribSchema("SSOSSOSO", {}),
    "QLinearSigmoid": ContribSchema("SSOSO", {}),
    "QLinearLeakyRelu": ContribSchema("SSOSO", {"alpha": "FLOAT"}),
    "QLinearConcat": ContribSchema("SSV", {"axis": "INT"}),
    "QLinearAveragePool": ContribSchema("SSOSO", _POOL_ATTRIBUTES),
    "QLinearGlobalAveragePool": ContribSchema("SSSSS", {"channels_last": "INT"}),
    "QGemm": ContribSchema("SSSSSSOOO", {"alpha": "FLOAT", "transA": "INT", "transB": "INT"}),
    "QLinearSoftmax": ContribSchema("SSOSS", {"axis": "INT", "opset": "INT"}),
    "QLinearWhere": ContribSchema("SSSSSSSSS", {}),
    "MatMulIntegerToFloat": ContribSchema("SSSSOOO", {}),
    "DynamicQuantizeMatMul": ContribSchema("SSSOO", {}),
    "DynamicQuantizeLSTM": ContribSchema("SSSOOOOOSSSS", {
        "activation_alpha": "FLOATS", "activation_beta": "FLOATS", "activations": "STRINGS",
        "clip": "FLOAT", "direction": "STRING", "hidden_size": "INT", "input_forget": "INT"}),
    "FusedConv": ContribSchema("SSOO", {
        "auto_pad": "STRING", "kernel_shape": "INTS", "dilations": "INTS", "strides": "INTS",
        "pads": "INTS", "group": "INT", "activation": "STRING", "activation_params": "FLOATS"}),
    "FusedGemm": ContribSchema("SSO", {
        "transA": "INT", "transB": "INT", "alpha": "FLOAT", "beta": "FLOAT",
        "activation": "STRING", "activation_alpha": "FLOAT", "activation_beta": "FLOAT",
        "activation_gamma": "FLOAT"}),
    "FusedMatMul": ContribSchema("SS", {"alpha": "FLOAT", "transA": "INT", "transB": "INT",
                                        "transBatchA": "INT", "transBatchB": "INT"}),
    "SkipLayerNormalization": ContribSchema("SSSOO", {"epsilon": "FLOAT"}),
    "SkipSimplifiedLayerNormalization": ContribSchema("SSSO", {"epsilon": "FLOAT"}),
    "Gelu": ContribSchema("S", {}), "BiasGelu": ContribSchema("SS", {}),
    "FastGelu": ContribSchema("SO", {}), "QuickGelu": ContribSchema("S", {"alpha": "FLOAT"}),
    "Attention": ContribSchema("SSOOOOO", {
        "num_heads": "INT", "qkv_hidden_sizes": "INTS", "unidirectional": "INT",
        "mask_filter_value": "FLOAT", "scale": "FLOAT", "do_rotary": "INT",
        "past_present_share_buffer": "INT", "rotary_embedding_dim": "INT"}),
    "EmbedLayerNormalization": ContribSchema("SOSSOSSOO", {"epsilon": "FLOAT",
                                                           "mask_index_type": "INT"}),
    "QAttention": ContribSchema("SSSSSOOOO", {
        "num_heads": "INT", "unidirectional": "INT", "mask_filter_value": "FLOAT",
        "scale": "FLOAT", "do_rotary": "INT", "past_present_share_buffer": "INT"}),
    "QEmbedLayerNormalization": ContribSchema("SOSSOSSOSSOSSSSOSS", {"epsilon": "FLOAT"}),
    "GatherBlockQuantized": ContribSchema("SSSO", {
        "bits": "INT", "block_size": "INT", "quantize_axis": "INT", "gather_axis": "INT"}),
    "MatMulNBits": ContribSchema("SSSOOO", {
        "K": "INT", "N": "INT", "bits": "INT", "block_size": "INT", "accuracy_level": "INT",
        "weight_prepacked": "INT"}),
    "MultiHeadAttention": ContribSchema("SOOOOOOOOO", {
        "num_heads": "INT", "unidirectional": "INT", "mask_filter_value": "FLOAT",
        "scale": "FLOAT"})}
CONTRIB_MAPPED = frozenset(f"{CONTRIB}.{op}" for op in CONTRIB_SCHEMAS)


def _check_contrib_schema(node, where: str) -> None:
    """ModelFileError where the node's inputs or attributes differ from what onnxruntime's
    schema declares (:class:`ContribSchema`): onnxruntime refuses such a model too."""
    schema = CONTRIB_SCHEMAS[node.op_type]
    inputs = list(node.input)
    variadic = schema.inputs.endswith("V")
    fixed = schema.inputs.rstrip("V")
    if len(inputs) > len(fixed) and not variadic or variadic and len(inputs) <= len(fixed):
        need = f"more than {len(fixed)}" if variadic else f"at most {len(fixed)}"
        raise ModelFileError(f"{where}: {len(inputs)} inputs: {CONTRIB}'s {node.op_type} takes "
                             f"{need}", node=_node_name(node), op=node.op_type)
    for i, kind in enumerate(schema.inputs.ljust(len(inputs), "V")):
        if kind != "O" and not (inputs[i] if i < len(inputs) else ""):
            raise ModelFileError(f"{where}: input {i} is missing: {CONTRIB}'s "
                                 f"{node.op_type} requires it", node=_node_name(node),
                                 op=node.op_type)
    for attr in node.attribute:
        want = schema.attributes.get(attr.name)
        got = _onnx().AttributeProto.AttributeType.Name(attr.type)
        if want is None:
            raise ModelFileError(f"{where}: attribute {attr.name}: {CONTRIB}'s {node.op_type} "
                                 f"has no such attribute", node=_node_name(node),
                                 op=node.op_type)
        if got != want:
            raise ModelFileError(f"{where}: attribute {attr.name} of type {got}: {CONTRIB}'s "
                                 f"{node.op_type} takes {want}", node=_node_name(node),
                                 op=node.op_type)


def model_functions(model) -> dict:
    """``model``'s own functions (:mod:`.local_functions`) by what a call of each names:
    (domain, name, overload). One named as an op ONNX defines, or an onnxruntime op this
    importer maps, is left out: onnxruntime runs such a node as that op, and so does the
    import."""
    onnx = _onnx()
    return {(f.domain, f.name, f.overload): f for f in model.functions
            if not onnx.defs.has(f.name, f.domain if f.domain != "ai.onnx" else "")
            and f"{f.domain}.{f.name}" not in CONTRIB_MAPPED}


def op_key(node) -> str:
    """The op a node is mapped as: its op_type, prefixed with its domain outside the default
    one (``com.microsoft.QLinearAdd``)."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


#: onnxruntime's layout domains, which its optimizer writes above the extended level
LAYOUT_DOMAINS = ("com.microsoft.nchwc", "com.ms.internal.nhwc")
LAYOUT_HINT = ("a layout-transformed op that onnxruntime writes when it saves a model "
               "optimized at ORT_ENABLE_ALL, for the CPU it ran on; save it at "
               "GraphOptimizationLevel.ORT_ENABLE_EXTENDED (or not optimized) instead")


def _custom_domain_hint(node) -> str:
    """For com.microsoft's operator-oriented quantized ops (QLinearAdd ...) and onnxruntime's
    layout ops: what to do."""
    from .quantize import NO_CPU_KERNEL, NO_CPU_KERNEL_HINT, OPERATOR_ORIENTED, QDQ_HINT

    if node.domain in LAYOUT_DOMAINS:
        return f" ({LAYOUT_HINT})"
    if node.op_type in NO_CPU_KERNEL:
        return f" ({NO_CPU_KERNEL_HINT})"
    return f" ({QDQ_HINT})" if node.op_type in OPERATOR_ORIENTED else ""


def default_opset(model) -> int | None:
    """The model's default-domain opset version (None when it has none)."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _node_name(node) -> str:
    return node.name or (node.output[0] if node.output else "?")


def _external_tensors(model):
    """(what to call it, TensorProto) of every tensor that may keep its data outside."""
    onnx = _onnx()
    for t in model.graph.initializer:
        yield repr(t.name), t
    for node in model.graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield repr(a.t.name) if a.t.name else \
                    f"{a.name!r} of node {_node_name(node)!r}", a.t


def _resolve_external(model, where: str, folder: Path | None, limits: ReadLimits,
                      only: str | None) -> None:
    onnx = _onnx()
    total = 0
    for name, t in _external_tensors(model):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        location = info.get("location", "")
        shown = _shown(location)
        if folder is None or (only is not None and location != only):
            # the context lets a front end name its own switch (a CLI flag)
            other = "" if folder is None else f" other than the model's own {_shown(only)}"
            refused = (f"{where}: tensor {name} keeps its data in the external file {shown}; "
                       f"external data{other} is refused")
            raise ModelFileError(f"{refused} unless allowed: {EXTERNAL_DATA_OPTION}=True reads "
                                 f"it from the model's folder", refused=refused,
                                 option=EXTERNAL_DATA_OPTION)
        rel = Path(location)
        if not location or "\0" in location or rel.is_absolute() or ".." in rel.parts:
            raise ModelFileError(f"{where}: tensor {name}: external location {shown} "
                                 f"must be a relative path inside the model's folder")
        try:
            base = folder.resolve()
            target = (base / rel).resolve()
            inside = base in target.parents and target.is_file()
        except (OSError, RuntimeError) as exc:  # too long, a symlink loop, no permission
            raise ModelFileError(f"{where}: tensor {name}: external file {shown} cannot be "
                                 f"resolved: {_reason(exc)}") from None
        if not inside:
            raise ModelFileError(f"{where}: tensor {name}: external file {shown} is "
                                 f"not a regular file inside {base}")
        dtype = ONNX_DTYPES.get(t.data_type) or FOUR_BIT.get(t.data_type) or \
            ("uint16" if t.data_type == BFLOAT16 else None)  # read as 16-bit patterns
        if dtype is None:
            raise UnsupportedModelError(f"tensor {name}: ONNX element type "
                                        f"{element_type(t.data_type)} is not an ABI dtype")
        count = _count(t.dims, t.name, limits)
        nbytes = (count + 1) // 2 if t.data_type in FOUR_BIT else count * np.dtype(dtype).itemsize
        try:
            offset = int(info.get("offset", "0"))
            length = int(info.get("length", str(nbytes)))
        except ValueError:
            raise ModelFileError(f"{where}: tensor {name}: bad external offset/length") \
                from None
        total += length
        if length != nbytes or offset < 0 or total > limits.max_external_bytes:
            raise ModelFileError(f"{where}: tensor {name}: external length {length} at "
                                 f"offset {offset} does not match its {nbytes} bytes or exceeds "
                                 f"the cap")
        try:
            with open_regular(target) as f:
                raw = b""  # a file too short for the range (no seek past 2**63 either)
                if offset + length <= os.fstat(f.fileno()).st_size:
                    f.seek(offset)
                    raw = f.read(length)
        except OSError as exc:
            raise ModelFileError(f"{where}: tensor {name}: cannot read external file "
                                 f"{shown}: {_reason(exc)}") from None
        if len(raw) != length:
            raise ModelFileError(f"{where}: tensor {name}: external file {shown} ends "
                                 f"before offset {offset} + {length}")
        t.raw_data = raw
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT


def _shown(text: str, limit: int = 80) -> str:
    """``text`` quoted for a message, cut to about ``limit`` characters."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RuntimeError):  # pathlib's word for ELOOP before Python 3.13
        return "a symbolic link loop"
    return exc.strerror or type(exc).__name__ if isinstance(exc, OSError) else str(exc)


#: string fields that name an op (a node's op type and domain, an opset's or function's
#: domain): the import's messages print them as they are, so they must print as one line
_OP_TEXT = ("op_type", "domain")


def _check_text(message, where: str, path: str = "model") -> None:
    """ModelFileError naming the field when a string field is not valid UTF-8 (protobuf hands
    such a field over as bytes, which no name or attribute check downstream expects), or when
    an op type or domain holds a character that does not print (a line break would split the
    message naming the op)."""
    from google.protobuf.descriptor import FieldDescriptor

    for field, value in message.ListFields():
        at = f"{path}.{field.name}"
        if field.type == FieldDescriptor.TYPE_STRING:
            for i, v in enumerate([value] if isinstance(value, (str, bytes)) else value):
                index = "" if isinstance(value, (str, bytes)) else f"[{i}]"
                if not isinstance(v, str):
                    raise ModelFileError(f"{where}: {at}{index} is not valid UTF-8 "
                                         f"({bytes(v)[:40]!r})")
                if field.name in _OP_TEXT and not v.isprintable():
                    raise ModelFileError(f"{where}: {at}{index} {v[:40]!r} holds a character "
                                         f"that does not print")
        elif field.message_type is not None:
            single = hasattr(value, "ListFields")
            for i, v in enumerate([value] if single else value):
                _check_text(v, where, at if single else f"{at}[{i}]")


def _count(dims, name: str, limits: ReadLimits) -> int:
    if any(d < 0 for d in dims):
        raise ModelFileError(f"tensor {name!r}: negative dim in {list(dims)}")
    n = math.prod(dims)
    if n > limits.max_tensor_elements:
        raise ModelFileError(f"tensor {name!r}: {n} elements exceed the cap of "
                             f"{limits.max_tensor_elements}")
    return n


def to_array(t, limits: ReadLimits = DEFAULT_READ_LIMITS, *, four_bit: bool = False,
             bfloat16: bool = False) -> np.ndarray:
    """A TensorProto as a numpy array, after checking its dtype, count and byte length;
    ``four_bit``: a 4-bit one too, as its 8-bit dtype (:data:`FOUR_BIT`); ``bfloat16``: a
    bfloat16 one too, as float32 (exactly: a bfloat16 is a float32 with 16 bits fewer)."""
    onnx = _onnx()
    dtype = ONNX_DTYPES.get(t.data_type) or (FOUR_BIT.get(t.data_type) if four_bit else None) \
        or ("bfloat16" if bfloat16 and t.data_type == BFLOAT16 else None)
    if dtype is None:
        name = onnx.TensorProto.DataType.Name(t.data_type) if t.data_type in \
            onnx.TensorProto.DataType.values() else str(t.data_type)
        known = ", ".join(sorted(set(ONNX_DTYPES.values())))
        raise UnsupportedModelError(f"tensor {t.name!r} has element type {name}, which is not "
                                    f"an ABI dtype ({known})")
    n = _count(t.dims, t.name, limits)
    if t.data_location == onnx.TensorProto.EXTERNAL:
        raise ModelFileError(f"tensor {t.name!r}: unresolved external data")
    nbytes = (n + 1) // 2 if t.data_type in FOUR_BIT else \
        n * (2 if dtype == "bfloat16" else np.dtype(dtype).itemsize)
    if t.HasField("raw_data") and len(t.raw_data) != nbytes:
        kind = element_type(t.data_type) if t.data_type in FOUR_BIT else dtype
        raise ModelFileError(f"tensor {t.name!r}: {len(t.raw_data)} raw bytes for dims "
                             f"{list(t.dims)} of {kind} (expected {nbytes})")
    if t.data_type in FOUR_BIT and not t.HasField("raw_data") and len(t.int32_data) != \
            (n + 1) // 2:
        raise ModelFileError(f"tensor {t.name!r}: {len(t.int32_data)} int32_data entries for "
                             f"dims {list(t.dims)} of {element_type(t.data_type)} (expected "
                             f"{(n + 1) // 2}, two values each)")
    low, high = _INT32_DATA_RANGE.get(dtype, (None, None)) if t.data_type not in FOUR_BIT \
        else (0, 255)
    if low is not None and not t.HasField("raw_data") and len(t.int32_data):
        data = np.asarray(t.int32_data, np.int64)
        if data.min() < low or data.max() > high:
            wrong = int(data[(data < low) | (data > high)][0])
            raise ModelFileError(f"tensor {t.name!r}: int32_data value {wrong} is outside "
                                 f"{low}..{high}, the range of {dtype} there")
    try:
        array = onnx.numpy_helper.to_array(t)
    except (ValueError, TypeError) as exc:
        raise ModelFileError(f"tensor {t.name!r}: cannot decode: {exc}") from None
    if array.size != n:
        raise ModelFileError(f"tensor {t.name!r}: {array.size} values for dims {list(t.dims)}")
    if dtype == "bfloat16":  # ml_dtypes' bfloat16 to float32: the same bits and 16 zeros
        dtype = "float32"
    return np.ascontiguousarray(array.astype(dtype, copy=False)).reshape(tuple(t.dims))
