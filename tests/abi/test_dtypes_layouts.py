"""abi.dtypes and abi.layouts: the names of the ABI and their refusals."""

import numpy as np
import pytest

from abi import dtypes, layouts
from abi.errors import DTypeError, SpecError


@pytest.mark.parametrize("name", dtypes.DTYPES)
def test_dtype_round_trip(name):
    dt = dtypes.to_numpy(name)
    assert isinstance(dt, np.dtype) and dt == np.dtype(name)
    assert dtypes.from_numpy(dt) == name
    assert dtypes.from_numpy(np.zeros(1, dtype=dt).dtype) == name


def test_dtype_names_are_exactly_the_abi_list():
    assert dtypes.DTYPES == ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                             "uint32", "uint64", "float16", "float32", "float64")


def test_from_numpy_accepts_scalar_types():
    assert dtypes.from_numpy(np.float32) == "float32"
    assert dtypes.from_numpy("int64") == "int64"


@pytest.mark.parametrize("bad", [np.complex64, np.dtype(">f4"), np.dtype("U3"), object,
                                 "datetime64[s]", np.dtype([("a", "f4")])])
def test_from_numpy_refuses_dtypes_outside_the_abi(bad):
    with pytest.raises(DTypeError, match="not part of the tensor ABI") as info:
        dtypes.from_numpy(bad)
    assert "float32" in str(info.value)  # lists the valid ones


def test_from_numpy_refuses_garbage():
    with pytest.raises(DTypeError):
        dtypes.from_numpy(3.5)


@pytest.mark.parametrize("bad", ["float", "f4", "Float32", "", None, 3, np.float32])
def test_unknown_dtype_names_are_refused_with_the_valid_list(bad):
    with pytest.raises(DTypeError) as info:
        dtypes.to_numpy(bad)
    message = str(info.value)
    assert repr(bad) in message and "float32" in message and "uint64" in message
    assert isinstance(info.value, TypeError)


def test_int_and_float_predicates():
    assert [n for n in dtypes.DTYPES if dtypes.is_int(n)] == [
        "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
    assert [n for n in dtypes.DTYPES if dtypes.is_float(n)] == ["float16", "float32", "float64"]
    assert not dtypes.is_int("bool") and not dtypes.is_float("bool")
    with pytest.raises(DTypeError):
        dtypes.is_int("int128")


@pytest.mark.parametrize("name, rank, channel", [
    ("N", 1, None), ("NC", 2, 1), ("NCL", 3, 1), ("NLC", 3, 2), ("NTC", 3, 2),
    ("NCHW", 4, 1), ("NHWC", 4, 3), ("NCDHW", 5, 1), ("NDHWC", 5, 4), ("SCALAR", 0, None),
    ("ANY", None, None),
])
def test_layout_rank_and_channel_axis(name, rank, channel):
    assert layouts.rank(name) == rank
    assert layouts.channel_axis(name) == channel
    assert name in layouts.LAYOUTS


def test_layout_axis_meanings():
    assert layouts.axis_names("NTC") == ("batch", "time", "channels")
    assert layouts.axis_names("NHWC") == ("batch", "height", "width", "channels")
    assert layouts.axis_names("SCALAR") == ()
    assert layouts.axis_names("ANY") is None


@pytest.mark.parametrize("bad", ["nchw", "NWHC", "", None, 4])
def test_unknown_layouts_are_refused_with_the_valid_list(bad):
    with pytest.raises(SpecError) as info:
        layouts.rank(bad)
    assert repr(bad) in str(info.value) and "NCHW" in str(info.value)


def test_check_rank():
    layouts.check_rank("NCHW", 4)
    layouts.check_rank("ANY", 7)
    with pytest.raises(SpecError, match="layout NCHW has rank 4, but the shape has rank 3"):
        layouts.check_rank("NCHW", 3, where="img")
