"""ONNX Einsum (torch.einsum) written as existing glue ops.

One or two operands, explicit (``bij,bjk->bik``) or implicit (``ij,jk``: the labels used once,
sorted) output. A label that only one operand has and the output lacks is summed
away first (``sum``). What remains of two operands becomes one ``matmul``: each operand is
transposed to (batch labels, its free labels, the contracted labels) -- the batch labels are
those of both operands and the output -- and reshaped so that the free labels and the
contracted labels are one dim each; the product is reshaped back to one dim per label and
transposed to the output's order. Without batch labels the first operand's free labels stay
dims of their own (matmul broadcasts the second operand over the leading ones), so that
``bsd,dk->bsk`` needs no reshape. With nothing to contract the two operands are multiplied
(``mul``, broadcasting over size-1 dims) instead. A reshape or transpose that changes nothing is
left out: ``bhqd,bhkd->bhqk`` is a transpose and a matmul.

An ellipsis becomes labels of its own, one per dim it covers (aligned from the right; dims
that would broadcast against each other under it are refused).

A label repeated within one operand (a diagonal, ``ii->i``, or a trace, ``ii``) is taken along
its diagonal first (:func:`_diagonal`), over a static dim.

Refused (``UnsupportedModelError`` naming the node): a repeated label over a run-time dim,
more than two operands, a run-time (symbolic) dim that would have
to be merged with another dim or a reshape with more than one of them. Malformed
(``ModelFileError``): a character that is not an ASCII letter, a label in the output that no
operand has or that it repeats, an operand whose rank differs from its labels, a label bound to
two different sizes.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ModelFileError

__all__ = ["einsum"]


def _spelled_out(imp, equation: str, eq: str, shapes: list) -> str:
    """``eq`` with each ellipsis written as labels of its own (letters the equation does not
    use), aligned from the right as numpy aligns them, and an implicit output made explicit:
    the ellipsis labels, then the labels used once, sorted. Ellipsis dims that would broadcast
    (1 against n) are refused: one label is one size here."""
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    counts = []
    for t, shape in zip(terms, shapes):
        if t.count("...") > 1 or "." in t.replace("...", "", 1):
            raise ModelFileError(f"equation {equation!r}: {t!r} has a '.' outside one ellipsis")
        counts.append(len(shape) - len(t) + 3 if "..." in t else 0)
        if counts[-1] < 0:
            raise ModelFileError(f"equation {equation!r}: an operand of shape {tuple(shape)} "
                                 f"has fewer dims than the labels of {t!r}")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in eq]
    n = max(counts)
    ell = "".join(spare[:n])
    if len(ell) < n:
        raise imp.unsupported(f"equation {equation!r}: no letters left to spell its ellipsis")
    for i, label in enumerate(ell):  # the operands' dims under each ellipsis label
        dims = {shape[len(shape) - len(t.split("...")[1]) - n + i]
                for t, shape, k in zip(terms, shapes, counts) if k >= n - i}
        if len(dims) > 1:
            raise imp.unsupported(f"equation {equation!r}: the ellipsis dims broadcast "
                                  f"({' against '.join(map(str, sorted(dims, key=str)))}), "
                                  f"which is not supported")
    once = "".join(sorted(c for c in set(lhs) - set(",.") if lhs.count(c) == 1))
    terms = [t.replace("...", ell[n - k:]) for t, k in zip(terms, counts)]
    if arrow and "." in out.replace("...", "", 1):
        raise ModelFileError(f"equation {equation!r}: the output has a '.' outside one ellipsis")
    if arrow and n and "..." not in out:
        raise imp.unsupported(f"equation {equation!r}: the output leaves out the ellipsis dims "
                              f"(numpy refuses that too)")
    return ",".join(terms) + "->" + (out.replace("...", ell) if arrow else ell + once)


def _parse(imp, equation: str, shapes: list) -> tuple[list[str], str]:
    """The operand terms and the output term of ``equation`` (implicit output made explicit,
    an ellipsis spelled out) for operands of ``shapes``."""
    operands = len(shapes)
    eq = equation.replace(" ", "")
    if "." in eq:
        eq = _spelled_out(imp, equation, eq, shapes)
    lhs, arrow, out = eq.partition("->")
    if "->" in out:
        raise ModelFileError(f"equation {equation!r} has more than one '->'")
    terms = lhs.split(",")
    for text in (*terms, out):
        bad = [c for c in text if not (c.isascii() and c.isalpha())]
        if bad:
            raise ModelFileError(f"equation {equation!r}: {bad[0]!r} is not a label (labels "
                                 f"are ASCII letters)")
    if len(terms) != operands:
        raise ModelFileError(f"equation {equation!r} has {len(terms)} operand(s), the node "
                             f"{operands} input(s)")
    if operands > 2:
        raise imp.unsupported(f"equation {equation!r} has {operands} operands (only one or two "
                              f"are supported)")
    if not arrow:  # implicit: the labels used once, sorted (upper case first, as numpy)
        out = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
    unknown = sorted(set(out) - set(lhs))
    if unknown:
        raise ModelFileError(f"equation {equation!r}: output label(s) {''.join(unknown)!r} are "
                             f"in no operand")
    if len(set(out)) != len(out):
        raise ModelFileError(f"equation {equation!r}: the output {out!r} repeats a label")
    return terms, out


def _sizes(imp, equation: str, names: list[str], terms: list[str]) -> dict[str, object]:
    """Each label's dim; the operands' ranks must match their terms."""
    sizes: dict[str, object] = {}
    for name, term in zip(names, terms):
        shape = imp.type_of(name).shape
        if len(shape) != len(term):
            raise ModelFileError(f"equation {equation!r}: operand {name!r} of shape "
                                 f"{tuple(shape)} has rank {len(shape)}, its term {term!r} "
                                 f"{len(term)} labels")
        for label, d in zip(term, shape):
            imp.same_dims(sizes.setdefault(label, d), d,
                          f"equation {equation!r}: label {label!r}")
    return sizes


class _Plan:
    """Emits the decomposition's nodes; the last one of the main chain computes the output."""

    def __init__(self, imp, node, equation: str, sizes: dict) -> None:
        self.imp, self.node, self.equation, self.sizes = imp, node, equation, sizes
        self.chain: list[tuple] = []  # (op, extra inputs, attrs, suffix) on the main value

    def merged(self, labels: str) -> object:
        """One dim for ``labels``: 1 for none, the label's own dim for one, else the product,
        which must be static."""
        dims = [self.sizes[c] for c in labels]
        if len(dims) == 1:
            return dims[0]
        if not all(type(d) is int for d in dims):
            raise self.imp.unsupported(
                f"equation {self.equation!r}: labels {labels!r} of dims {dims} would be merged "
                f"into one dim, which needs them static")
        return math.prod(dims)

    def reshape(self, shape: list) -> dict:
        symbolic = [d for d in shape if type(d) is not int]
        if len(symbolic) > 1:
            raise self.imp.unsupported(f"equation {self.equation!r} needs a reshape to "
                                       f"{shape}, which has more than one run-time dim")
        return {"shape": [d if type(d) is int else -1 for d in shape]}

    def arrange(self, x: str, labels: str, order: str, shape: list | None,
                suffix: str) -> str:
        """``x`` (one dim per label of ``labels``) transposed to ``order``, then reshaped to
        ``shape`` where that differs from one dim per label; a constant is rearranged here."""
        perm = [labels.index(c) for c in order]
        if shape is None or list(shape) == [self.sizes[c] for c in order]:
            shape = None
        if x in self.imp.tensors and (order != labels or shape is not None):
            value = np.transpose(self.imp.tensors[x], perm)
            return self.imp.add_constant(np.ascontiguousarray(
                value if shape is None else value.reshape(shape)), x)
        if order != labels:
            [x] = self.imp.emit("transpose", [x], [None], {"perm": perm},
                                suffix=f"/transpose{suffix}")
        if shape is not None:
            [x] = self.imp.emit("reshape", [x], [None], self.reshape(shape),
                                suffix=f"/reshape{suffix}")
        return x

    def then(self, op: str, attrs: dict, extra: list | None = None) -> None:
        self.chain.append((op, extra or [], attrs))

    def finish(self, x: str) -> None:
        """Emit the main chain from ``x``, the last node binding the node's output."""
        out = self.node.output[0]
        if not self.chain:
            self.imp.alias(out, x)
            return
        for i, (op, extra, attrs) in enumerate(self.chain):
            last = i == len(self.chain) - 1
            [x] = self.imp.emit(op, [x, *extra], [out if last else None], attrs,
                                suffix="" if last else f"/{op}")


def _sum_away(imp, x: str, term: str, keep: set, suffix: str) -> tuple[str, str]:
    """``x`` summed over the labels of ``term`` not in ``keep``, and the labels left."""
    gone = [i for i, c in enumerate(term) if c not in keep]
    if not gone:
        return x, term
    [x] = imp.emit("sum", [x], [None], {"axes": gone, "keepdim": False}, suffix=f"/sum{suffix}")
    return x, "".join(c for c in term if c in keep)


def _diagonal(imp, x: str, term: str, sizes: dict, equation: str,
              suffix: str) -> tuple[str, str]:
    """``x`` with each label its term repeats taken along its diagonal (``ii->i``, a trace
    ``ii``, ``bii->bi``), and the labels left (a repeated label once, last): the two axes
    moved last (``transpose``), merged (``flatten``) and a ``gather`` of the n entries at
    multiples of n + 1, exact; the label's dim must be static."""
    while True:
        label = next((c for c in term if term.count(c) > 1), None)
        if label is None:
            return x, term
        n = sizes[label]
        if type(n) is not int:
            raise imp.unsupported(f"equation {equation!r}: label {label!r} repeated within an "
                                  f"operand over run-time dim {n!r}: its diagonal needs it "
                                  f"static")
        i = term.index(label)
        j = term.index(label, i + 1)
        rank, others = len(term), [k for k in range(len(term)) if k not in (i, j)]
        if others + [i, j] != list(range(rank)):
            [x] = imp.emit("transpose", [x], [None], {"perm": others + [i, j]},
                           suffix=f"/diagonal{suffix}_{label}_t")
        [x] = imp.emit("flatten", [x], [None], {"start_dim": rank - 2, "end_dim": rank - 1},
                       suffix=f"/diagonal{suffix}_{label}_flat")
        at = imp.add_constant(np.arange(n, dtype=np.int64) * (n + 1),
                              f"{imp.node_name}.diagonal{suffix}_{label}")
        [x] = imp.emit("gather", [x, at], [None], {"axis": rank - 2},
                       suffix=f"/diagonal{suffix}_{label}")
        term = "".join(term[k] for k in others) + label


def einsum(imp, node, attrs) -> None:
    """The Einsum mapper (registered in :data:`.ops.MAPPERS`)."""
    extra = sorted(set(attrs) - {"equation"})
    if extra:
        raise imp.unsupported(f"attribute {extra[0]}={attrs[extra[0]]!r} is not supported")
    equation = attrs.get("equation")
    if not isinstance(equation, str):
        raise ModelFileError("needs a string attribute 'equation'")
    names = list(node.input)
    if not all(names):
        raise ModelFileError(f"inputs {names!r:.80}: an empty input name (Einsum has no "
                             f"optional inputs)")
    terms, out = _parse(imp, equation, [imp.type_of(n).shape for n in names])
    sizes = _sizes(imp, equation, names, terms)
    plan = _Plan(imp, node, equation, sizes)
    operands = [_diagonal(imp, imp.tensor(n), t, sizes, equation, f"_{'ab'[k]}")
                for k, (n, t) in enumerate(zip(names, terms))]
    if len(terms) == 1:
        [(x, labels)] = operands
        gone = [i for i, c in enumerate(labels) if c not in out]
        if gone:
            plan.then("sum", {"axes": gone, "keepdim": False})
            labels = "".join(c for c in labels if c in out)
        if labels != out:
            plan.then("transpose", {"perm": [labels.index(c) for c in out]})
        plan.finish(x)
        return
    (a, ta), (b, tb) = operands
    a, la = _sum_away(imp, a, ta, set(tb) | set(out), "_a")
    b, lb = _sum_away(imp, b, tb, set(la) | set(out), "_b")
    batch = "".join(c for c in out if c in la and c in lb)
    free_a = "".join(c for c in out if c in la and c not in lb)
    free_b = "".join(c for c in out if c in lb and c not in la)
    contracted = "".join(c for c in la if c in lb and c not in out)
    bdims = [sizes[c] for c in batch]
    if not contracted:  # an outer product over the batch labels: broadcasting mul
        a = plan.arrange(a, la, batch + free_a,
                         [*bdims, *(sizes[c] for c in free_a), *[1] * len(free_b)], "_a")
        b = plan.arrange(b, lb, batch + free_b,
                         [*bdims, *[1] * len(free_a), *(sizes[c] for c in free_b)]
                         if batch else None, "_b")
        plan.then("mul", {}, [b])
    else:
        k, n = plan.merged(contracted), plan.merged(free_b)
        if not batch and free_a:  # a's free labels lead, matmul broadcasting b over them
            a = plan.arrange(a, la, free_a + contracted,
                             [*(sizes[c] for c in free_a), k], "_a")
            b = plan.arrange(b, lb, contracted + free_b, [k, n], "_b")
            merged = len(free_b) != 1
        else:
            m = plan.merged(free_a)
            a = plan.arrange(a, la, batch + free_a + contracted, [*bdims, m, k], "_a")
            b = plan.arrange(b, lb, batch + contracted + free_b, [*bdims, k, n], "_b")
            merged = len(free_a) != 1 or len(free_b) != 1
        plan.then("matmul", {}, [b])
        if merged:
            plan.then("reshape", plan.reshape([*bdims, *(sizes[c] for c in free_a + free_b)]))
    labels = batch + free_a + free_b
    if labels != out:
        plan.then("transpose", {"perm": [labels.index(c) for c in out]})
    plan.finish(a)
