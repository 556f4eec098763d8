"""The policy's ``fixed_inputs`` checked against a model's inputs.

An ``[[artifact]]``'s ``fixed_inputs`` (parsed into :class:`~plugin_host.policy.model.
FixedInput` values by the policy loader, which checks only their form) gives model inputs no
camera makes the value the daemon feeds them on every frame. Here each value meets its input:
it must name an input of the model that is not the recurrent state, fit the input's dtype
(integers for an integer input, booleans for a bool one, in the dtype's range, and a valid row
for an input that indexes an Embedding; a float within the dtype's range) and broadcast to its
shape, which must be fixed. The daemon makes these checks when an artifact loads
(:class:`~plugin_host.daemon.feed.ModelFeed`); ``policy check --check-files`` makes them
against the artifact file.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

import numpy as np

from abi import dtypes

__all__ = ["FixedInputProblem", "fixed_input_values"]


class FixedInputProblem(NamedTuple):
    """A value of ``fixed_inputs`` that cannot be fed: the input's name, the policy line (0
    when unknown) and what is wrong."""

    name: str
    line: int
    message: str

    def describe(self, source: str) -> str:
        """``FILE:LINE: fixed_inputs.NAME message``, ``source`` naming the policy file."""
        where = f"{source}:{self.line}" if self.line else source
        return f"{where}: fixed_inputs.{self.name} {self.message}"


def fixed_input_values(graph: Any, index_inputs: Mapping[str, int], fixed: Mapping[str, Any]
                       ) -> tuple[dict[str, np.ndarray], list[FixedInputProblem]]:
    """Each value of ``fixed`` (name -> FixedInput) as a read-only array of its input's shape
    and dtype, and the problems of those that cannot be (see the module docstring).
    ``index_inputs`` maps the inputs that index an Embedding to its number of rows."""
    state = set(graph.state)
    specs = {s.name: s for s in graph.inputs if s.name not in state}
    values: dict[str, np.ndarray] = {}
    problems = []
    for name, item in fixed.items():
        line = getattr(item, "line", 0)
        spec = specs.get(name)
        if spec is None:
            why = ("is the recurrent state, which the executor carries" if name in state
                   else f"is not an input of model {graph.name!r} (its inputs: "
                        f"{', '.join(specs)})")
            problems.append(FixedInputProblem(name, line, why))
            continue
        value = _value(spec, item.value, index_inputs.get(name))
        if isinstance(value, str):
            problems.append(FixedInputProblem(
                name, line, f"{value} (input {name!r} is {spec.dtype}{tuple(spec.shape)})"))
        else:
            values[name] = value
    return values, problems


def _value(spec: Any, value: np.ndarray, vocab: int | None) -> np.ndarray | str:
    """``value`` as an array of ``spec``'s shape and dtype, or why it cannot be."""
    shape = tuple(spec.shape)
    dtype = dtypes.to_numpy(spec.dtype)
    free = [d for d in shape if type(d) is not int]
    if free:
        return (f"cannot be fed: dims {', '.join(map(repr, free))} are known only at run time; "
                f"fix them when building, e.g. build --onnx ... --dim {free[0]}=SIZE")
    if dtype.kind == "b" and value.dtype.kind != "b":
        return "must be true or false"
    if dtype.kind in "iu" and value.dtype.kind != "i":
        return f"must be integers, got {'booleans' if value.dtype.kind == 'b' else 'floats'}"
    if dtype.kind == "f" and value.dtype.kind == "b":
        return "must be numbers, got booleans"
    if dtype.kind in "iu":
        low, high = (0, vocab - 1) if vocab is not None else \
            (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
        bad = value[(value < low) | (value > high)]
        if bad.size:
            what = (f"an index of an Embedding of {vocab} rows" if vocab is not None
                    else f"a value of {spec.dtype}")
            return f"holds {int(bad.flat[0])}, which is not {what} ({low} to {high})"
    try:
        filled = np.broadcast_to(value, shape)
    except ValueError:
        return (f"has shape {value.shape}, which does not fill {shape}: give one value, or an "
                f"array that broadcasts to the input's shape")
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(filled, dtype=dtype)
    if dtype.kind == "f" and not np.isfinite(out).all():
        return f"holds a value beyond {spec.dtype}'s range"
    out.flags.writeable = False
    return out
