"""The op table: every op of the ABI with its version, inputs, outputs, attributes and shape rule.

An op is identified by ``(name, version)``. A version never changes meaning once released: a
new behaviour is a new version, and an artifact names the version of every node it uses.

Inputs and outputs are declared by name. A trailing ``?`` marks an optional input (``"bias?"``);
optional inputs come after the required ones and may be omitted or passed as None. A trailing
``*`` marks a variadic entry (``"inputs*"``: one or more tensors), which must be the only entry.

Shape rules (``OpDef.infer``) are called as ``infer(opdef, inputs, attrs)`` with the inputs
padded to the declared count (None for an omitted optional input) and normalized attributes;
they return one TensorType per output and raise ShapeError, DTypeError or ContractError with a
one-line message that starts with the op's name. The caller (a graph) adds the node's name.

An op that needs some input to be a constant of the graph, with checked values (the gather op's
indices), also has a value rule (``OpDef.values``), which :func:`check_values` runs on the
constant arrays bound to the node's inputs; a graph runs it, after the shape rule, whenever it
is built or loaded.
"""

from __future__ import annotations

import difflib
import functools
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from abi import dtypes
from abi.errors import ContractError, OpError, ShapeError
from abi.spec import TensorType

__all__ = ["REQUIRED", "ATTR_KINDS", "AttrSpec", "OpDef", "TensorType", "get_op", "known_ops",
           "normalize_attrs", "stored_attrs", "infer_shapes", "check_values", "at_least",
           "greater_than", "between", "each_at_least", "non_empty", "all_of"]


class _Required:
    """The marker for an attribute without a default."""

    _instance: _Required | None = None

    def __new__(cls) -> _Required:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "REQUIRED"

    def __reduce__(self) -> str:
        return "REQUIRED"


#: Default of an attribute that must be given.
REQUIRED: Any = _Required()

#: Attribute kinds; ``"enum:<a>|<b>|..."`` is also a kind.
ATTR_KINDS = ("int", "float", "bool", "str", "ints", "floats", "pads", "shape", "dtype")

Check = Callable[[Any], "str | None"]


# --- range checks for AttrSpec.check -----------------------------------------------------------
# A check takes the coerced value and returns None when it is fine, or a phrase saying what is
# wrong ("must be >= 1, got 0"); normalize_attrs prefixes the op and attribute names.


def at_least(n: float) -> Check:
    """A check: the value is ``>= n``."""
    return lambda v: None if v >= n else f"must be >= {n}, got {v}"


def greater_than(n: float) -> Check:
    """A check: the value is ``> n``."""
    return lambda v: None if v > n else f"must be > {n}, got {v}"


def between(lo: float, hi: float) -> Check:
    """A check: ``lo <= value <= hi``."""
    return lambda v: None if lo <= v <= hi else f"must be in [{lo}, {hi}], got {v}"


def each_at_least(n: int) -> Check:
    """A check for a list: every entry is ``>= n``."""
    return lambda v: (None if all(x >= n for x in v)
                      else f"must have every entry >= {n}, got {list(v)}")


def non_empty(v: Sequence[Any]) -> str | None:
    """A check for a list: it has at least one entry."""
    return None if len(v) else "must not be empty"


def all_of(*checks: Check) -> Check:
    """A check that runs ``checks`` in order and reports the first failure."""
    def check(v: Any) -> str | None:
        for c in checks:
            problem = c(v)
            if problem:
                return problem
        return None
    return check


# --- attribute specs ---------------------------------------------------------------------------


class _BadValue(Exception):
    """Internal: a value does not have its attribute's kind (the message says why)."""


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _to_int(v: Any, what: str = "an int") -> int:
    if not _is_int(v):
        raise _BadValue(f"must be {what}, got {_show(v)}")
    return int(v)


def _to_float(v: Any) -> float:
    if not (_is_int(v) or isinstance(v, (float, np.floating))):
        raise _BadValue(f"must be a float, got {_show(v)}")
    f = float(v)
    if math.isnan(f):
        raise _BadValue("must be a number, got nan")
    return f


def _to_list(v: Any, what: str) -> list[Any]:
    if not isinstance(v, (list, tuple)):
        raise _BadValue(f"must be {what}, got {_show(v)}")
    return list(v)


def _show(v: Any) -> str:
    text = repr(v)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(v).__name__})"


def _coerce(kind: str, v: Any) -> Any:
    """``v`` converted to the canonical Python form of ``kind``; _BadValue if it is not one."""
    if kind == "int":
        return _to_int(v)
    if kind == "float":
        return _to_float(v)
    if kind == "bool":
        if not isinstance(v, (bool, np.bool_)):
            raise _BadValue(f"must be a bool, got {_show(v)}")
        return bool(v)
    if kind == "str":
        if type(v) is not str:
            raise _BadValue(f"must be a str, got {_show(v)}")
        return v
    if kind == "ints":
        items = _to_list(v, "a list of ints")
        if not all(_is_int(x) for x in items):
            raise _BadValue(f"must be a list of ints, got {_show(v)}")
        return tuple(int(x) for x in items)
    if kind == "floats":
        return tuple(_to_float(x) for x in _to_list(v, "a list of floats"))
    if kind == "pads":
        pairs = []
        for pair in _to_list(v, "a list of [before, after] int pairs"):
            if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                    or not all(_is_int(x) and x >= 0 for x in pair)):
                raise _BadValue(f"must be a list of [before, after] pairs of ints >= 0, got "
                                f"{_show(v)}")
            pairs.append((int(pair[0]), int(pair[1])))
        return tuple(pairs)
    if kind == "shape":
        items = _to_list(v, "a list of ints (at most one -1)")
        if not all(_is_int(x) and x >= -1 for x in items) or sum(x == -1 for x in items) > 1:
            raise _BadValue(f"must be a list of ints >= 0 with at most one -1, got {_show(v)}")
        return tuple(int(x) for x in items)
    if kind == "dtype":
        if type(v) is not str or v not in dtypes.DTYPES:
            raise _BadValue(f"must be an ABI dtype name ({', '.join(dtypes.DTYPES)}), got "
                            f"{_show(v)}")
        return v
    if kind.startswith("enum:"):
        choices = kind[5:].split("|")
        if type(v) is not str or v not in choices:
            raise _BadValue(f"must be one of {', '.join(map(repr, choices))}, got {_show(v)}")
        return v
    raise AssertionError(f"unknown attribute kind {kind!r}")  # AttrSpec validated it


@dataclass(frozen=True)
class AttrSpec:
    """One attribute of an op: its kind, its default, and an optional range check.

    ``kind`` is one of :data:`ATTR_KINDS` or ``"enum:<a>|<b>|..."``. ``default`` is
    :data:`REQUIRED` (the attribute must be given), None (the attribute is optional and may be
    None) or a value of the kind. ``check(value)`` returns None or a phrase saying what is wrong.
    ``added`` marks an attribute added to the op after artifacts were written with it: at its
    default it is left out of the stored form (:func:`stored_attrs`), so those artifacts, which
    do not have it, keep their normalized form.
    """

    kind: str
    default: Any = REQUIRED
    check: Check | None = None
    added: bool = False

    def __post_init__(self) -> None:
        kind = self.kind
        if self.added and self.default is REQUIRED:
            raise ValueError("AttrSpec: an added attribute needs a default (None too)")
        if not (kind in ATTR_KINDS or (type(kind) is str and kind.startswith("enum:")
                                       and all(kind[5:].split("|")))):
            raise ValueError(f"AttrSpec: unknown kind {kind!r}; kinds: {', '.join(ATTR_KINDS)}, "
                             f"enum:<a>|<b>")
        if self.default is not REQUIRED and self.default is not None:
            object.__setattr__(self, "default", self.coerce(self.default, "default"))

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def coerce(self, value: Any, name: str = "value") -> Any:
        """``value`` in canonical form (lists become tuples), checked; ValueError if bad."""
        try:
            value = _coerce(self.kind, value)
        except _BadValue as e:
            raise ValueError(f"{name} {e}") from None
        problem = self.check(value) if self.check else None
        if problem:
            raise ValueError(f"{name} {problem}")
        return value


# --- op definitions ----------------------------------------------------------------------------

Rule = Callable[["OpDef", list, dict], list]
#: ``values(opdef, inputs, consts, attrs)``: ``consts[i]`` is the array bound to input ``i`` or
#: None for a run-time one; returns nothing, raises as a shape rule does.
ValueRule = Callable[["OpDef", list, list, dict], None]


def _parse_ports(entries: Sequence[str], what: str, op: str) -> None:
    if not entries:
        raise ValueError(f"OpDef {op!r}: needs at least one {what}")
    seen_optional = False
    for i, entry in enumerate(entries):
        base = entry.rstrip("?*")
        if not base.isidentifier() or len(entry) - len(base) > 1:
            raise ValueError(f"OpDef {op!r}: bad {what} name {entry!r}")
        if entry.endswith("*") and len(entries) != 1:
            raise ValueError(f"OpDef {op!r}: a variadic {what} must be the only one")
        if entry.endswith("?"):
            seen_optional = True
        elif seen_optional:
            raise ValueError(f"OpDef {op!r}: required {what} {entry!r} after an optional one")


@dataclass(frozen=True, eq=False)  # identity equality: one object per (name, version)
class OpDef:
    """One version of one op.

    ``inputs``/``outputs`` are names (``"bias?"`` optional, ``"inputs*"`` variadic), ``attrs``
    maps attribute names to :class:`AttrSpec`, ``infer`` is the shape rule, ``atomic`` marks ops
    whose kernels use atomics or custom kernels and need their own audit before a backend may
    run them, ``doc`` says what the op computes, ``values`` is the value rule (None: the op
    takes any values, constant or not).
    """

    name: str
    version: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, AttrSpec]
    infer: Rule
    atomic: bool = False
    doc: str = field(default="", repr=False)
    values: ValueRule | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if type(self.name) is not str or not self.name.isidentifier():
            raise ValueError(f"OpDef: bad op name {self.name!r}")
        if type(self.version) is not int or self.version < 1:
            raise ValueError(f"OpDef {self.name!r}: version must be an int >= 1")
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        _parse_ports(self.inputs, "input", self.name)
        _parse_ports(self.outputs, "output", self.name)
        if any(o.endswith("?") for o in self.outputs):
            raise ValueError(f"OpDef {self.name!r}: outputs cannot be optional")
        attrs = dict(self.attrs)
        for key, spec in attrs.items():
            if not (type(key) is str and key.isidentifier() and isinstance(spec, AttrSpec)):
                raise ValueError(f"OpDef {self.name!r}: bad attribute {key!r}: {spec!r}")
        object.__setattr__(self, "attrs", MappingProxyType(attrs))
        if not callable(self.infer):
            raise ValueError(f"OpDef {self.name!r}: infer must be callable")

    @property
    def variadic_inputs(self) -> bool:
        return self.inputs[0].endswith("*")

    @property
    def variadic_outputs(self) -> bool:
        return self.outputs[0].endswith("*")

    @property
    def input_names(self) -> tuple[str, ...]:
        """Input names without their ``?``/``*`` markers."""
        return tuple(i.rstrip("?*") for i in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(o.rstrip("*") for o in self.outputs)

    @property
    def required_inputs(self) -> int:
        """How many inputs must be given (at least one for a variadic input)."""
        return sum(1 for i in self.inputs if not i.endswith("?"))

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"


# --- the registry ------------------------------------------------------------------------------


@functools.cache
def _table() -> Mapping[str, Mapping[int, OpDef]]:
    # imported here: the op modules import this one for OpDef and AttrSpec
    from abi.ops import glue, layers

    table: dict[str, dict[int, OpDef]] = {}
    for op in (*layers.OPS, *glue.OPS):
        versions = table.setdefault(op.name, {})
        if op.version in versions:
            raise AssertionError(f"op {op} defined twice")
        versions[op.version] = op
    return MappingProxyType({name: MappingProxyType(v) for name, v in sorted(table.items())})


def known_ops() -> dict[str, list[int]]:
    """Every op name with its sorted versions."""
    return {name: sorted(versions) for name, versions in _table().items()}


def get_op(name: str, version: int | None = None) -> OpDef:
    """The definition of op ``name`` at ``version`` (the newest when None); OpError if unknown."""
    table = _table()
    versions = table.get(name) if type(name) is str else None
    if versions is None:
        close = difflib.get_close_matches(name, list(table), n=1) if type(name) is str else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise OpError(f"unknown op {name!r}{hint}; known ops: {', '.join(table)}", op=name,
                      version=version)
    if version is None:
        return versions[max(versions)]
    op = versions.get(version) if type(version) is int else None
    if op is None:
        raise OpError(f"op {name!r} has no version {version!r}; known versions: "
                      f"{', '.join(map(str, sorted(versions)))}", op=name, version=version)
    return op


def normalize_attrs(opdef: OpDef, attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    """``attrs`` with defaults filled in and values in canonical form (lists become tuples).

    Refuses unknown, missing, wrong-typed and out-of-range attributes with one OpError that
    names the op and lists every bad attribute. Idempotent.
    """
    where = f"op {opdef.name!r} v{opdef.version}"
    if attrs is None:
        attrs = {}
    if not isinstance(attrs, Mapping):
        raise OpError(f"{where}: attributes must be a mapping, got {type(attrs).__name__}",
                      op=opdef.name)
    problems: list[str] = []
    known = list(opdef.attrs)
    for key in attrs:
        if key not in opdef.attrs:
            close = difflib.get_close_matches(key, known, n=1) if type(key) is str else []
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"unknown attribute {key!r}{hint}; known: "
                            f"{', '.join(known) or 'none'}")
    out: dict[str, Any] = {}
    for key, spec in opdef.attrs.items():
        if key not in attrs:
            if spec.required:
                problems.append(f"missing required attribute {key!r} ({spec.kind})")
            else:
                out[key] = spec.default
            continue
        value = attrs[key]
        if value is None and spec.default is None:
            out[key] = None
            continue
        try:
            out[key] = spec.coerce(value, f"attribute {key!r}")
        except ValueError as e:
            problems.append(str(e))
    if problems:
        raise OpError(f"{where}: " + "; ".join(problems), op=opdef.name, problems=problems)
    return out


def stored_attrs(opdef: OpDef, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Normalized ``attrs`` as an artifact stores them: without the attributes added to the op
    later (``AttrSpec.added``) that have their default."""
    return {k: v for k, v in attrs.items()
            if not (opdef.attrs[k].added and v == opdef.attrs[k].default)}


def _check_tensor_type(op: OpDef, index: int, t: Any) -> TensorType:
    name = op.input_names[min(index, len(op.inputs) - 1)]
    label = f"{name}[{index}]" if op.variadic_inputs else name
    if not (isinstance(t, tuple) and len(t) == 2):
        raise ContractError(f"{op.name}: input {label!r} must be a TensorType(shape, dtype), "
                            f"got {type(t).__name__}")
    shape, dtype = t
    if not isinstance(shape, (tuple, list)) or not all(
            (type(d) is int and d >= 0) or (type(d) is str and d) for d in shape):
        raise ShapeError(f"{op.name}: input {label!r} has a malformed shape {shape!r} (dims must "
                         f"be ints >= 0 or symbolic strs)", where=op.name, got=shape)
    dtypes.check_dtype(dtype, f"{op.name}: input {label!r}")
    return TensorType(tuple(shape), dtype)


def infer_shapes(opdef: OpDef, inputs: Sequence[TensorType | None],
                 attrs: Mapping[str, Any] | None) -> list[TensorType]:
    """The output types of ``opdef`` applied to ``inputs`` with ``attrs``.

    ``inputs`` are positional, in the order of ``opdef.inputs``; trailing optional inputs may
    be left out or given as None. Attributes are normalized first (OpError if bad). Raises
    ContractError for a missing or extra input, and whatever the op's rule raises (ShapeError,
    DTypeError, ContractError) when its contract is not met.
    """
    attrs = normalize_attrs(opdef, attrs)
    given = list(inputs)
    if opdef.variadic_inputs:
        if not given:
            raise ContractError(f"{opdef.name}: needs at least one input")
        for i, t in enumerate(given):
            if t is None:
                raise ContractError(f"{opdef.name}: input {i} is missing (None)")
    else:
        declared = opdef.inputs
        if len(given) > len(declared):
            raise ContractError(f"{opdef.name}: takes at most {len(declared)} input(s) "
                                f"({', '.join(declared)}), got {len(given)}")
        given += [None] * (len(declared) - len(given))
        for entry, t in zip(declared, given):
            if t is None and not entry.endswith("?"):
                raise ContractError(f"{opdef.name}: missing required input {entry!r} (inputs: "
                                    f"{', '.join(declared)})")
    checked = [None if t is None else _check_tensor_type(opdef, i, t)
               for i, t in enumerate(given)]
    outputs = list(opdef.infer(opdef, checked, attrs))
    if not opdef.variadic_outputs and len(outputs) != len(opdef.outputs):
        raise AssertionError(f"{opdef}: rule returned {len(outputs)} outputs")
    return outputs


def check_values(opdef: OpDef, inputs: Sequence[TensorType | None],
                 consts: Sequence[Any], attrs: Mapping[str, Any]) -> None:
    """Run ``opdef``'s value rule, if it has one, after its shape rule accepted ``inputs``.

    ``consts[i]`` is the constant array bound to input ``i`` (None for a run-time input or an
    omitted optional one); ``attrs`` are normalized. Raises what the rule raises.
    """
    if opdef.values is None:
        return
    given, arrays = list(inputs), list(consts)
    if not opdef.variadic_inputs:
        given += [None] * (len(opdef.inputs) - len(given))
        arrays += [None] * (len(opdef.inputs) - len(arrays))
    opdef.values(opdef, given, arrays, dict(attrs))
