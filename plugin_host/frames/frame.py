"""Frame formats, buffer layouts and the metadata every frame carries.

A :class:`FrameLayout` says where the pixels of one frame sit in its buffer: the format, the
size, and per plane the byte offset and row stride. Every buffer of a pool has the same layout.
A :class:`Frame` is one filled buffer: the layout plus who made it (``camera``), which frame of
that camera it is (``frame_id``, monotonic per camera), when it was exposed (``timestamp_sof``
and ``timestamp_eof``, ``time.monotonic_ns()``), and where it lives (``pool_id``, ``slot``,
``generation``). Frames are plain immutable metadata; the bytes stay in shared memory and are
reached through a :class:`~plugin_host.frames.pool.Lease` (host) or a
:class:`~plugin_host.frames.pool.PoolReader` (the sandbox worker).

Formats (8 bits per sample, rows top to bottom):

======  ======  =======================================  ===============================
format  planes  plane shapes (rows, columns[, samples])   notes
======  ======  =======================================  ===============================
NV12    Y, UV   Y ``(H, W)``; UV ``(H/2, W/2, 2)``        UV interleaved U, V; W, H even
RGB     RGB     ``(H, W, 3)``                            R, G, B interleaved
GRAY    Y       ``(H, W)``
======  ======  =======================================  ===============================

By default every row stride is the row's bytes rounded up to 64 and the planes follow each
other (for NV12 the UV plane starts at ``stride_y * H``, as in openpilot's VisionBuf), but a
layout read from elsewhere may use any offsets and strides that keep every plane inside the
buffer and the planes apart; :meth:`FrameLayout.from_dict` checks exactly that.

Metadata crosses process boundaries as plain dicts (:meth:`Frame.to_dict` /
:meth:`Frame.from_dict`), which the receiver validates with the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..errors import FrameFormatError

__all__ = ["FORMATS", "MAX_DIM", "MAX_FRAME_BYTES", "Plane", "FrameLayout", "Frame",
           "plane_array"]

#: Planes of each format: (name, rows divisor, columns divisor, samples per pixel).
FORMATS: Mapping[str, tuple[tuple[str, int, int, int], ...]] = {
    "NV12": (("Y", 1, 1, 1), ("UV", 2, 2, 2)),
    "RGB": (("RGB", 1, 1, 3),),
    "GRAY": (("Y", 1, 1, 1),),
}

#: Largest width or height accepted anywhere.
MAX_DIM = 16384

#: Largest frame buffer accepted by default (64 MiB: a 4K RGB frame is 25 MB).
MAX_FRAME_BYTES = 64 * 2**20

#: Largest row stride accepted (bytes).
_MAX_STRIDE = 1 << 20


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


@dataclass(frozen=True)
class Plane:
    """One plane of a layout: ``shape`` (rows, columns[, samples]), byte ``offset`` from the
    buffer start, row ``stride`` in bytes, ``row_bytes`` used of each row."""

    name: str
    shape: tuple[int, ...]
    offset: int
    stride: int

    @property
    def row_bytes(self) -> int:
        cols = self.shape[1] * (self.shape[2] if len(self.shape) == 3 else 1)
        return cols

    @property
    def end(self) -> int:
        """One past the last byte of the plane (its last row holds only ``row_bytes``)."""
        return self.offset + self.stride * (self.shape[0] - 1) + self.row_bytes

    @property
    def strides(self) -> tuple[int, ...]:
        """numpy strides of the plane's array."""
        return (self.stride, self.shape[2], 1) if len(self.shape) == 3 else (self.stride, 1)


@dataclass(frozen=True)
class FrameLayout:
    """Where a frame's pixels are in its buffer. Build one with :meth:`create` (default
    strides and offsets) or :meth:`from_dict` (validated); both refuse a bad layout with
    :class:`~plugin_host.errors.FrameFormatError`."""

    format: str
    width: int
    height: int
    strides: tuple[int, ...]
    offsets: tuple[int, ...]
    nbytes: int

    @classmethod
    def create(cls, format: str, width: int, height: int, *, stride_align: int = 64,
               max_bytes: int = MAX_FRAME_BYTES) -> "FrameLayout":
        """The default layout: rows padded to ``stride_align`` bytes, planes back to back."""
        _check_size(format, width, height)
        if type(stride_align) is not int or not 1 <= stride_align <= 4096:
            raise FrameFormatError(f"stride_align must be an int in [1, 4096], got "
                                   f"{stride_align!r}")
        strides, offsets, offset = [], [], 0
        for _, rdiv, cdiv, samples in FORMATS[format]:
            stride = _align(width // cdiv * samples, stride_align)
            strides.append(stride)
            offsets.append(offset)
            offset += stride * (height // rdiv)
        return cls.from_dict({"format": format, "width": width, "height": height,
                              "strides": strides, "offsets": offsets, "nbytes": offset},
                             max_bytes=max_bytes)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *,
                  max_bytes: int = MAX_FRAME_BYTES) -> "FrameLayout":
        """A layout from ``{format, width, height, strides, offsets, nbytes}`` (untrusted)."""
        if not isinstance(data, Mapping):
            raise FrameFormatError(f"a frame layout is a map, got {type(data).__name__}")
        fmt = data.get("format")
        width, height = data.get("width"), data.get("height")
        _check_size(fmt, width, height)
        nplanes = len(FORMATS[fmt])
        strides, offsets = data.get("strides"), data.get("offsets")
        for key, value in (("strides", strides), ("offsets", offsets)):
            if (not isinstance(value, (list, tuple)) or len(value) != nplanes
                    or any(type(v) is not int for v in value)):
                raise FrameFormatError(f"{fmt} layout: {key} must be a list of {nplanes} "
                                       f"int(s), got {value!r}")
        nbytes = data.get("nbytes")
        if type(nbytes) is not int or not 0 < nbytes <= max_bytes:
            raise FrameFormatError(f"{fmt} layout: nbytes must be an int in [1, {max_bytes}], "
                                   f"got {nbytes!r}")
        layout = cls(fmt, width, height, tuple(strides), tuple(offsets), nbytes)
        planes = layout.planes
        for plane in planes:
            if not plane.row_bytes <= plane.stride <= _MAX_STRIDE:
                raise FrameFormatError(f"{fmt} layout: plane {plane.name} stride {plane.stride} "
                                       f"is outside [{plane.row_bytes}, {_MAX_STRIDE}]")
            if plane.offset < 0 or plane.end > nbytes:
                raise FrameFormatError(f"{fmt} layout: plane {plane.name} spans bytes "
                                       f"[{plane.offset}, {plane.end}), outside the buffer of "
                                       f"{nbytes} bytes")
        ordered = sorted(planes, key=lambda p: p.offset)
        for a, b in zip(ordered, ordered[1:]):
            if a.end > b.offset:
                raise FrameFormatError(f"{fmt} layout: planes {a.name} and {b.name} overlap")
        return layout

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "width": self.width, "height": self.height,
                "strides": list(self.strides), "offsets": list(self.offsets),
                "nbytes": self.nbytes}

    @property
    def planes(self) -> tuple[Plane, ...]:
        out = []
        for (name, rdiv, cdiv, samples), stride, offset in zip(FORMATS[self.format],
                                                               self.strides, self.offsets):
            shape = (self.height // rdiv, self.width // cdiv)
            if samples > 1:
                shape += (samples,)
            out.append(Plane(name, shape, offset, stride))
        return tuple(out)

    def plane(self, name: str) -> Plane:
        for plane in self.planes:
            if plane.name == name:
                return plane
        raise KeyError(f"{self.format} has no plane {name!r} (planes: "
                       f"{', '.join(p.name for p in self.planes)})")

    def describe(self) -> str:
        return f"{self.width}x{self.height} {self.format}"


def _check_size(fmt: Any, width: Any, height: Any) -> None:
    if fmt not in FORMATS:
        raise FrameFormatError(f"unknown frame format {fmt!r}; known: {', '.join(FORMATS)}")
    for name, value in (("width", width), ("height", height)):
        if type(value) is not int or not 1 <= value <= MAX_DIM:
            raise FrameFormatError(f"{fmt} frame {name} must be an int in [1, {MAX_DIM}], got "
                                   f"{value!r}")
    if fmt == "NV12" and (width % 2 or height % 2):
        raise FrameFormatError(f"NV12 needs an even width and height, got {width}x{height}")


def plane_array(buffer: Any, plane: Plane, base: int = 0) -> np.ndarray:
    """A zero-copy uint8 view of ``plane`` in ``buffer`` (a buffer-protocol object: mmap,
    memoryview, bytes) whose frame starts at byte ``base``. Read-only if the buffer is, and
    then for good: ``setflags(write=True)`` is refused (``np.frombuffer`` keeps the read-only
    buffer as the base, where ``np.ndarray(buffer=...)`` would unwrap a read-only memoryview)."""
    flat = np.frombuffer(buffer, dtype=np.uint8, count=plane.end - plane.offset,
                         offset=base + plane.offset)
    return np.lib.stride_tricks.as_strided(flat, plane.shape, plane.strides)


_FRAME_KEYS = ("camera", "frame_id", "timestamp_sof", "timestamp_eof", "layout", "slot",
               "generation", "pool_id")
_U64 = 2**64 - 1


@dataclass(frozen=True)
class Frame:
    """Metadata of one filled frame buffer (the bytes stay in the pool's shared memory).

    ``camera``: the camera's name; ``frame_id``: monotonic per camera (a gap means frames were
    dropped before reaching the pool); ``timestamp_sof`` / ``timestamp_eof``: start and end of
    frame (exposure), ``time.monotonic_ns()``; ``layout``: format, size, plane offsets and
    strides; ``pool_id``: the random id of the pool instance (a new id means the camera
    restarted); ``slot``: the buffer's index in the pool; ``generation``: the slot's fill count
    when this frame was written (re-checked against shared memory to detect an overwrite).
    """

    camera: str
    frame_id: int
    timestamp_sof: int
    timestamp_eof: int
    layout: FrameLayout
    slot: int
    generation: int
    pool_id: str

    # -- the layout's fields, for convenience ---------------------------------------------------

    @property
    def format(self) -> str:
        return self.layout.format

    @property
    def width(self) -> int:
        return self.layout.width

    @property
    def height(self) -> int:
        return self.layout.height

    @property
    def strides(self) -> tuple[int, ...]:
        return self.layout.strides

    @property
    def offsets(self) -> tuple[int, ...]:
        return self.layout.offsets

    @property
    def nbytes(self) -> int:
        return self.layout.nbytes

    # -- wire form --------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (msgpack-able): what travels to the sandbox worker."""
        return {"camera": self.camera, "frame_id": self.frame_id,
                "timestamp_sof": self.timestamp_sof, "timestamp_eof": self.timestamp_eof,
                "layout": self.layout.to_dict(), "slot": self.slot,
                "generation": self.generation, "pool_id": self.pool_id}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *,
                  max_bytes: int = MAX_FRAME_BYTES) -> "Frame":
        """The inverse of :meth:`to_dict`, validating every field (FrameFormatError)."""
        if not isinstance(data, Mapping) or set(data) != set(_FRAME_KEYS):
            keys = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise FrameFormatError(f"frame metadata must have exactly the keys "
                                   f"{', '.join(_FRAME_KEYS)}; got {keys}")
        if type(data["camera"]) is not str or not data["camera"]:
            raise FrameFormatError(f"frame camera must be a non-empty str, got "
                                   f"{data['camera']!r}")
        if type(data["pool_id"]) is not str or not data["pool_id"]:
            raise FrameFormatError(f"frame pool_id must be a non-empty str, got "
                                   f"{data['pool_id']!r}")
        for key in ("frame_id", "timestamp_sof", "timestamp_eof", "slot", "generation"):
            if type(data[key]) is not int or not 0 <= data[key] <= _U64:
                raise FrameFormatError(f"frame {key} must be an int in [0, 2**64), got "
                                       f"{data[key]!r}")
        if data["timestamp_eof"] < data["timestamp_sof"]:
            raise FrameFormatError(f"frame {data['frame_id']}: timestamp_eof "
                                   f"{data['timestamp_eof']} is before timestamp_sof "
                                   f"{data['timestamp_sof']}")
        layout = FrameLayout.from_dict(data["layout"], max_bytes=max_bytes)
        return cls(data["camera"], data["frame_id"], data["timestamp_sof"],
                   data["timestamp_eof"], layout, data["slot"], data["generation"],
                   data["pool_id"])

    def __str__(self) -> str:
        return (f"frame {self.frame_id} of camera {self.camera!r} ({self.layout.describe()}, "
                f"slot {self.slot}, generation {self.generation})")
