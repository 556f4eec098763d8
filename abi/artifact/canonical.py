"""Canonical msgpack: one byte string per value, and a decoder for hostile bytes.

The manifest and the signature block of an artifact are canonical msgpack, so that the bytes a
signature covers have exactly one meaning and one spelling:

- types: nil, bool, int (-2**63 .. 2**64-1), float (64-bit, finite), str (UTF-8), bin, array,
  map; no ext types, no 32-bit floats;
- every map key is a str; keys are sorted by their UTF-8 bytes and unique;
- every header is the shortest encoding msgpack allows (what ``msgpack.packb`` writes).

:func:`decode` checks the bytes before it allocates anything for them: every declared length is
compared with the bytes left and with the limits, nesting depth and the total number of items
are capped, and the value is re-encoded at the end, which must give the identical bytes (so a
non-minimal header or any other second spelling is refused). Every refusal is an
:class:`~abi.errors.ArtifactFormatError`; no other exception escapes for any input.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from abi.errors import ArtifactFormatError

__all__ = ["DecodeLimits", "DEFAULT_DECODE_LIMITS", "encode", "decode"]

_INT_MIN, _UINT_MAX = -(2**63), 2**64 - 1


@dataclass(frozen=True)
class DecodeLimits:
    """Caps applied while decoding, before anything is allocated for a declared length.

    ``max_bytes``: the whole input; ``max_depth``: nesting of arrays and maps (the top level is
    depth 1); ``max_length``: entries of one array or map, bytes of one str or bin;
    ``max_items``: every value in the document, counted.
    """

    max_bytes: int = 16 * 2**20
    max_depth: int = 32
    max_length: int = 2**20
    max_items: int = 2**21


DEFAULT_DECODE_LIMITS = DecodeLimits()


# --- encoding ----------------------------------------------------------------------------------


def encode(value: Any, *, where: str = "value") -> bytes:
    """The canonical msgpack bytes of ``value``.

    Accepts None, bool, int, float (finite), str, bytes, list/tuple and dict with str keys,
    nested; dict keys are written sorted by their UTF-8 bytes. Anything else raises
    ArtifactFormatError naming the path to the offending value.
    """
    return msgpack.packb(_canonical(value, where, 0), use_bin_type=True)


def _canonical(value: Any, path: str, depth: int) -> Any:
    if depth > 64:
        raise ArtifactFormatError("nested deeper than 64 levels", where=path)
    t = type(value)
    if value is None or t is bool or t is bytes:
        return value
    if t is str:
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ArtifactFormatError("str is not valid Unicode (lone surrogate)",
                                          where=path) from None
        return value
    if t is int:
        if not _INT_MIN <= value <= _UINT_MAX:
            raise ArtifactFormatError(f"int {value} does not fit 64 bits", where=path)
        return value
    if t is float:
        if not math.isfinite(value):
            raise ArtifactFormatError(f"float {value} is not finite", where=path)
        return value
    if t is list or t is tuple:
        return [_canonical(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if t is dict:
        for key in value:
            if type(key) is not str:
                raise ArtifactFormatError(f"map key {key!r} is a {type(key).__name__}, not a "
                                          f"str", where=path)
            _canonical(key, f"{path} (a key)", depth + 1)
        # sorted() on str is code-point order, which equals the UTF-8 byte order
        return {k: _canonical(value[k], f"{path}.{k}", depth + 1) for k in sorted(value)}
    raise ArtifactFormatError(f"a {t.__name__} cannot be encoded (only nil, bool, int, float, "
                              f"str, bytes, list, dict)", where=path)


# --- decoding ----------------------------------------------------------------------------------


def decode(data: bytes, *, limits: DecodeLimits = DEFAULT_DECODE_LIMITS,
           where: str = "msgpack") -> Any:
    """Decode canonical msgpack ``data`` (hostile) into Python values.

    Maps become dicts, arrays lists, bin bytes. Raises ArtifactFormatError (prefixed by
    ``where``) for anything that is not exactly one canonical value within ``limits``.
    """
    if type(data) is not bytes:
        data = bytes(data)
    if len(data) > limits.max_bytes:
        raise ArtifactFormatError(f"{len(data)} bytes exceed the cap of {limits.max_bytes}",
                                  where=where)
    if not data:
        raise ArtifactFormatError("empty", where=where)
    reader = _Reader(data, limits, where)
    value = reader.value(1)
    if reader.pos != len(data):
        raise ArtifactFormatError(f"{len(data) - reader.pos} trailing byte(s) after the value",
                                  where=where)
    if encode(value, where=where) != data:
        raise ArtifactFormatError("not canonical (a header is not the shortest encoding)",
                                  where=where)
    return value


class _Reader:
    __slots__ = ("data", "pos", "limits", "where", "items")

    def __init__(self, data: bytes, limits: DecodeLimits, where: str) -> None:
        self.data, self.pos, self.limits, self.where, self.items = data, 0, limits, where, 0

    def fail(self, message: str) -> ArtifactFormatError:
        return ArtifactFormatError(f"{message} (at byte {self.pos})", where=self.where)

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.pos:
            raise self.fail(f"declares {n} byte(s) but only {len(self.data) - self.pos} remain")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def length(self, n: int, per_item: int, what: str) -> int:
        if n > self.limits.max_length:
            raise self.fail(f"{what} of length {n} exceeds the cap of {self.limits.max_length}")
        if n * per_item > len(self.data) - self.pos:
            raise self.fail(f"{what} declares {n} entries but only "
                            f"{len(self.data) - self.pos} byte(s) remain")
        return n

    def value(self, depth: int) -> Any:
        self.items += 1
        if self.items > self.limits.max_items:
            raise self.fail(f"more than {self.limits.max_items} values")
        data, pos = self.data, self.pos
        if pos >= len(data):
            raise self.fail("truncated: a value is missing")
        b = data[pos]
        self.pos = pos + 1
        # the frequent single-byte headers first
        if b <= 0x7F:
            return b
        if 0xA0 <= b <= 0xBF:
            return self.str(b & 0x1F)
        if b <= 0x8F:
            return self.map(b & 0x0F, depth)
        if b <= 0x9F:
            return self.array(b & 0x0F, depth)
        if b >= 0xE0:
            return b - 0x100
        if b == 0xC0:
            return None
        if b == 0xC2:
            return False
        if b == 0xC3:
            return True
        if b in (0xC4, 0xC5, 0xC6):
            n = self.unpack({0xC4: ">B", 0xC5: ">H", 0xC6: ">I"}[b])
            return self.take(self.length(n, 1, "bin"))
        if b == 0xCB:
            f = self.unpack(">d")
            if not math.isfinite(f):
                raise self.fail(f"float {f} is not finite")
            return f
        if 0xCC <= b <= 0xCF:
            return self.unpack({0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q"}[b])
        if 0xD0 <= b <= 0xD3:
            return self.unpack({0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}[b])
        if b in (0xD9, 0xDA, 0xDB):
            return self.str(self.unpack({0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}[b]))
        if b in (0xDC, 0xDD):
            return self.array(self.unpack(">H" if b == 0xDC else ">I"), depth)
        if b in (0xDE, 0xDF):
            return self.map(self.unpack(">H" if b == 0xDE else ">I"), depth)
        self.pos -= 1
        if b == 0xCA:
            raise self.fail("32-bit float (canonical floats are 64-bit)")
        if 0xC7 <= b <= 0xC9 or 0xD4 <= b <= 0xD8:
            raise self.fail("ext type (not allowed)")
        raise self.fail(f"invalid type byte 0x{b:02x}")

    def str(self, n: int) -> str:
        start = self.pos
        end = start + n
        if end > len(self.data) or n > self.limits.max_length:
            self.take(self.length(n, 1, "str"))  # raises with the reason
        self.pos = end
        try:
            return self.data[start:end].decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("str is not valid UTF-8") from None

    def array(self, n: int, depth: int) -> list:
        if depth > self.limits.max_depth:
            raise self.fail(f"nested deeper than {self.limits.max_depth} levels")
        n = self.length(n, 1, "array")
        return [self.value(depth + 1) for _ in range(n)]

    def map(self, n: int, depth: int) -> dict:
        if depth > self.limits.max_depth:
            raise self.fail(f"nested deeper than {self.limits.max_depth} levels")
        n = self.length(n, 2, "map")
        out: dict[str, Any] = {}
        previous: str | None = None
        for _ in range(n):
            start = self.pos
            key = self.value(depth + 1)
            if type(key) is not str:
                self.pos = start
                raise self.fail(f"map key is a {type(key).__name__}, not a str")
            # code-point order is UTF-8 byte order, so str comparison is the canonical order
            if previous is not None and key <= previous:
                self.pos = start
                if key == previous:
                    raise self.fail(f"duplicate map key {_short(key)}")
                raise self.fail(f"map keys not sorted ({_short(key)} after {_short(previous)})")
            previous = key
            out[key] = self.value(depth + 1)
        return out


def _short(text: str, limit: int = 40) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."
