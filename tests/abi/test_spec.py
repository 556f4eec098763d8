"""TensorSpec validation and serialization; Signature.check reporting every problem at once."""


import numpy as np
import pytest

from abi.errors import ABIError, DTypeError, SpecError
from abi.spec import Signature, TensorSpec, TensorType


# --- TensorSpec -------------------------------------------------------------------------------


def test_spec_fields_and_normalization():
    spec = TensorSpec("img", [1, "batch", np.int64(3), 4], "float32", "NCHW")
    assert spec.shape == (1, "batch", 3, 4) and type(spec.shape[2]) is int
    assert spec.ndim == 4 and spec.symbols == ("batch",)
    assert spec.tensor_type == TensorType((1, "batch", 3, 4), "float32")
    assert str(spec) == "img: float32 (1, batch, 3, 4) NCHW"
    with pytest.raises(AttributeError):
        spec.name = "other"  # frozen


def test_any_layout_takes_any_rank_and_scalar_takes_rank_zero():
    TensorSpec("state", (1, 2, 3, 4, 5, 6), "float32", "ANY")
    TensorSpec("t", (), "int64", "SCALAR")


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(name="", shape=(1,), dtype="float32", layout="N"), SpecError, "TensorSpec name"),
    (dict(name=3, shape=(1,), dtype="float32", layout="N"), SpecError, "must be a str"),
    (dict(name="a\nb", shape=(1,), dtype="float32", layout="N"), SpecError, "printable"),
    (dict(name="x", shape=(1, 2, 3), dtype="float32", layout="NCHW"), SpecError,
     "layout NCHW has rank 4, but the shape has rank 3"),
    (dict(name="x", shape=(-1,), dtype="float32", layout="N"), SpecError, "dim 0 is -1"),
    (dict(name="x", shape=(1.0,), dtype="float32", layout="N"), SpecError, "dim 0 is 1.0"),
    (dict(name="x", shape=(True,), dtype="float32", layout="N"), SpecError, "dim 0 is True"),
    (dict(name="x", shape=("2batch",), dtype="float32", layout="N"), SpecError,
     "symbolic dim must be an ASCII identifier"),
    (dict(name="x", shape=("",), dtype="float32", layout="N"), SpecError, "identifier"),
    (dict(name="x", shape=(2**63,), dtype="float32", layout="N"), SpecError, "2**63 - 1"),
    (dict(name="x", shape=(1,) * 65, dtype="float32", layout="ANY"), SpecError, "rank 65"),
    (dict(name="x", shape=5, dtype="float32", layout="N"), SpecError, "shape must be a tuple"),
    (dict(name="x", shape=(1,), dtype="float", layout="N"), DTypeError, "unknown dtype 'float'"),
    (dict(name="x", shape=(1,), dtype="float32", layout="nchw"), SpecError,
     "unknown layout 'nchw'"),
])
def test_spec_refusals(kwargs, error, text):
    with pytest.raises(error) as info:
        TensorSpec(**kwargs)
    assert text in str(info.value)


def test_spec_errors_name_the_tensor():
    with pytest.raises(DTypeError, match="TensorSpec 'img'"):
        TensorSpec("img", (1,), "f32", "N")


SPECS = [
    TensorSpec("img", (1, 12, 128, 256), "float32", "NCHW"),
    TensorSpec("desire", ("batch",), "int64", "N"),
    TensorSpec("h", ("batch", 512), "float16", "NC"),
    TensorSpec("t", (), "bool", "SCALAR"),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_to_dict_round_trip(spec):
    data = spec.to_dict()
    assert data == {"name": spec.name, "shape": list(spec.shape), "dtype": spec.dtype,
                    "layout": spec.layout}
    assert TensorSpec.from_dict(data) == spec
    msgpack = pytest.importorskip("msgpack")
    assert TensorSpec.from_dict(msgpack.unpackb(msgpack.packb(data))) == spec


GOOD = {"name": "x", "shape": [1, "n"], "dtype": "float32", "layout": "NC"}


@pytest.mark.parametrize("hostile, error, text", [
    ([1, 2], SpecError, "expected a mapping, got list"),
    ({**GOOD, "extra": 1}, SpecError, "unknown key(s) 'extra'"),
    ({k: v for k, v in GOOD.items() if k != "dtype"}, SpecError, "missing key(s) 'dtype'"),
    ({**GOOD, 7: 1}, SpecError, "unknown key(s) 7"),
    ({**GOOD, "name": b"x"}, SpecError, "'name' must be a str, got bytes"),
    ({**GOOD, "dtype": 1}, SpecError, "'dtype' must be a str, got int"),
    ({**GOOD, "layout": None}, SpecError, "'layout' must be a str, got NoneType"),
    ({**GOOD, "shape": "1,2"}, SpecError, "'shape' must be a list, got str"),
    ({**GOOD, "shape": {"a": 1}}, SpecError, "'shape' must be a list, got dict"),
    ({**GOOD, "shape": [1, 2.0]}, SpecError, "shape[1] must be an int or a str, got float"),
    ({**GOOD, "shape": [1, True]}, SpecError, "shape[1] must be an int or a str, got bool"),
    ({**GOOD, "shape": [1, None]}, SpecError, "got NoneType"),
    ({**GOOD, "shape": [1, -3]}, SpecError, "dim 1 is -3"),
    ({**GOOD, "shape": [1, "a b"]}, SpecError, "identifier"),
    ({**GOOD, "shape": [1, 2, 3]}, SpecError, "layout NC has rank 2"),
    ({**GOOD, "dtype": "complex64"}, DTypeError, "unknown dtype 'complex64'"),
    ({**GOOD, "layout": "CN"}, SpecError, "unknown layout 'CN'"),
    ({**GOOD, "name": "x" * 300}, SpecError, "1 to 256"),
])
def test_from_dict_refuses_hostile_dicts(hostile, error, text):
    with pytest.raises(error) as info:
        TensorSpec.from_dict(hostile)
    assert text in str(info.value)


# --- Signature --------------------------------------------------------------------------------

INPUTS = Signature([
    TensorSpec("img", ("batch", 12, 128, 256), "float32", "NCHW"),
    TensorSpec("desire", ("batch",), "int64", "N"),
    TensorSpec("h", ("batch", 512), "float32", "NC"),
    TensorSpec("c", ("batch", 512), "float32", "NC"),
])


def good_inputs(batch=1):
    return {"img": np.zeros((batch, 12, 128, 256), np.float32),
            "desire": np.zeros(batch, np.int64),
            "h": np.zeros((batch, 512), np.float32), "c": np.zeros((batch, 512), np.float32)}


def problems_of(sig, *args, **kwargs):
    with pytest.raises(ABIError) as info:
        sig.check(*args, **kwargs)
    err = info.value
    assert str(err).startswith(f"{len(err.problems)} problem(s) with {sig.where}: ")
    return err.problems


def test_good_inputs_return_the_bindings():
    assert INPUTS.check(good_inputs()) == {"batch": 1}
    assert INPUTS.check(good_inputs(3), layouts={"img": "NCHW", "h": "NC"}) == {"batch": 3}


def test_signature_container_protocol():
    assert INPUTS.names == ("img", "desire", "h", "c") and len(INPUTS) == 4
    assert "img" in INPUTS and INPUTS["h"].shape == ("batch", 512)
    assert [s.name for s in INPUTS] == list(INPUTS.names)
    assert "img: float32 (batch, 12, 128, 256) NCHW" in repr(INPUTS)


def test_signature_refuses_duplicates_and_non_specs():
    spec = TensorSpec("x", (1,), "float32", "N")
    with pytest.raises(SpecError, match="duplicate tensor name 'x'"):
        Signature([spec, spec])
    with pytest.raises(SpecError, match="expected TensorSpec, got dict"):
        Signature([spec.to_dict()])


def test_every_problem_is_reported_in_one_error():
    arrays = good_inputs()
    arrays["img"] = np.zeros((1, 12, 64, 256), np.float64)     # dim 2 and dtype
    arrays["imgg"] = arrays.pop("h")                            # unknown + missing
    arrays["c"] = [[0.0] * 512]                                 # not an array
    arrays["desire"] = np.zeros((1, 1), np.int64)               # rank
    problems = problems_of(INPUTS, arrays, layouts={"img": "NHWC"})
    text = "\n".join(problems)
    for expected in [
        "unknown input 'imgg' (did you mean 'img'?); expected inputs: img, desire, h, c",
        "input 'img': dim 2 expected 128, got 64",
        "input 'img': dtype expected float32, got float64",
        "input 'img': layout expected NCHW, got NHWC",
        "missing input 'h' (float32 (batch, 512) NC)",
        "input 'c': expected a numpy.ndarray, got list",
        "input 'desire': rank expected 1, got 2 (expected shape (batch,), got (1, 1))",
    ]:
        assert expected in text
    assert len(problems) == 7


def test_each_wrong_dim_is_reported_by_index():
    sig = Signature([TensorSpec("x", (2, 3, 4), "float32", "ANY")])
    problems = problems_of(sig, {"x": np.zeros((5, 3, 6), np.float32)})
    assert problems == [
        "input 'x': dim 0 expected 2, got 5 (expected shape (2, 3, 4), got (5, 3, 6))",
        "input 'x': dim 2 expected 4, got 6 (expected shape (2, 3, 4), got (5, 3, 6))",
    ]


def test_symbolic_dim_bound_to_different_sizes():
    arrays = good_inputs()
    arrays["desire"] = np.zeros(2, np.int64)
    problems = problems_of(INPUTS, arrays)
    assert problems == ["symbolic dim 'batch' is 1 from 'img' dim 0 but 2 from 'desire' dim 0"]


def test_symbolic_dim_repeated_within_one_tensor():
    sig = Signature([TensorSpec("m", ("n", "n"), "float32", "ANY")])
    assert sig.check({"m": np.zeros((3, 3), np.float32)}) == {"n": 3}
    assert problems_of(sig, {"m": np.zeros((3, 4), np.float32)}) == [
        "symbolic dim 'n' is 3 from 'm' dim 0 but 4 from 'm' dim 1"]


def test_layouts():
    assert INPUTS.check(good_inputs(), layouts={"img": "NCHW"}) == {"batch": 1}
    assert problems_of(INPUTS, good_inputs(), layouts={"img": "NHWC"}) == [
        "input 'img': layout expected NCHW, got NHWC"]
    assert problems_of(INPUTS, good_inputs(), layouts={"imag": "NCHW"}) == [
        "layout declared for unknown input 'imag' (did you mean 'img'?)"]
    assert problems_of(INPUTS, good_inputs(), layouts={"img": "chw"}) == [
        "input 'img': declared layout 'chw' is not an ABI layout"]
    any_sig = Signature([TensorSpec("s", (4,), "float32", "ANY")])
    assert any_sig.check({"s": np.zeros(4, np.float32)}, layouts={"s": "NC"}) == {}


def test_outputs_are_checked_against_the_input_bindings():
    outputs = Signature([TensorSpec("plan", ("batch", 66), "float32", "NC"),
                         TensorSpec("h", ("batch", 512), "float32", "NC")], where="outputs")
    bindings = INPUTS.check(good_inputs(2))
    good = {"plan": np.zeros((2, 66), np.float32), "h": np.zeros((2, 512), np.float32)}
    assert outputs.check(good, bindings=bindings) == {"batch": 2}
    bad = {"plan": np.zeros((1, 66), np.float32), "h": np.zeros((1, 512), np.float32)}
    assert outputs.check(bad) == {"batch": 1}  # consistent on its own
    problems = problems_of(outputs, bad, bindings=bindings)
    assert problems == [
        "symbolic dim 'batch' is 2 from the given bindings but 1 from 'plan' dim 0",
        "symbolic dim 'batch' is 2 from the given bindings but 1 from 'h' dim 0",
    ]
    assert all(p.startswith("symbolic") for p in problems)
    with pytest.raises(ABIError, match="problem\\(s\\) with outputs: output 'plan': dim 1"):
        outputs.check({**good, "plan": np.zeros((2, 65), np.float32)}, bindings=bindings)


def test_non_mapping_and_non_str_keys():
    with pytest.raises(ABIError, match="expected a mapping of input name to numpy.ndarray"):
        INPUTS.check([np.zeros(1)])
    problems = problems_of(INPUTS, {**good_inputs(), 3: np.zeros(1)})
    assert problems[0].startswith("unknown input 3;")


def test_ndarray_subclasses_and_foreign_dtypes(tmp_path):
    sig = Signature([TensorSpec("x", (2,), "float32", "N")])
    mapped = np.memmap(tmp_path / "x.bin", dtype=np.float32, mode="w+", shape=(2,))
    assert sig.check({"x": mapped}) == {}  # zero-copy views of an artifact are memmaps
    assert problems_of(sig, {"x": np.zeros(2, ">f4")}) == [
        "input 'x': dtype expected float32, got >f4"]
    assert problems_of(sig, {"x": np.zeros(2, np.complex64)}) == [
        "input 'x': dtype expected float32, got complex64"]


def test_error_is_a_value_error_with_context():
    arrays = good_inputs()
    del arrays["c"]
    with pytest.raises(ValueError) as info:
        INPUTS.check(arrays)
    assert info.value.where == "inputs" and info.value.problems == [
        "missing input 'c' (float32 (batch, 512) NC)"]

