"""TensorSpec (what one tensor at the ABI boundary must be) and Signature (checks a set of them).

A shape is a tuple whose entries are either fixed sizes (``int >= 0``) or named symbolic dims
(identifier strings such as ``"batch"``). A symbolic dim takes the same size everywhere it
appears in one call: :meth:`Signature.check` binds it from the first tensor that has it and
reports every other tensor that disagrees.

Specs are built from artifacts, which are hostile input, so construction validates everything
and :meth:`TensorSpec.from_dict` accepts exactly the shape :meth:`TensorSpec.to_dict` produces.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

import numpy as np

from abi import dtypes, layouts
from abi.errors import ABIError, SpecError

__all__ = ["Dim", "TensorType", "TensorSpec", "Signature", "format_shape",
           "MAX_RANK", "MAX_NAME_LENGTH", "MAX_DIM"]

Dim = int | str

#: Limits on what a spec may declare (numpy's own rank limit is 64).
MAX_RANK = 64
MAX_NAME_LENGTH = 256
MAX_DIM = 2**63 - 1

_SPEC_KEYS = ("name", "shape", "dtype", "layout")


class TensorType(NamedTuple):
    """The static type of a tensor in a graph: its shape (ints and symbolic strs) and dtype name.

    Unlike a TensorSpec's dims, a symbolic entry here may be an expression computed by a shape
    rule (``"(H-1)//2+1"``); such strings are only ever compared for equality.
    """

    shape: tuple[Dim, ...]
    dtype: str


def format_shape(shape: Iterable[Any]) -> str:
    """``(1, batch, 128)``: a shape as a reader expects it, symbolic dims unquoted."""
    items = [str(d) for d in shape]
    if len(items) == 1:
        return f"({items[0]},)"
    return "(" + ", ".join(items) + ")"


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_name(name: Any, what: str) -> str:
    if type(name) is not str:
        raise SpecError(f"{what} must be a str, got {type(name).__name__}")
    if not name or len(name) > MAX_NAME_LENGTH or not name.isprintable():
        raise SpecError(f"{what} must be 1 to {MAX_NAME_LENGTH} printable characters, "
                        f"got {_short_repr(name)}")
    return name


def _check_dim(dim: Any, index: int, where: str) -> Dim:
    if type(dim) is str:
        if not (dim.isidentifier() and dim.isascii() and len(dim) <= MAX_NAME_LENGTH):
            raise SpecError(f"{where}: dim {index} is {_short_repr(dim)}; a symbolic dim must be "
                            f"an ASCII identifier such as 'batch'")
        return dim
    if isinstance(dim, (int, np.integer)) and not isinstance(dim, (bool, np.bool_)):
        if not 0 <= int(dim) <= MAX_DIM:
            raise SpecError(f"{where}: dim {index} is {int(dim)}; fixed dims must be in "
                            f"[0, 2**63 - 1]")
        return int(dim)
    raise SpecError(f"{where}: dim {index} is {_short_repr(dim)} ({type(dim).__name__}); "
                    f"a dim must be an int >= 0 or a symbolic name (str)")


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """What one tensor crossing the ABI boundary must be.

    ``name``: the tensor's name (1-256 printable characters); ``shape``: a tuple of ints >= 0
    and symbolic dim names (a list is accepted and stored as a tuple); ``dtype``: an ABI dtype
    name (:data:`abi.dtypes.DTYPES`); ``layout``: an ABI layout name (:data:`abi.layouts.LAYOUTS`)
    whose rank must equal the shape's, unless it is ``"ANY"``.

    Raises SpecError for a malformed spec, DTypeError for an unknown dtype.
    """

    name: str
    shape: tuple[Dim, ...]
    dtype: str
    layout: str

    def __post_init__(self) -> None:
        name = _check_name(self.name, "TensorSpec name")
        where = f"TensorSpec {name!r}"
        shape = self.shape
        if not isinstance(shape, (tuple, list)):
            raise SpecError(f"{where}: shape must be a tuple of dims, got {type(shape).__name__}")
        if len(shape) > MAX_RANK:
            raise SpecError(f"{where}: rank {len(shape)} exceeds the limit of {MAX_RANK}")
        shape = tuple(_check_dim(d, i, where) for i, d in enumerate(shape))
        object.__setattr__(self, "shape", shape)
        dtypes.check_dtype(self.dtype, where)
        layouts.check_rank(layouts.check_layout(self.layout, where), len(shape), where)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def symbols(self) -> tuple[str, ...]:
        """The symbolic dim names, in order of first appearance."""
        return tuple(dict.fromkeys(d for d in self.shape if type(d) is str))

    @property
    def tensor_type(self) -> TensorType:
        return TensorType(self.shape, self.dtype)

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype} {format_shape(self.shape)} {self.layout}"

    def to_dict(self) -> dict[str, Any]:
        """A msgpack/JSON-friendly dict: ``{"name", "shape" (list), "dtype", "layout"}``."""
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "layout": self.layout}

    @classmethod
    def from_dict(cls, unverified: Any) -> TensorSpec:
        """Rebuild a spec from :meth:`to_dict` output read from an untrusted source.

        Accepts exactly the four keys, a str for name/dtype/layout and a list (or tuple) of ints
        and strs for shape; anything else raises SpecError (DTypeError for an unknown dtype).
        """
        if not isinstance(unverified, Mapping):
            raise SpecError(f"TensorSpec dict: expected a mapping, got "
                            f"{type(unverified).__name__}")
        keys = list(unverified.keys())
        extra = [k for k in keys if k not in _SPEC_KEYS]
        missing = [k for k in _SPEC_KEYS if k not in unverified]
        if extra or missing:
            parts = []
            if missing:
                parts.append("missing key(s) " + ", ".join(map(repr, missing)))
            if extra:
                parts.append("unknown key(s) " + ", ".join(_short_repr(k, 40) for k in extra[:8]))
            raise SpecError(f"TensorSpec dict: {'; '.join(parts)}; expected exactly: "
                            f"{', '.join(_SPEC_KEYS)}")
        for key in ("name", "dtype", "layout"):
            if type(unverified[key]) is not str:
                raise SpecError(f"TensorSpec dict: {key!r} must be a str, got "
                                f"{type(unverified[key]).__name__}")
        shape = unverified["shape"]
        if type(shape) not in (list, tuple):
            raise SpecError(f"TensorSpec dict {unverified['name']!r}: 'shape' must be a list, "
                            f"got {type(shape).__name__}")
        for i, d in enumerate(shape):
            if type(d) not in (int, str):
                raise SpecError(f"TensorSpec dict {unverified['name']!r}: shape[{i}] must be an "
                                f"int or a str, got {type(d).__name__}")
        return cls(unverified["name"], tuple(shape), unverified["dtype"], unverified["layout"])


def _dtype_name(dt: Any) -> str:
    try:
        return dtypes.from_numpy(dt)
    except Exception:  # a dtype outside the ABI: show numpy's own name
        return str(dt)


class Signature:
    """An ordered set of TensorSpecs with unique names, checked together on every call.

    ``where`` names the set in error messages (``"inputs"``, ``"outputs"``); a single tensor is
    called by its singular (``input 'img'``). Everything :meth:`check` needs is computed here,
    once, so the all-good path does no allocation beyond the returned bindings.
    """

    __slots__ = ("specs", "where", "_label", "_by_name", "_plan", "_layouts", "_count")

    def __init__(self, specs: Iterable[TensorSpec], where: str = "inputs") -> None:
        self.specs: tuple[TensorSpec, ...] = tuple(specs)
        self.where = where
        self._label = where[:-1] if where.endswith("s") else where
        by_name: dict[str, TensorSpec] = {}
        for spec in self.specs:
            if not isinstance(spec, TensorSpec):
                raise SpecError(f"Signature({where}): expected TensorSpec, got "
                                f"{type(spec).__name__}")
            if spec.name in by_name:
                raise SpecError(f"Signature({where}): duplicate tensor name {spec.name!r}")
            by_name[spec.name] = spec
        self._by_name = by_name
        self._count = len(self.specs)
        plan = []
        for spec in self.specs:
            fixed = tuple((i, d) for i, d in enumerate(spec.shape) if type(d) is int)
            symbolic = tuple((i, d) for i, d in enumerate(spec.shape) if type(d) is str)
            static_shape = spec.shape if not symbolic else None
            plan.append((spec.name, dtypes.to_numpy(spec.dtype), static_shape, spec.ndim,
                         fixed, symbolic))
        self._plan = tuple(plan)
        # a declared layout is compared only for specs that claim one
        self._layouts = {s.name: s.layout for s in self.specs if s.layout != "ANY"}

    # --- container protocol ------------------------------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[TensorSpec]:
        return iter(self.specs)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> TensorSpec:
        return self._by_name[name]

    def __repr__(self) -> str:
        return f"Signature({self.where}: " + "; ".join(map(str, self.specs)) + ")"

    # --- the check ---------------------------------------------------------------------------

    def check(self, arrays: Mapping[str, np.ndarray], layouts: Mapping[str, str] | None = None,
              bindings: Mapping[str, int] | None = None) -> dict[str, int]:
        """Check ``arrays`` against the specs; return the symbolic dim bindings.

        ``layouts`` optionally declares the layout of some tensors (e.g. what a camera
        produces); each declared layout must equal the spec's unless the spec says ANY.
        ``bindings`` are symbolic dims already bound (the inputs' bindings when checking
        outputs); the returned dict contains them plus every dim bound here.

        Raises one ABIError listing every problem: unknown and missing names, non-arrays, rank,
        each wrong dim, dtype, layout and symbolic dims bound to different sizes.
        """
        bound = dict(bindings) if bindings else {}
        if (type(arrays) is dict or isinstance(arrays, Mapping)) and self._fast(arrays, bound):
            if not layouts or self._layouts_ok(layouts):
                return bound
        return self._diagnose(arrays, layouts, bindings)

    def _fast(self, arrays: Mapping[str, Any], bound: dict[str, int]) -> bool:
        if len(arrays) != self._count:
            return False
        ndarray = np.ndarray
        for name, dtype, static_shape, ndim, fixed, symbolic in self._plan:
            a = arrays.get(name)
            if type(a) is not ndarray or a.dtype != dtype:
                return False
            shape = a.shape
            if static_shape is not None:
                if shape != static_shape:
                    return False
                continue
            if len(shape) != ndim:
                return False
            for i, want in fixed:
                if shape[i] != want:
                    return False
            for i, sym in symbolic:
                got = shape[i]
                if bound.setdefault(sym, got) != got:
                    return False
        return True

    def _layouts_ok(self, declared: Mapping[str, str]) -> bool:
        by_name, expected = self._by_name, self._layouts
        for name, layout in declared.items():
            if name not in by_name:
                return False
            want = expected.get(name)
            if want is not None and layout != want:
                return False
            if want is None and layout not in layouts.LAYOUTS:
                return False
        return True

    def _diagnose(self, arrays: Any, declared: Mapping[str, str] | None,
                  bindings: Mapping[str, int] | None) -> dict[str, int]:
        label, where = self._label, self.where
        if not isinstance(arrays, Mapping):
            raise ABIError([f"expected a mapping of {label} name to numpy.ndarray, got "
                            f"{type(arrays).__name__}"], where=where)
        problems: list[str] = []
        names = list(self._by_name)
        for key in arrays:
            if key not in self._by_name:
                problems.append(f"unknown {label} {_short_repr(key)}" + _did_you_mean(key, names)
                                + f"; expected {where}: {', '.join(names)}")
        bound: dict[str, int] = dict(bindings) if bindings else {}
        origin: dict[str, str] = {sym: "the given bindings" for sym in bound}
        for spec in self.specs:
            name = spec.name
            if name not in arrays:
                problems.append(f"missing {label} {name!r} ({spec.dtype} "
                                f"{format_shape(spec.shape)} {spec.layout})")
                continue
            a = arrays[name]
            if not isinstance(a, np.ndarray):
                problems.append(f"{label} {name!r}: expected a numpy.ndarray, got "
                                f"{type(a).__name__}")
                continue
            shape = a.shape
            if len(shape) != spec.ndim:
                problems.append(f"{label} {name!r}: rank expected {spec.ndim}, got {len(shape)} "
                                f"(expected shape {format_shape(spec.shape)}, got "
                                f"{format_shape(shape)})")
            else:
                for i, want in enumerate(spec.shape):
                    got = shape[i]
                    if type(want) is int:
                        if got != want:
                            problems.append(f"{label} {name!r}: dim {i} expected {want}, got "
                                            f"{got} (expected shape {format_shape(spec.shape)}, "
                                            f"got {format_shape(shape)})")
                    elif want not in bound:
                        bound[want], origin[want] = got, f"{name!r} dim {i}"
                    elif bound[want] != got:
                        problems.append(f"symbolic dim {want!r} is {bound[want]} from "
                                        f"{origin[want]} but {got} from {name!r} dim {i}")
            if a.dtype != dtypes.to_numpy(spec.dtype):
                problems.append(f"{label} {name!r}: dtype expected {spec.dtype}, got "
                                f"{_dtype_name(a.dtype)}")
        for key, layout in (declared or {}).items():
            spec = self._by_name.get(key)
            if spec is None:
                problems.append(f"layout declared for unknown {label} {_short_repr(key)}"
                                + _did_you_mean(key, names))
            elif layout not in layouts.LAYOUTS:
                problems.append(f"{label} {key!r}: declared layout {_short_repr(layout)} is not "
                                f"an ABI layout")
            elif spec.layout != "ANY" and layout != spec.layout:
                problems.append(f"{label} {key!r}: layout expected {spec.layout}, got {layout}")
        if problems:
            raise ABIError(problems, where=where)
        return bound


def _did_you_mean(key: Any, names: list[str]) -> str:
    if type(key) is not str:
        return ""
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
