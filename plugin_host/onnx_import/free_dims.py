"""Run-time dims fixed at build (``--dim h=128``), as onnxruntime's free-dimension overrides.

An ONNX input dim declared by name (``dim_param``) is known only at run time. The artifact's
ABI keeps it symbolic, and the golden cases and the latency budget are drawn with it at 1:
right for a batch axis, next to nothing for an image's height and width or a sequence length
(a 3x3 convolution of a 1x1 image reads one weight of nine). A sequence length known only at
run time also makes an LSTM one sequence op rather than unrolled steps. Fixing such a dim to
the size the device feeds gives the ABI, the golden cases and the budget that size. The
rewrite is on a copy of the checked proto: every tensor type of the graph (inputs, outputs,
value_info) whose dim carries the name gets the size, as ONNX means one name to be one size.

A dim that must stay run-time can instead be drawn at other sizes for the golden cases
(``--golden-dim h=64,128``): golden case k takes the k-th size, cycling, so the reference
checks the import, and acceptance later checks the backend, at each of them; the latency
budget covers the slowest. An input's golden values can be drawn from a range of its own
(``--golden-range lengths=1,8``), where the model takes only some: integers are otherwise
drawn from [0, 2), so a model that reads ``lengths - 1`` as an index would be given -1.
"""

from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

from abi import dtypes

from ..errors import UnsupportedModelError, UsageError
from .names import dim_name, is_run_time, sanitized

__all__ = ["MAX_FIXED_DIM", "check_golden_dims", "check_golden_ranges", "dim_aliases",
           "fix_dims", "named_dims", "parse_dims", "parse_golden_dims", "parse_golden_ranges",
           "run_time_dims", "with_dims_hint"]

#: The largest size a dim may be fixed to (a value's element count has its own cap).
MAX_FIXED_DIM = 1 << 20


def parse_dims(pairs: Mapping[str, str]) -> dict[str, int]:
    """``{"h": "128"}`` from ``--dim h=128`` as ints; UsageError for a size that is not one."""
    dims = {}
    for name, text in pairs.items():
        try:
            size = int(text, 10)
        except ValueError:
            size = 0
        if not 1 <= size <= MAX_FIXED_DIM:
            raise UsageError(f"--dim {name}={text}: the size must be an integer from 1 to "
                             f"{MAX_FIXED_DIM}")
        dims[name] = size
    return dims


def parse_golden_dims(pairs: Mapping[str, str]) -> dict[str, tuple[int, ...]]:
    """``{"h": "64,128"}`` from ``--golden-dim h=64,128`` as sizes; UsageError for a size
    that is not an integer from 0 to :data:`MAX_FIXED_DIM`."""
    golden = {}
    for name, text in pairs.items():
        try:
            sizes = tuple(int(v, 10) for v in text.split(","))
        except ValueError:
            sizes = (-1,)
        if not all(0 <= v <= MAX_FIXED_DIM for v in sizes):
            raise UsageError(f"--golden-dim {name}={text}: expected sizes, integers from 0 "
                             f"to {MAX_FIXED_DIM} separated by commas, e.g. {name}=64,128")
        golden[name] = sizes
    return golden


def check_golden_dims(golden: Mapping[str, Sequence[int]], inputs: Sequence,
                      fixed: Mapping[str, int],
                      aliases: Mapping[str, Sequence[str]] | None = None
                      ) -> dict[str, tuple[int, ...]]:
    """``golden`` (dim name to the sizes its golden cases take) checked against the ABI's
    ``inputs`` (TensorSpecs): each name one of their run-time dims, or a ``dim_param`` that
    ``aliases`` (:func:`dim_aliases`) maps to some, not one ``fixed`` at build, each size an
    int from 0 to :data:`MAX_FIXED_DIM` (one int alone is one size); UsageError otherwise.
    The answer is keyed by the ABI's names."""
    free = {d for spec in inputs for d in spec.shape if type(d) is not int}
    checked = {}
    for name, sizes in golden.items():
        if type(sizes) is int:
            sizes = (sizes,)
        sizes = tuple(sizes) if isinstance(sizes, (list, tuple)) else ()
        if not sizes or not all(type(v) is int and 0 <= v <= MAX_FIXED_DIM for v in sizes):
            raise UsageError(f"golden dim {name!r}: sizes {list(sizes) or golden[name]!r} are "
                             f"not one or more integers from 0 to {MAX_FIXED_DIM}")
        if name in fixed:
            raise UsageError(f"golden dim {name!r}: fixed at build to {fixed[name]} (--dim), "
                             f"so it has no golden sizes of its own")
        names = (name,) if name in free else tuple((aliases or {}).get(name, (name,)))
        if not all(n in free for n in names):
            have = ", ".join(map(repr, sorted(free))) or "none"
            raise UsageError(f"golden dim {name!r}: no input has a run-time dim of that name "
                             f"(the inputs' run-time dims: {have})")
        checked.update(dict.fromkeys(names, sizes))
    return checked


def parse_golden_ranges(pairs: Mapping[str, str]) -> dict[str, tuple[float, float]]:
    """``{"lengths": "1,8"}`` from ``--golden-range lengths=1,8`` as (low, high); UsageError
    for anything but two finite numbers with low < high."""
    ranges = {}
    for name, text in pairs.items():
        try:
            low, high = (float(v) for v in text.split(","))
        except ValueError:
            low = high = math.nan
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise UsageError(f"--golden-range {name}={text}: expected LOW,HIGH, two finite "
                             f"numbers with LOW < HIGH (integers are drawn from LOW to HIGH - "
                             f"1), e.g. {name}=1,8")
        ranges[name] = (low, high)
    return ranges


def check_golden_ranges(ranges: Mapping[str, Sequence[float]], inputs: Sequence,
                        index_inputs: Mapping[str, int]) -> dict[str, tuple[float, float]]:
    """``ranges`` (input name to the [low, high) its golden values are drawn from) checked
    against the ABI's ``inputs``: each a float or integer input, low < high, integer bounds
    for an integer input (at least one value between them), within [0, vocab) for an
    Embedding's indices (``index_inputs``); UsageError otherwise."""
    kinds = {spec.name: dtypes.to_numpy(spec.dtype).kind for spec in inputs}
    checked = {}
    for name, bounds in ranges.items():
        if name not in kinds:
            raise UsageError(f"golden range {name!r}: no input of that name (the inputs: "
                             f"{', '.join(map(repr, kinds))})")
        try:
            if not isinstance(bounds, (tuple, list)):
                raise TypeError
            low, high = (float(v) for v in bounds)
        except (TypeError, ValueError):
            low = high = math.nan
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise UsageError(f"golden range {name!r}: {bounds!r} is not (low, high), two finite "
                             f"numbers with low < high")
        kind = kinds[name]
        if kind == "b":
            raise UsageError(f"golden range {name!r}: a bool input is drawn from False and True")
        if kind in "iu":
            if low != int(low) or high != int(high):
                raise UsageError(f"golden range {name!r}: integer input, so (low, high) must be "
                                 f"integers, got {bounds!r}")
            low, high = int(low), int(high)
            vocab = index_inputs.get(name)
            if vocab is not None and (low < 0 or high > vocab):
                raise UsageError(f"golden range {name!r}: [{low}, {high}) reaches outside the "
                                 f"Embedding's indices [0, {vocab})")
        checked[name] = (low, high)
    return checked


def dim_aliases(model) -> dict[str, tuple[str, ...]]:
    """Each ``dim_param`` of the graph inputs' run-time dims that the ABI names otherwise
    (``p2o.DynamicDimension.1`` is no name: ``x_d2``), mapped to the ABI's names of the dims
    that carry it, so that ``--golden-dim`` takes it as ``--dim`` does."""
    aliases: dict[str, tuple[str, ...]] = {}
    for d, name in _input_dims(model):
        if d.dim_param and d.dim_param != name and name not in aliases.get(d.dim_param, ()):
            aliases[d.dim_param] = (*aliases.get(d.dim_param, ()), name)
    return aliases


def _tensor_types(graph):
    for vi in (*graph.input, *graph.output, *graph.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            yield vi, vi.type.tensor_type.shape.dim


def fix_dims(model, dims: Mapping[str, int], *, where: str = "model"):
    """A copy of ``model`` with each named dim in ``dims`` fixed to its size (``model`` itself
    when ``dims`` is empty). A name is an input dim's ``dim_param``, fixed wherever the model
    carries it, or the name the ABI gives a dim without a usable one (``x_d2`` for a ``?``, a
    ``-1`` or no name on axis 2 of input ``x``), fixed on that input. UsageError naming the
    model's run-time dims when a name is neither, or a size is out of range."""
    if not dims:
        return model
    for name, size in dims.items():
        if type(size) is not int or not 1 <= size <= MAX_FIXED_DIM:
            raise UsageError(f"dim {name!r}: size {size!r} is not an integer from 1 to "
                             f"{MAX_FIXED_DIM}")
    named = named_dims(model)
    unknown = sorted(set(dims) - named - _params(model))
    if unknown:
        have = ", ".join(sorted(named)) or "none"
        raise UsageError(f"{where}: no input has a run-time dim named "
                         f"{', '.join(map(repr, unknown))} (the inputs' named run-time dims: "
                         f"{have})")
    fixed = type(model)()
    fixed.CopyFrom(model)
    for d, name in _input_dims(fixed):  # before the dim_params are replaced by sizes
        if name in dims:
            d.dim_value = dims[name]  # dim_value and dim_param are one oneof
    for _, shape in _tensor_types(fixed.graph):
        for d in shape:
            if not d.HasField("dim_value") and d.dim_param in dims:
                d.dim_value = dims[d.dim_param]
    return fixed


def _input_dims(model):
    """(dim, the ABI's name of it) for each run-time dim of the graph inputs that are not
    initializers (an older exporter lists its weights as inputs too)."""
    weights = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        t = vi.type.tensor_type
        if vi.name in weights or not vi.type.HasField("tensor_type") or not t.HasField("shape"):
            continue
        for j, d in enumerate(t.shape.dim):
            if is_run_time(d):
                yield d, dim_name(sanitized(vi.name), j, d)


def _params(model) -> set[str]:
    """The ``dim_param`` of each run-time dim of the graph inputs, names or not (``?``)."""
    return {d.dim_param for d, _ in _input_dims(model) if d.dim_param}


def named_dims(model) -> set[str]:
    """The names of the graph inputs' run-time dims, as the ABI has them (see
    :func:`.names.dim_name`)."""
    return {name for _, name in _input_dims(model)}


def with_dims_hint(error: UnsupportedModelError, model) -> UnsupportedModelError:
    """``error`` with a pointer to ``--dim`` when it is about a shape that holds one of the
    inputs' named run-time dims, alone or in a dim computed from it (``'M1-2'``): an index
    into a tensor of run-time batch, a shape computed from it. Fixed at build, those dims make
    such shapes constants. ``error`` itself when it names none of them."""
    text = str(error)
    quoted = {name for token in re.findall(r"'([^']*)'", text)
              for name in re.findall(r"[A-Za-z_]\w*", token)}  # 'h' and 'h-2' name h
    named = sorted(d for d in named_dims(model) if d in quoted)
    if not named:
        return error
    message = error.detail  # without "node 'n' (Op): ", which the new error adds again
    fix = " ".join(f"--dim {d}=SIZE" for d in named)
    return UnsupportedModelError(
        f"{message}; {', '.join(map(repr, named))} {'is a' if len(named) == 1 else 'are'} "
        f"run-time dim{'s' if len(named) > 1 else ''} of the inputs: {fix} (dims= in the "
        f"Python API) fixes {'it' if len(named) == 1 else 'them'} to the size the device "
        f"feeds, and what is computed from {'it' if len(named) == 1 else 'them'} becomes "
        f"constant", node=error.node, op=error.op)


def run_time_dims(inputs: Sequence, golden: Mapping[str, Sequence[int]] | None = None,
                  aliases: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """``"input 'x': 'h' (axis 2, golden size 1)"`` for each dim of the ABI's ``inputs``
    (TensorSpecs) that stays symbolic beyond the first axis (a batch axis is drawn at 1 by
    design, unless ``golden`` says otherwise), with the sizes its golden cases take
    (``golden``, else 1), and the ``dim_param`` the model writes for it where that is not its
    name (``aliases``, :func:`dim_aliases`: ``'x_d2' (axis 2, written 'p2o.Dim.1', ...)``)."""
    golden = golden or {}
    written = {abi: param for param, names in (aliases or {}).items() for abi in names}

    def said(d, j):
        as_written = f", written {written[d]!r}" if d in written else ""
        sizes = ", ".join(map(str, golden.get(d, (1,))))
        return f"{d!r} (axis {j}{as_written}, golden size {sizes})"

    notes = []
    for spec in inputs:
        dims = [said(d, j) for j, d in enumerate(spec.shape)
                if type(d) is not int and (j or d in golden)]
        if dims:
            notes.append(f"input {spec.name!r}: {', '.join(dims)}")
    return notes
