"""Graph inputs fixed at build (``--input-value sr=16000``), as constants of the model.

Some models take an input the device always feeds the same value: a sample rate, a mode
flag, a threshold. A branch on it (silero-vad's ``If`` on ``sr == 16000``) is computed at run
time, and the importer takes only an If whose condition is known at import. Fixed at build,
the input becomes an initializer of the model (a copy of the checked proto): what depends on it
folds, the If becomes the branch it takes, and the artifact has no such input. The golden
outputs are onnxruntime's on that model, which is the model as given with the value fed.

A value is one number, filling the input's shape, or one per element in row-major order; the
input's dims must be fixed (``--dim`` first for a run-time one), and its dtype must take the
value exactly: ``300`` for a uint8, ``1.5`` for an int64 or ``2`` for a bool are refused.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import UnsupportedModelError, UsageError
from .names import is_run_time
from .reader import BFLOAT16, ONNX_DTYPES

__all__ = ["MAX_FIXED_ELEMENTS", "describe", "fix_inputs", "fixable_inputs", "parse_input_values",
           "with_inputs_hint"]

#: The most elements an input fixed at build may have.
MAX_FIXED_ELEMENTS = 4096


def parse_input_values(pairs: Mapping[str, str]) -> dict[str, list[str]]:
    """``{"sr": ["16000"]}`` from ``--input-value sr=16000``: the values as written, each
    read in the input's dtype by :func:`fix_inputs`."""
    return {name: [v.strip() for v in text.split(",")] for name, text in pairs.items()}


def _inputs(model) -> dict[str, Any]:
    """The graph inputs that are not initializers (an older exporter lists its weights as
    inputs too), by name."""
    weights = {t.name for t in model.graph.initializer}
    return {vi.name: vi for vi in model.graph.input if vi.name not in weights}


def _shape(vi) -> list | None:
    t = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not t.HasField("shape"):
        return None
    return [None if is_run_time(d) else d.dim_value for d in t.shape.dim]


def fixable_inputs(model, values: Sequence[str] = ()) -> list[str]:
    """The inputs that could be fixed at build as they are, tensors of fixed dims: those of
    at most 16 elements of an integer or bool dtype (the kind of input a branch reads), and
    the one-element ones of any dtype that the graph computes any of ``values`` from (a Loop's
    trip count from a Range's float start, limit and delta)."""
    sources = _sources(model.graph, values)
    names = []
    for name, vi in _inputs(model).items():
        shape, dtype = _shape(vi), ONNX_DTYPES.get(vi.type.tensor_type.elem_type, "")
        if shape is None or None in shape:
            continue
        size = math.prod(shape)
        if size <= 16 and (dtype == "bool" or dtype.startswith(("int", "uint"))) or (
                size == 1 and name in sources):
            names.append(name)
    return names


def _sources(graph, values: Sequence[str]) -> set[str]:
    """The names the nodes computing ``values`` read, all the way back (a subgraph's reads of
    the outer graph included)."""
    from .loop import node_subgraphs

    made = {out: node for node in graph.node for out in node.output}
    todo = [v for v in values if v in made]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = made.get(name)
        if node is not None:
            inner = [i for sub in node_subgraphs(node) for n in sub.node for i in n.input]
            todo += [i for i in [*node.input, *inner] if i]
    return seen


def _read(name: str, text: Any, dtype: np.dtype) -> Any:
    """One value for input ``name`` in ``dtype``, exactly; UsageError when it is not one."""
    where = f"input value {name}={text}"
    if dtype == np.bool_:
        table = {"0": False, "1": True, "false": False, "true": True}
        key = str(text).strip().lower()
        if isinstance(text, (bool, np.bool_)) or key in table:
            return bool(text) if isinstance(text, (bool, np.bool_)) else table[key]
        raise UsageError(f"{where}: input {name!r} is bool; give 0, 1, false or true")
    if dtype.kind in "iu":
        try:
            value = int(text, 10) if isinstance(text, str) else int(text)
            exact = isinstance(text, str) or value == text
        except (TypeError, ValueError, OverflowError):
            exact = False
        info = np.iinfo(dtype)
        if not exact or not info.min <= value <= info.max:
            raise UsageError(f"{where}: input {name!r} is {dtype.name}; give an integer from "
                             f"{info.min} to {info.max}")
        return value
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = None
    if value is None or (math.isfinite(value) and abs(value) > _largest(dtype)):
        raise UsageError(f"{where}: input {name!r} is {dtype.name}; give a number within its "
                         f"range")
    return value


def _largest(dtype: np.dtype) -> float:
    """The largest finite value of float ``dtype`` (numpy's finfo lacks bfloat16)."""
    if dtype.name == "bfloat16":
        import ml_dtypes

        return float(ml_dtypes.finfo(dtype).max)
    return float(np.finfo(dtype).max)


def fix_inputs(model, values: Mapping[str, Any], *, where: str = "model"):
    """A copy of ``model`` in which each input named in ``values`` is an initializer holding
    the value given (``model`` itself when ``values`` is empty). A value is a number, a
    string of one, or a sequence or array of them: one fills the input's shape, else one per
    element. UsageError naming the input for an unknown name, an input with run-time dims or
    too many elements, or a value its dtype does not take."""
    if not values:
        return model
    import onnx

    inputs = _inputs(model)
    unknown = sorted(set(values) - set(inputs))
    if unknown:
        raise UsageError(f"{where}: no graph input named {', '.join(map(repr, unknown))} "
                         f"(the inputs: {', '.join(map(repr, inputs)) or 'none'})")
    arrays = {}
    for name, given in values.items():
        vi = inputs[name]
        elem = vi.type.tensor_type.elem_type
        shape, dtype = _shape(vi), ONNX_DTYPES.get(elem)
        if elem == BFLOAT16:  # a bfloat16 initializer, which the upcast then rewrites
            import ml_dtypes  # onnx's own dependency: numpy's bfloat16

            dtype = ml_dtypes.bfloat16
        if shape is None or dtype is None:
            raise UsageError(f"{where}: input {name!r} is not a tensor of a dtype that can be "
                             f"fixed at build (bool, integers, float16, bfloat16, float32, "
                             f"float64)")
        if None in shape:
            raise UsageError(f"{where}: input {name!r} has run-time dims "
                             f"{[d if d is not None else '?' for d in shape]}; fix them with "
                             f"--dim (dims=) first")
        count = math.prod(shape)
        if count > MAX_FIXED_ELEMENTS:
            raise UsageError(f"{where}: input {name!r} has {count} elements; at most "
                             f"{MAX_FIXED_ELEMENTS} can be fixed at build")
        flat = list(np.asarray(given, dtype=object).reshape(-1)) if not isinstance(
            given, str) else [given]
        if len(flat) not in (1, count):
            raise UsageError(f"{where}: input {name!r} has shape {tuple(shape)}: give one value "
                             f"or {count}, not {len(flat)}")
        np_dtype = np.dtype(dtype)
        read = [_read(name, v, np_dtype) for v in flat]
        arrays[name] = np.array(read * (count if len(read) == 1 else 1),
                                dtype=np_dtype).reshape(shape)
    fixed = type(model)()
    fixed.CopyFrom(model)
    kept = [vi for vi in fixed.graph.input if vi.name not in arrays]
    del fixed.graph.input[:]
    fixed.graph.input.extend(kept)
    for name, array in arrays.items():
        fixed.graph.initializer.append(onnx.numpy_helper.from_array(array, name))
    return fixed


def describe(values: Mapping[str, Any], model) -> list[str]:
    """A summary line per input of ``values`` fixed at build in ``model`` (what
    :func:`fix_inputs` answered): its name and value."""
    import onnx

    lines, inits = [], {t.name: t for t in model.graph.initializer}
    for name in values:
        array = onnx.numpy_helper.to_array(inits[name])
        shown = array.reshape(-1)[:8].tolist()
        text = str(shown[0]) if array.size == 1 else (
            f"{shown}{' ...' if array.size > 8 else ''}")
        lines.append(f"input {name!r} fixed at build to {text} (--input-value): the artifact "
                     f"has no such input, and what it decides is folded at import")
    return lines


def with_inputs_hint(error: UnsupportedModelError, model) -> UnsupportedModelError:
    """``error`` with a pointer to ``--input-value`` when it is about a value computed at run
    time and the model has inputs that could be fixed at build (:func:`fixable_inputs`);
    ``error`` itself otherwise."""
    if "computed at run time" not in str(error):
        return error
    names = fixable_inputs(model, re.findall(r"'([^']*)'", error.detail))
    if not names:
        return error
    listed = ", ".join(f"--input-value {n}=VALUE" for n in names)
    return UnsupportedModelError(
        f"{error.detail}; if it is computed from an input the device always feeds "
        f"the same value, {listed} (input_values= in the Python API) fixes it at build, and "
        f"what it decides is folded", node=error.node, op=error.op)
