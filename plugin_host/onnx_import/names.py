"""How the ONNX model's names become the artifact's: tensor and node names, and the names of
the graph inputs' run-time dims, which ``--dim``, ``--golden-dim`` and the ABI all use."""

from __future__ import annotations

import re

__all__ = ["DIM_NAME", "dim_name", "is_run_time", "sanitized", "unnamed_dim", "unused"]

_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.:/-]")

#: A ``dim_param`` the ABI takes as the dim's name as it is.
DIM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def sanitized(onnx_name: str) -> str:
    """``onnx_name`` as an artifact tensor or node name: characters outside
    ``A-Za-z0-9_.:/-`` become ``_``, a leading ``/`` goes, and a name that does not start with
    a letter or ``_`` gets a leading ``_`` (an ``nn.Sequential`` key ``0.weight`` becomes
    ``_0.weight``)."""
    base = _BAD_CHARS.sub("_", onnx_name).lstrip("/")[:200] or "t"
    if not (base[0].isalpha() or base[0] == "_"):
        base = "_" + base
    return base


def unused(name: str, taken: set[str], sep: str = "", first: int = 2) -> str:
    """The first of ``name``, ``name<sep><first>``, ``name<sep><first + 1>``, ... not in
    ``taken``, added to it (the stem of the names made for a copy, a fresh node name)."""
    out, k = name, first
    while out in taken:
        out = f"{name}{sep}{k}"
        k += 1
    taken.add(out)
    return out


def is_run_time(dim) -> bool:
    """Whether ``dim`` (an ONNX shape dimension) is known only at run time: it has no size, or
    a negative one, which some converters (paddle2onnx) write for "any"."""
    return not dim.HasField("dim_value") or dim.dim_value < 0


def dim_name(tensor: str, axis: int, dim) -> str:
    """The ABI's name of run-time ``dim`` on ``axis`` of graph input or output ``tensor`` (its
    artifact name): its ``dim_param`` where that is a name (``batch``), else
    ``<tensor>_d<axis>`` (no name, ``?``, ``p2o.DynamicDimension.0``, a negative size)."""
    if not dim.HasField("dim_value") and DIM_NAME.fullmatch(dim.dim_param):
        return dim.dim_param
    return unnamed_dim(tensor, axis)


def unnamed_dim(tensor: str, axis: int) -> str:
    """``<tensor>_d<axis>``: the name of a dim of graph input or output ``tensor`` that has no
    name of its own to use."""
    return re.sub(r"\W", "_", tensor) + f"_d{axis}"
