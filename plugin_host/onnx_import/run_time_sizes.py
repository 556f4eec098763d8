"""Run-time sizes carried by tensors of the graph: where the ONNX import finds a run-time dim
when the call runs, and how it turns one into a tensor.

A dim the ABI names (``t``, ``h//2``, ``past+seq``, ``2*t``, ``t - t//4``) has no value at
import. The ops that need one read it back from a tensor that has it as a dim: the graph
tensor whose Shape the model took, or any tensor of the graph so far (:func:`dim_source`),
else a bool mask built to carry it (:func:`run_time_mask`: a floor quotient of a dim by a
stepped slice, a sum by a concat, a product by a flatten, a difference by a slice of one mask
by the other's length). From those come the dim's value as an int64 tensor
(:func:`size_tensor`, :func:`shape_value_tensor`), ``arange`` over it
(:func:`run_time_arange`) and the ``like`` tensor that ``unflatten`` and ``resize`` read
sizes from (:func:`sizes_like`). :func:`has_dim` says whether a dim can be carried at all;
an op over a dim that cannot is refused naming it."""

from __future__ import annotations

import itertools

import numpy as np

from abi.ops import dims

from . import symbolic
from .fold import FAR


def sizes_like(imp, sizes: list) -> tuple[str, list[int]]:
    """A tensor ``like`` that carries the run-time entries of ``sizes`` (ints and run-time
    dims, one at least) as its own dims, and per entry the axis of ``like`` whose dim it is
    (-1 for an int): a tensor that has them all (:func:`dim_source`), else a mask built to
    carry each on its own axis (:func:`_sizes_mask`). What ``unflatten`` and ``resize`` read
    their run-time sizes from when the call runs."""
    free = [k for k, d in enumerate(sizes) if type(d) is not int]
    found = {k: dim_source(imp, sizes[k]) for k in free}
    sources = {None if f is None else f[0] for f in found.values()}
    if len(sources) == 1 and None not in sources:
        [like] = sources
        at = {k: f[1] for k, f in found.items()}
    else:
        like = _sizes_mask(imp, [sizes[k] for k in free])
        at = {k: n for n, k in enumerate(free)}
    return like, [at.get(k, -1) for k in range(len(sizes))]


def shape_value_tensor(imp, value: np.ndarray, out: str, dtype: str) -> None:
    """ONNX value ``out`` becomes a graph tensor of ``dtype`` holding the shape value
    ``value`` (ints and run-time dims), computed when the call runs (:func:`entry_count`
    per run-time entry), in int64 (exact) and then cast. What a model that casts its shape
    to float computes from (``x.std()``'s n - 1, a mean as a sum over a count, a linspace's
    step ``2 / (w - 1)``), and what any op that is not shape arithmetic reads a shape value
    as (``max(w - 1, 1)``)."""
    parts = [size_tensor(imp, entry, f".{k}") for k, entry in
             enumerate(value.reshape(-1).tolist())]
    y = parts[0] if len(parts) == 1 else imp.emit("concat", parts, [None], {"axis": 0},
                                                  suffix=".entries")[0]
    shape = {"shape": list(value.shape)}
    if dtype == "int64":
        imp.emit("reshape", [y], [out], shape, suffix=".shape")
        return
    y = imp.emit("reshape", [y], [None], shape, suffix=".shape")[0]
    imp.emit("cast", [y], [out], {"dtype": dtype}, suffix=".cast")


def size_tensor(imp, d, suffix: str) -> str:
    """The size ``d`` as an int64 tensor of shape (1,): a constant for an int (named after
    the node and ``suffix``), else counted when the call runs (:func:`entry_count`)."""
    if type(d) is int:
        return imp.add_constant(np.array([d], np.int64), f"{imp.node_name}{suffix}")
    return entry_count(imp, d, suffix)


def entry_count(imp, entry, suffix: str) -> str:
    """A run-time dim's value as an int64 tensor of shape (1,): the element count of a mask
    that long (:func:`_sizes_mask`) where the dim is a product of dims that tensors of the
    graph have, else its terms' counts added (``w - 1``, ``w - 2*w1``: :func:`dims.as_sum`)
    or its factors' counts multiplied (:func:`_product_count`)."""
    const, terms = dims.as_sum(entry)
    factor, names = dims.as_product(entry)
    single = const == 0 and len(terms) == 1 and terms[0][0] == 1
    if single and not all(has_dim(imp, n) or _plain(n) for n in names):
        return _product_count(imp, factor, names, suffix)
    if single or all(dim_source(imp, n) is not None for n in names):
        y = imp.emit("cast", [_sizes_mask(imp, [entry])], [None], {"dtype": "int64"},
                     suffix=f"{suffix}.ones")[0]
        return imp.emit("sum", [y], [None], {"axes": [0], "keepdim": True},
                        suffix=f"{suffix}.count")[0]
    y = imp.add_constant(np.array([const], np.int64), f"{imp.node_name}{suffix}.const")
    for n, (sign, term) in enumerate(terms):
        count = entry_count(imp, term, f"{suffix}.{n}")
        y = imp.emit("add" if sign > 0 else "sub", [y, count], [None],
                     suffix=f"{suffix}.term{n}")[0]
    return y


def _plain(name: str) -> bool:
    """Whether ``name`` (one of a product's) is neither a sum nor a floor quotient."""
    return dims.whole_quotient(name) is None and dims.as_sum(name) == (0, [(1, name)])


def _product_count(imp, factor: int, names: tuple, suffix: str) -> str:
    """:func:`entry_count` of ``factor`` times ``names``, some of which no tensor has as a
    dim: each such sum counted (``3*(t - 2*(t//2))``) and each such floor quotient its
    dividend's count divided (``(t - 2*(t//4)) // 2``: exact, as :mod:`.symbolic` makes a
    quotient of a sum only where the sum is not negative)."""
    y = imp.add_constant(np.array([factor], np.int64), f"{imp.node_name}{suffix}.factor")
    for n, name in enumerate(names):
        quotient = None if has_dim(imp, name) else dims.whole_quotient(name)
        if quotient is None:
            count = entry_count(imp, name, f"{suffix}.{n}")
        else:
            x, divisor = quotient
            d = imp.add_constant(np.array([divisor], np.int64),
                                 f"{imp.node_name}{suffix}.{n}.divisor")
            count = imp.emit("int_div", [entry_count(imp, x, f"{suffix}.{n}.sum"), d],
                             [None], suffix=f"{suffix}.{n}.quotient")[0]
        y = imp.emit("mul", [y, count], [None], suffix=f"{suffix}.factor{n}")[0]
    return y


def _sizes_mask(imp, sizes: list) -> str:
    """A bool tensor whose axis k has the run-time size ``sizes[k]``, a product of ints and
    run-time dims (``2*seq``): per size, the :func:`run_time_mask` of its dims, expanded by
    its int factor and flattened into one axis; the sizes' axes broadcast together."""
    mask = None
    for k, size in enumerate(sizes):
        factor, names = dims.as_product(size)
        y = run_time_mask(imp, [*names, factor])  # (n1, ..., 1): the factor expanded next
        if factor != 1:
            y = imp.emit("expand", [y], [None], {"shape": [1] * len(names) + [factor]},
                         suffix=f".size{k}.factor")[0]
        if len(names) + (factor != 1) > 1:
            y = imp.emit("flatten", [y], [None], {"start_dim": 0, "end_dim": -1},
                         suffix=f".size{k}.flat")[0]
        y = imp.emit("reshape", [y], [None], {"shape": [1] * k + [-1] + [1] * (
            len(sizes) - k - 1)}, suffix=f".size{k}")[0]
        mask = y if mask is None else imp.emit("or", [mask, y], [None],
                                                suffix=f".sizes{k}")[0]
    return mask


def run_time_arange(imp, dims: list, axis: int, sources: dict | None = None,
                    dtype=np.int64, reverse: bool = False) -> str:
    """``arange(dims[axis])`` laid along ``axis`` of a tensor of rank ``len(dims)`` (1 on
    the other axes), reversed if ``reverse``: a constant for a fixed dim; for a run-time one,
    the running sum (``cumsum``, from the end if ``reverse``) of ones over it
    (``where(mask, 1, 1)``, the mask of :func:`run_time_mask`, ``sources`` as there),
    minus 1."""
    shape = [1] * len(dims)
    shape[axis] = d = dims[axis]
    if type(d) is int:
        values = np.arange(d, dtype=dtype)
        return imp.add_constant((values[::-1] if reverse else values).reshape(shape),
                                f"{imp.node_name}.arange{axis}")
    one = imp.add_constant(np.ones([1] * len(dims), dtype), f"{imp.node_name}.one{axis}")
    [ones] = imp.emit("where", [run_time_mask(imp, shape, sources), one, one], [None],
                      suffix=f"/ones{axis}")
    [count] = imp.emit("cumsum", [ones], [None], {"axis": axis, "reverse": reverse},
                       suffix=f"/count{axis}")
    return imp.emit("sub", [count, one], [None], suffix=f"/arange{axis}")[0]


def dim_source(imp, d) -> tuple[str, int] | None:
    """``(graph tensor, axis)`` of a tensor whose dim there is ``d``, written so or known
    equal (``H//4`` and a conv's ``(H-4)//4+1``): one whose Shape the model took, else the
    first of the graph so far that has it (the model may compute ``H//4`` from the input's
    Shape, where the conv's output has it as a dim); None if none."""
    if d in imp.dim_source:
        return imp.dim_source[d]
    product = dims.as_product(d)
    found = next((v for k, v in imp.dim_source.items() if dims.as_product(k) == product), None)
    if found is None:  # the tensors defined since the last look join the index, once each
        for name, t in itertools.islice(imp.types.items(), imp.dims_indexed, None):
            for axis, have in enumerate(t.shape):
                if type(have) is not int:
                    imp.dims_index.setdefault(dims.as_product(have), (name, axis))
        imp.dims_indexed = len(imp.types)
        found = imp.dims_index.get(product)
    return found


def _derived(imp, d) -> tuple[str, int, int, int] | None:
    """``(x, start, s, q)`` where the run-time dim ``d`` is a floor quotient ``(x+a)//s`` of a
    dim x that a tensor has (``h//2``: ``interpolate(x, size=(h // 2, w // 2))``), or x less
    an int (``t-2``: the dynamo exporter's ``x.unfold(1, 3, 1)``): with a = s * q + r, r in
    [0, s), and start = s - 1 - r, ``range(x)[start::s]`` has d - q entries (where x is at
    least start): q more than that are ``(n+2)//2``, a half spectrum's ``n // 2 + 1``, and
    ``t+1`` (s = 1), a padded tensor's first t + 1 steps. None otherwise."""
    parts = dims.quotient(str(d)) if type(d) is str else None
    if parts is None:  # x//s of a product of dims x that tensors have: (h*w)//4
        whole = dims.whole_quotient(d)
        if whole is None or _factors(imp, whole[0]) is None:
            return None
        return whole[0], whole[1] - 1, whole[1], 0
    if parts[1:] == (0, 1) or dim_source(imp, parts[0]) is None:
        return None
    x, a, s = parts
    q = max(a // s, 0)
    return (x, s - 1 - (a - s * q), s, q) if s - 1 - (a - s * q) >= 0 else None


def has_dim(imp, d) -> bool:
    """Whether :func:`run_time_mask` can carry the run-time dim ``d``."""
    return dim_source(imp, d) is not None or _derived(imp, d) is not None or \
        _summands(imp, d) is not None or _factors(imp, d) is not None or \
        _difference(imp, d) is not None or _carried_prefix(imp, d) is not None


def _carried_prefix(imp, d) -> tuple[str, int] | None:
    """:func:`.symbolic.prefix` of ``d`` where a mask carries its x."""
    found = symbolic.prefix(d)
    return found if found is not None and has_dim(imp, found[0]) else None


def _prefix_source(imp, d) -> tuple[str, int] | None:
    """A 1-D tensor of the :func:`.symbolic.prefix` dim ``d``: x's mask, its first c entries."""
    found = _carried_prefix(imp, d)
    if found is None:
        return None
    x, c = found
    [y] = imp.emit("slice", [run_time_mask(imp, [x])], [None],
                   {"starts": [0], "ends": [c], "axes": [0]}, suffix=f".{x}.first{c}")
    return y, 0


def _difference(imp, d) -> tuple | None:
    """``(a, b)`` where the run-time dim ``d`` is ``a - b`` of two dims that masks carry and
    not negative at any size (:func:`.symbolic.maybe_negative`): a center crop's end
    ``t - t//4``. None otherwise."""
    const, terms = dims.as_sum(d) if type(d) is str else (0, [])
    if const or len(terms) != 2 or sorted(sign for sign, _ in terms) != [-1, 1] or \
            symbolic.maybe_negative(d):
        return None
    a, b = (term for _, term in sorted(terms, reverse=True))
    return (a, b) if all(has_dim(imp, t) for t in (a, b)) else None


def _difference_source(imp, d) -> tuple[str, int] | None:
    """A 1-D tensor of the :func:`_difference` dim ``a - b``: the mask of a, its first b
    entries sliced off (read from b's mask when the call runs)."""
    found = _difference(imp, d)
    if found is None:
        return None
    a, b = found
    [y] = imp.emit("slice", [run_time_mask(imp, [a]), run_time_mask(imp, [b])], [None],
                   {"starts": [0], "ends": [FAR], "axes": [0], "like_starts": [0]},
                   suffix=f".{d}.less")
    return y, 0


def _factors(imp, d) -> tuple[int, list] | None:
    """``(k, [d1, d2, ...])`` where the run-time dim ``d`` is the product ``k * d1 * d2 * ...``
    of dims that tensors carry, one per name of ``d``, and an int k >= 1, two or more dims or
    one and k > 1: a detector's anchor count per level, a feature map's height times its width
    (``torch.full((h * w, 1), stride)`` under a run-time image size), twice a length (the
    dynamo exporter's linear ``F.interpolate(x, scale_factor=2)`` takes a Range of ``2*t``),
    a multiple of a quotient (Swin's map padded to a multiple of its window, ``4*((t+3)//4)``:
    :func:`_derived`). None otherwise."""
    coefficient, names = dims.as_product(d) if type(d) is str else (1, ())
    if len(names) < 2 and not (names and coefficient > 1):
        return None
    parts = []
    for name in names:
        if dim_source(imp, name) is not None:  # else the index is now up to date
            parts.append(name)
            continue
        found = next(((c, source) for (c, have), source in imp.dims_index.items()
                      if have == (name,) and c > 0 and coefficient % c == 0), None)
        if found is None and _derived(imp, name) is not None:  # (t+3)//4: a mask of its own
            parts.append(name)
            continue
        if found is None:
            return None
        c, (tensor, axis) = found
        coefficient //= c
        parts.append(imp.types[tensor].shape[axis])
    return coefficient, parts


def _product_source(imp, d) -> tuple[str, int] | None:
    """A 1-D tensor of the :func:`_factors` dim ``d``: the mask over its factors, one per
    axis (and k entries on one more), flattened."""
    found = _factors(imp, d)
    if found is None:
        return None
    k, parts = found
    mask = run_time_mask(imp, parts + ([k] if k > 1 else []))
    if k > 1:
        imp.check_size(f"run-time size {d!r}: the mask of its factor {k}", [k])
        wide = imp.add_constant(np.zeros([1] * len(parts) + [k], bool), f"{imp.node_name}.{d}.k")
        mask = imp.emit("or", [mask, wide], [None], suffix=f".{d}.times{k}")[0]
    return imp.emit("reshape", [mask], [None], {"shape": [-1]}, suffix=f".{d}.product")[0], 0


def _summands(imp, d) -> tuple[int, list] | None:
    """``(c, [d1, d2, ...])`` where the run-time dim ``d`` is the sum ``d1 + d2 + ... + c``
    of dims that tensors carry (:func:`dim_source`, :func:`_derived`, :func:`_factors`) and an
    int c >= 0, two or more dims or one and c > 0: a decoder's key length ``past+seq``, its
    cache's length and the new tokens'; a map padded by one step and then to a multiple of 4,
    ``4*(t//4)+4``. None otherwise."""
    const, terms = dims.as_sum(d) if type(d) is str else (0, [])
    if len(terms) + (const > 0) < 2 or const < 0 or any(sign != 1 for sign, _ in terms):
        return None
    parts = [term for _, term in terms]
    if any(dim_source(imp, t) is None and _derived(imp, t) is None and _factors(imp, t) is None
           for t in parts):
        return None
    return const, parts


def _summed_source(imp, d) -> tuple[str, int] | None:
    """A 1-D tensor of the :func:`_summands` dim ``d``: its parts' masks concatenated."""
    found = _summands(imp, d)
    if found is None:
        return None
    const, parts = found
    masks = [run_time_mask(imp, [t]) for t in parts]
    if const:
        imp.check_size(f"run-time size {d!r}: the mask of its {const} entries more", [const])
        masks.append(imp.add_constant(np.ones(const, bool), f"{imp.node_name}.{d}.ones"))
    return imp.emit("concat", masks, [None], {"axis": 0}, suffix=f".{d}.sum")[0], 0


def _derived_source(imp, d) -> tuple[str, int] | None:
    """A 1-D tensor of the :func:`_derived` dim ``d``: the mask of x sliced from start by s
    (and q entries more)."""
    derived = _derived(imp, d)
    if derived is None:
        return None
    x, start, s, q = derived
    [y] = imp.emit("slice", [run_time_mask(imp, [x])], [None],
                   {"starts": [start], "ends": [FAR], "axes": [0], "steps": [s]},
                   suffix=f".{x}.from{start}.by{s}")
    if q:
        imp.check_size(f"run-time size {d!r}: the mask of its {q} entries more", [q])
        more = imp.add_constant(np.ones(q, bool), f"{imp.node_name}.{d}.more")
        [y] = imp.emit("concat", [y, more], [None], {"axis": 0}, suffix=f".{d}.more")
    return y, 0


def run_time_mask(imp, dims: list, sources: dict | None = None) -> str:
    """A bool tensor of rank ``len(dims)`` that carries each run-time dim of ``dims`` on its
    axis (1 on the others), read back from a tensor that has it (``equal`` of a
    one-element-wide slice of it with itself): the one in ``sources`` (dim -> (graph tensor,
    axis)), else :func:`dim_source`'s. The slice of another run-time dim of that tensor is
    summed away (its size is 1 only when the call gives the dim one)."""
    mask = None
    for axis, d in enumerate(dims):
        if type(d) is int:
            continue
        known = (sources or {}).get(d) or dim_source(imp, d) or _derived_source(imp, d) or \
            _summed_source(imp, d) or _product_source(imp, d) or \
            _difference_source(imp, d) or _prefix_source(imp, d)
        if known is None:
            raise imp.unsupported(f"shape {dims}: run-time dim {d!r} is a dim of no tensor of "
                                  f"the graph so far, so it cannot be read when the call runs")
        source, at = known
        rank = len(imp.types[source].shape)
        y = source
        if rank > 1:
            others = [a for a in range(rank) if a != at]
            y = imp.emit("slice", [y], [None], {"starts": [0] * len(others),
                                                "ends": [1] * len(others), "axes": others},
                         suffix=f".{axis}.slice")[0]
            free = [a for a in others if type(imp.types[source].shape[a]) is not int]
            if free:
                if imp.types[y].dtype == "bool":
                    y = imp.emit("cast", [y], [None], {"dtype": "uint8"},
                                 suffix=f".{axis}.numeric")[0]
                y = imp.emit("sum", [y], [None], {"axes": free, "keepdim": True},
                             suffix=f".{axis}.sum")[0]
        y = imp.emit("reshape", [y], [None], {"shape": [1] * axis + [-1] + [1] * (
            len(dims) - axis - 1)}, suffix=f".{axis}.dim")[0]
        y = imp.emit("equal", [y, y], [None], suffix=f".{axis}.mask")[0]
        mask = y if mask is None else imp.emit("or", [mask, y], [None],
                                                suffix=f".{axis}.masks")[0]
    if mask is None:  # not reached: a fixed shape is folded
        raise imp.unsupported(f"shape {dims} is fixed but was not folded")
    return mask


def filled(imp, dims: list, value: np.ndarray, out: str) -> None:
    """ONNX value ``out`` becomes a tensor of shape ``dims`` (ints and run-time dims) holding
    ``value`` (0-d, its dtype the tensor's): a constant where every dim is fixed, else
    ``where(mask, c, c)``, c the value over the fixed dims (1 on the others) and the mask that
    of :func:`run_time_mask`, which carries the run-time dims (its entries are not read)."""
    fixed = [d if type(d) is int else 1 for d in dims]
    imp.check_size("its output", fixed)
    c = np.full(fixed, value, value.dtype)
    if fixed == list(dims):
        imp.set_const(out, c, f"{imp.node_name}.value")
        return
    c = imp.add_constant(c, f"{imp.node_name}.value")
    imp.emit("where", [run_time_mask(imp, dims), c, c], [out])
