"""The layouts of the tensor ABI: what each axis of a tensor means.

A layout is a name such as ``"NCHW"``; each letter names one axis:

====  =============================
N     batch
C     channels
L     length (1-D signal)
T     time (sequence step)
D     depth
H     height
W     width
====  =============================

``"SCALAR"`` is a rank-0 tensor, and ``"ANY"`` is opaque: any rank, no meaning claimed (state
vectors, indices, flattened features). Layout names are compared exactly; there is no implicit
conversion between, say, NCHW and NHWC.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from abi.errors import SpecError

__all__ = ["Layout", "LAYOUTS", "get_layout", "check_layout", "rank", "channel_axis",
           "axis_names", "check_rank"]

_AXIS_NAMES = {"N": "batch", "C": "channels", "L": "length", "T": "time", "D": "depth",
               "H": "height", "W": "width"}


class Layout(NamedTuple):
    """One layout: its name, its rank (None for ANY), what each axis means, its channel axis."""

    name: str
    rank: int | None
    axes: tuple[str, ...] | None
    channel_axis: int | None


def _lettered(name: str) -> Layout:
    axes = tuple(_AXIS_NAMES[c] for c in name)
    return Layout(name, len(name), axes, name.index("C") if "C" in name else None)


_LAYOUTS: dict[str, Layout] = {
    name: _lettered(name)
    for name in ("N", "NC", "NCL", "NLC", "NTC", "NCHW", "NHWC", "NCDHW", "NDHWC")
}
_LAYOUTS["SCALAR"] = Layout("SCALAR", 0, (), None)
_LAYOUTS["ANY"] = Layout("ANY", None, None, None)

#: Every layout name of the ABI.
LAYOUTS: tuple[str, ...] = tuple(_LAYOUTS)


def get_layout(name: Any, where: str | None = None) -> Layout:
    """The :class:`Layout` called ``name``; SpecError (prefixed by ``where``) if unknown."""
    layout = _LAYOUTS.get(name) if type(name) is str else None
    if layout is None:
        prefix = f"{where}: " if where else ""
        raise SpecError(f"{prefix}unknown layout {name!r}; valid layouts: {', '.join(LAYOUTS)}",
                        where=where, expected=LAYOUTS, got=name)
    return layout


def check_layout(name: Any, where: str | None = None) -> str:
    """Return ``name`` if it is a layout name, else raise SpecError."""
    return get_layout(name, where).name


def rank(layout: str) -> int | None:
    """The rank a layout implies; None for ``"ANY"``."""
    return get_layout(layout).rank


def channel_axis(layout: str) -> int | None:
    """The index of the channel (``C``) axis; None for N, SCALAR and ANY."""
    return get_layout(layout).channel_axis


def axis_names(layout: str) -> tuple[str, ...] | None:
    """What each axis means (``("batch", "channels", "height", "width")``); None for ANY."""
    return get_layout(layout).axes


def check_rank(layout: str, ndim: int, where: str | None = None) -> None:
    """Raise SpecError unless a tensor of rank ``ndim`` can have ``layout``."""
    expected = get_layout(layout, where).rank
    if expected is not None and expected != ndim:
        prefix = f"{where}: " if where else ""
        raise SpecError(f"{prefix}layout {layout} has rank {expected}, but the shape has rank "
                        f"{ndim}", where=where, expected=expected, got=ndim)
