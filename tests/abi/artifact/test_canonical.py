"""Canonical msgpack: one spelling per value; hostile bytes refused before allocation."""

import struct
import tracemalloc

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abi.artifact import DecodeLimits, decode, encode
from abi.errors import ArtifactFormatError

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30)


@settings(max_examples=200, deadline=None)
@given(values)
def test_round_trip(value):
    data = encode(value)
    assert decode(data) == value
    assert encode(decode(data)) == data


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_are_refused(data):
    try:
        value = decode(data)
    except ArtifactFormatError:
        return
    assert encode(value) == data


def test_keys_are_sorted_by_utf8_bytes():
    assert encode({"b": 1, "a": 2, "é": 3, "Z": 4}) == msgpack.packb(
        {"Z": 4, "a": 2, "b": 1, "é": 3})
    assert encode((1, 2)) == encode([1, 2])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {1: 2}, {b"k": 1}, object(),
                                   2**64, -(2**63) - 1, {"a": {1.5: 0}}, "\ud800",
                                   {"\udfff": 1}])
def test_encode_refuses(value):
    with pytest.raises(ArtifactFormatError):
        encode(value)


def _refused(data: bytes, fragment: str, **limits) -> None:
    with pytest.raises(ArtifactFormatError) as info:
        decode(data, limits=DecodeLimits(**limits) if limits else DecodeLimits())
    assert fragment in str(info.value), str(info.value)


def test_refuses_duplicate_and_unsorted_keys():
    _refused(b"\x82\xa1a\x01\xa1a\x02", "duplicate map key 'a'")
    _refused(b"\x82\xa1b\x01\xa1a\x02", "not sorted")


def test_refuses_non_str_keys():
    _refused(b"\x81\x01\x02", "map key is a int")


def test_refuses_non_minimal_encodings():
    _refused(b"\xcc\x05", "not canonical")  # 5 as uint8
    _refused(b"\xd9\x01a", "not canonical")  # 'a' as str8
    _refused(b"\xdc\x00\x01\x01", "not canonical")  # [1] as array16
    _refused(b"\xd0\x05", "not canonical")  # 5 as int8


def test_refuses_float32_ext_and_reserved_bytes():
    _refused(b"\xca" + struct.pack(">f", 1.5), "32-bit float")
    _refused(b"\xc7\x01\x05x", "ext type")
    _refused(b"\xd4\x01x", "ext type")
    _refused(b"\xc1", "invalid type byte")
    _refused(b"\xcb" + struct.pack(">d", float("nan")), "not finite")


def test_refuses_truncation_and_trailing_bytes():
    _refused(b"", "empty")
    _refused(b"\x92\x01", "declares 2 entries but only 1 byte(s) remain")
    _refused(b"\x81\xa1a", "truncated")
    _refused(b"\xa5abc", "only 3 byte(s) remain")
    _refused(b"\x01\x02", "1 trailing byte")


def test_refuses_invalid_utf8():
    _refused(b"\xa2\xff\xfe", "UTF-8")


def test_caps_depth_length_items_and_size():
    deep = b"\x91" * 40 + b"\x01"
    _refused(deep, "nested deeper than 32")
    decode(b"\x91" * 31 + b"\x01")
    _refused(encode(list(range(20))), "exceeds the cap of 10", max_length=10)
    _refused(encode([[1, 2], [3, 4]]), "more than 5 values", max_items=5)
    _refused(encode("x" * 100), "exceed the cap of 50", max_bytes=50)


@pytest.mark.parametrize("header", [b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff",
                                    b"\xdb\xff\xff\xff\xff", b"\xc6\xff\xff\xff\xff",
                                    b"\xdd\x00\x0f\xff\xff"])
def test_huge_declared_lengths_allocate_nothing(header):
    tracemalloc.start()
    try:
        with pytest.raises(ArtifactFormatError):
            decode(header + b"\x00" * 16)
        # nested containers each claiming a huge length
        with pytest.raises(ArtifactFormatError):
            decode((b"\xdd\x00\x00\xff\xff") * 30 + b"\x00" * 100)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024
