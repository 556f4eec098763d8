"""com.microsoft's QLinearSoftmax imported with onnxruntime's numbers: hand-made nodes over
random scales, zero points, shapes, axes, both 8-bit dtypes and both of the kernel's opset
modes, compared bit for bit on the numpy and onnxruntime backends; the cases where a plainer
reading of the kernel differs (float32 division, the correctly rounded logarithm, int8 output
wrapping rather than saturating) found and checked; and what is refused, naming the node.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from abi import mlas
from plugin_host.errors import ModelFileError

from .conftest import assert_refused, onnxruntime_outputs
from .test_qoperator import _codes, _exact, _model, _param, _vi, helper

RNG = np.random.default_rng(61)
_F32 = np.float32


def _softmax_model(path, dtype, shape, x_scale, y_scale, y_zp, *, x_zp=0, x_shape=None,
                   **attrs):
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], name="n",
                            domain="com.microsoft", **attrs)
    return _model(path, [node], [_vi("x", dtype, x_shape or shape)], [_vi("y", dtype, shape)],
                  [_param("xs", x_scale), _param("xz", np.array(x_zp, dtype)),
                   _param("ys", y_scale), _param("yz", np.array(y_zp, dtype))])


def _plain(x, dtype, x_scale, y_scale, y_zp, *, logarithm=None, divide="double"):
    """A numpy reading of the kernel over the last axis of 2-D codes ``x``: ``logarithm`` the
    one the table starts from (None: the C library's logf), ``divide`` the last step in
    ``double`` or in ``float32``; int8 saturated."""
    count = x.shape[1]
    if logarithm is None:
        exps = mlas.softmax_table(float(x_scale), count)
    else:
        top = _F32(np.finfo(_F32).max) / _F32(count)
        shift = max(0.0, logarithm(top) - 5.0) / float(_F32(x_scale))
        exps = np.array([math.exp((i - 255.0 + shift) * float(_F32(x_scale)))
                         for i in range(256)], _F32)
    codes = x.astype(np.int64)
    e = exps[255 - (codes.max(1, keepdims=True) - codes)]
    total = np.cumsum(e, axis=1, dtype=_F32)[:, -1:]
    ratio = _F32(math.floor(float(_F32(1) / _F32(y_scale))))
    if divide == "double":
        v = e.astype(np.float64) * float(ratio) / total.astype(np.float64)
    else:
        v = (e / total).astype(_F32) * ratio
    info = np.iinfo(dtype)
    return np.clip(np.round(v).astype(np.int64) + int(y_zp), info.min, info.max).astype(dtype)


def _where_the_reading_differs(tmp_path, draws, reading: dict, what: str) -> None:
    """Over ``draws`` of (x_scale, y_scale, uint8 codes), the first where the plainer
    ``reading`` of :func:`_plain` gives other outputs than the kernel's: onnxruntime differs
    from it there too, and the import gives onnxruntime's outputs (searched in numpy first,
    as onnxruntime's runs cost more)."""
    for x_scale, y_scale, x in draws:
        plainer = _plain(x, "uint8", x_scale, y_scale, 0, **reading)
        if not np.array_equal(plainer, _plain(x, "uint8", x_scale, y_scale, 0)):
            got, path = _one_row(tmp_path, "uint8", x, x_scale, y_scale, 0)
            assert not np.array_equal(plainer, got)
            _exact(path, [{"x": x}])
            return
    pytest.fail(f"no case found where {what} differs from onnxruntime")


def _one_row(tmp_path, dtype, x, x_scale, y_scale, y_zp):
    """onnxruntime's output for the codes ``x`` (2-D, softmax over the last axis) and the
    model's path."""
    path = _softmax_model(tmp_path / "m.onnx", dtype, x.shape, x_scale, y_scale, y_zp,
                          axis=-1, opset=13)
    return onnxruntime_outputs(path, {"x": x}, optimized=False)["y"], path


# --- matches onnxruntime -------------------------------------------------------------------

#: (shape, axis, opset): the last axis, an inner one, opset < 13's flattened trailing dims,
#: one value per softmax, a wide softmax, a run-time batch
_CASES = [((3, 10), -1, 13), ((2, 5, 4), 1, 13), ((2, 3, 4), 1, 12), ((2, 3, 4), 0, 11),
          ((4, 1), -1, 13), ((1, 7), 1, 11), ((2, 1000), -1, 13), ((5,), 0, 13),
          ((2, 3, 4), 2, 12), (("N", 6), -1, 13)]


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("shape, axis, opset", _CASES, ids=str)
def test_softmax_matches_onnxruntime_bit_for_bit(shape, axis, opset, dtype, tmp_path):
    info = np.iinfo(dtype)
    for trial in range(3):
        x_scale = _F32(10.0 ** RNG.uniform(-3, 0.5))
        # the quantizer's 1/256 (zero point 0 or -128), 1/255, and a small random scale
        y_scale, y_zp = [(_F32(1 / 256), 0 if dtype == "uint8" else -128),
                         (_F32(1 / 255), int(RNG.integers(info.min, 0, endpoint=True))),
                         (_F32(10.0 ** RNG.uniform(-5, -1)), info.min)][trial]
        x_zp = int(RNG.integers(info.min, info.max, endpoint=True))
        path = _softmax_model(tmp_path / "m.onnx", dtype, shape, x_scale, y_scale, y_zp,
                              x_zp=x_zp, axis=axis, opset=opset)
        feeds = []
        for n in (1, 3):
            concrete = tuple(n if d == "N" else d for d in shape)
            feeds += [{"x": _codes(dtype, concrete)},
                      {"x": (_codes(dtype, concrete) // 16).astype(dtype)}]
        _exact(path, feeds)


def test_one_value_per_softmax_takes_the_whole_ratio(tmp_path):
    """One value: e / sum is 1 and the output ``floor(1 / y_scale) + y_zp``, saturated, though
    e * floor(1 / y_scale) passes float32's range (onnxruntime divides in double)."""
    x = _codes("uint8", (6, 1))
    got, path = _one_row(tmp_path, "uint8", x, 0.05, 1 / 200, 3)
    assert (got == 203).all()
    _exact(path, [{"x": x}])


def test_int8_output_saturates_at_127(tmp_path):
    """The quantizer's int8 output (scale 1/256, zero point -128): a value whose probability
    rounds to 1 gives 128 - 128 = 0 ... 256 - 128 = 128, which onnxruntime saturates to 127."""
    x = np.array([[127, -128, -128, -128], [0, 0, 0, 0]], np.int8)
    got, path = _one_row(tmp_path, "int8", x, 0.5, 1 / 256, -128)
    assert got[0, 0] == 127 and got[1, 0] == -128 + 64
    _exact(path, [{"x": x}])


def test_a_half_rounds_to_even(tmp_path):
    """Two equal codes share the softmax: each gets exactly half of floor(1 / y_scale) = 201,
    100.5, which onnxruntime rounds to 100 (four equal codes of 202: 50.5 to 50)."""
    for ratio, width, expected in ((201, 2, 100), (202, 4, 50)):
        y_scale = _F32(1 / (ratio + 0.5))
        assert math.floor(float(_F32(1) / y_scale)) == ratio
        x = np.full((3, width), 17, np.uint8)
        x[1] = 250
        got, path = _one_row(tmp_path, "uint8", x, 0.1, y_scale, 0)
        assert (got == expected).all()
        _exact(path, [{"x": x}])


def test_the_last_step_divides_in_double_not_float32(tmp_path):
    """Random scales and many rows until the float32 division rounds some output to another
    code than the double one; onnxruntime gives the double one's, and so does the import."""
    rng = np.random.default_rng(11)
    draws = ((_F32(10.0 ** rng.uniform(-3, -1)), _F32(10.0 ** rng.uniform(-4, -3)),
              (rng.integers(0, 255, size=(400, 41), endpoint=True) // 8).astype(np.uint8))
             for _ in range(400))
    _where_the_reading_differs(tmp_path, draws, {"divide": "float32"}, "float32 division")


@pytest.mark.skipif(mlas.c_logf() is None, reason="no C math library to load")
def test_the_table_starts_from_the_c_librarys_logf(tmp_path):
    """60,594 values per softmax: glibc's logf of FLT_MAX / 60594 is one float32 step off the
    correctly rounded logarithm, which moves every entry of the table (by a common factor, so
    an output moves only where it lies near a half: searched for with a fine output scale);
    onnxruntime's outputs follow logf."""
    count = 60594
    top = _F32(np.finfo(_F32).max) / _F32(count)
    assert mlas.logf(top) != float(_F32(math.log(float(top))))
    rng = np.random.default_rng(7)
    draws = ((_F32(10.0 ** rng.uniform(-3, -1)), _F32(2.0 ** -18),
              rng.integers(0, 255, size=(1, count), endpoint=True).astype(np.uint8))
             for _ in range(1000))
    _where_the_reading_differs(tmp_path, draws,
                               {"logarithm": lambda v: float(_F32(math.log(float(v))))},
                               "the correctly rounded logarithm")


def test_without_a_c_library_the_table_is_the_rounded_logarithms(monkeypatch):
    """The fallback: the same table as glibc's logf gives below 60,594 values."""
    with_c = [mlas.softmax_table(0.01, count) for count in (1, 10, 1000, 60000)]
    mlas.softmax_table.cache_clear()
    monkeypatch.setattr(mlas, "c_logf", lambda: None)
    try:
        for count, expected in zip((1, 10, 1000, 60000), with_c):
            np.testing.assert_array_equal(mlas.softmax_table(0.01, count), expected)
    finally:
        mlas.softmax_table.cache_clear()


# --- refused ---------------------------------------------------------------------------------


def test_a_missing_opset_attribute_is_refused(tmp_path):
    path = _softmax_model(tmp_path / "m.onnx", "uint8", (2, 4), 0.1, 1 / 256, 0, axis=-1)
    assert_refused(path, ModelFileError, "node 'n' (QLinearSoftmax)",
                   "attribute opset missing: onnxruntime's kernel needs the opset")


def test_an_axis_outside_the_input_is_refused(tmp_path):
    path = _softmax_model(tmp_path / "m.onnx", "uint8", (4,), 0.1, 1 / 256, 0, opset=12)
    assert_refused(path, ModelFileError, "node 'n' (QLinearSoftmax)",
                   "attribute axis=1 is outside X's 1 dims")


#: (shape, axis, opset, fed shapes): a run-time softmax length (attention's scores), a
#: run-time dim among opset < 13's flattened ones, a run-time dim before the softmax's
_RUN_TIME = [(("N", 4, "K"), -1, 13, [(1, 4, 1), (2, 4, 7), (1, 4, 300), (1, 4, 1024)]),
             ((2, "K", 3), 1, 12, [(2, 1, 3), (2, 5, 3), (2, 341, 3)]),
             (("K", 6), 1, 13, [(1, 6), (9, 6)])]


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("shape, axis, opset, fed", _RUN_TIME, ids=lambda v: str(v)[:24])
def test_a_softmax_over_run_time_dims_matches_onnxruntime_bit_for_bit(shape, axis, opset,
                                                                     fed, dtype, tmp_path):
    """The count of values per softmax read when the call runs, its table looked up in the
    row of that count: bit for bit from 1 value to the last row's 1,024."""
    info = np.iinfo(dtype)
    for y_scale, y_zp in ((_F32(1 / 256), 0 if dtype == "uint8" else -128),
                          (_F32(10.0 ** RNG.uniform(-5, -1)), info.min)):
        path = _softmax_model(tmp_path / "m.onnx", dtype, shape, _F32(10.0 ** RNG.uniform(-3, 0)),
                              y_scale, y_zp, axis=axis, opset=opset)
        _exact(path, [{"x": _codes(dtype, f)} for f in fed]
               + [{"x": (_codes(dtype, fed[-1]) // 16).astype(dtype)}])


def test_a_run_time_softmax_takes_the_table_of_its_own_count(tmp_path):
    """The row of the count the call gives, not a neighbour's: the tables of 300 and 301
    values differ by a common factor, so an output moves only near a half (searched for with
    a fine output scale); onnxruntime's and the import's follow the count's own."""
    count = 300
    top = _F32(np.finfo(_F32).max)
    neighbour = {"logarithm": lambda v: mlas.logf(top / _F32(count + 1))}
    rng = np.random.default_rng(8)
    for _ in range(2000):
        x_scale = _F32(10.0 ** rng.uniform(-3, -1))
        x = rng.integers(0, 255, size=(1, count), endpoint=True).astype(np.uint8)
        plainer = _plain(x, "uint8", x_scale, _F32(2.0 ** -18), 0, **neighbour)
        right = _plain(x, "uint8", x_scale, _F32(2.0 ** -18), 0)
        if not np.array_equal(plainer, right):
            path = _softmax_model(tmp_path / "m.onnx", "uint8", (1, "K"), x_scale,
                                  _F32(2.0 ** -18), 0, axis=-1, opset=13)
            np.testing.assert_array_equal(
                onnxruntime_outputs(path, {"x": x}, optimized=False)["y"], right)
            _exact(path, [{"x": x}])
            return
    pytest.fail("no case found where the neighbouring count's table differs")


def test_a_run_time_softmax_of_thousands_of_values_matches_onnxruntime(tmp_path):
    """The table is built for the count each call gives, however large."""
    path = _softmax_model(tmp_path / "m.onnx", "uint8", (2, "K"), 0.1, 1 / 256, 0, axis=-1,
                          opset=13)
    _exact(path, [{"x": _codes("uint8", (2, 1025))}, {"x": _codes("uint8", (2, 5000))}])


def test_a_fine_output_scale_matches_onnxruntime(tmp_path):
    """1 / Y_scale of a million: the product in double as onnxruntime computes it."""
    path = _softmax_model(tmp_path / "m.onnx", "uint8", (2, 4), 0.1, 1e-6, 0, axis=-1,
                          opset=13)
    _exact(path, [{"x": _codes("uint8", (2, 4))}])
