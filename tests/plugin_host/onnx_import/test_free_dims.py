"""Run-time dims fixed at build (``--dim NAME=SIZE``): the ABI, golden cases and latency budget
take the size; a dim left at run time beyond the batch axis is named in the summary, and a
refusal about a shape holding one points at ``--dim``. Run-time dims drawn at other sizes for
the golden cases (``--golden-dim NAME=SIZE,...``) stay run-time in the ABI."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from plugin_host.cli import main
from plugin_host.errors import ModelImportError, UnsupportedModelError, UsageError
from plugin_host.onnx_import import build_onnx_artifact
from plugin_host.onnx_import.free_dims import MAX_FIXED_DIM, fix_dims

from .conftest import (check_against_onnxruntime, check_on_both_backends, import_and_load, onnx,
                       torch)


class _Conv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


class _Sequence(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(6, 5, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


def _export(module, shape, path, axes: dict[int, str], dynamo: bool):
    torch.manual_seed(0)
    module.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            shapes = {"x": {axis: torch.export.Dim(name) for axis, name in axes.items()}}
            program = torch.onnx.export(module, (torch.randn(*shape),), dynamo=True,
                                        verbose=False, input_names=["x"], output_names=["y"],
                                        dynamic_shapes=shapes)
            program.save(str(path))
        else:
            torch.onnx.export(module, (torch.randn(*shape),), str(path), dynamo=False,
                              input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": axes, "y": axes})
    return path


def _feeds(shape, count=2):
    rng = np.random.default_rng(3)
    return [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_fixed_spatial_dims_reach_the_abi_and_the_golden_cases(dynamo, tmp_path, signer):
    model = _export(_Conv(), (2, 3, 8, 8), tmp_path / "c.onnx",
                    {0: "batch", 2: "h", 3: "w"}, dynamo)
    notes: list[str] = []
    _, loaded = import_and_load(model, tmp_path / "free.pha", signer, report=notes.append)
    assert loaded.graph.inputs[0].shape == ("batch", 3, "h", "w")
    assert notes == ["input 'x': 'h' (axis 2, golden size 1), 'w' (axis 3, golden size 1) "
                     "known only at run time: golden cases and the latency budget take those "
                     "sizes (--golden-dim NAME=SIZE,... sets them); --dim NAME=SIZE fixes a "
                     "dim to the size the device feeds"]
    assert loaded.golden_cases()[0][0]["x"].shape == (1, 3, 1, 1)

    notes.clear()
    _, loaded = import_and_load(model, tmp_path / "fixed.pha", signer, report=notes.append,
                                dims={"h": 24, "w": 40})
    assert notes == []
    assert loaded.graph.inputs[0].shape == ("batch", 3, 24, 40)
    assert loaded.graph.outputs[0].shape == ("batch", 4, 24, 40)
    assert loaded.golden_cases()[0][0]["x"].shape == (1, 3, 24, 40)
    check_against_onnxruntime(model, loaded, _feeds((1, 3, 24, 40)))


def test_a_fixed_sequence_length_makes_an_lstm_static(tmp_path, signer):
    """Over the run-time length the LSTM is one lstm op; fixed at 7 steps, the same op over
    a static length; fixed at 1 step, it unrolls to one lstm_cell."""
    model = _export(_Sequence(), (1, 4, 6), tmp_path / "s.onnx", {1: "seq"}, dynamo=False)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert loaded.graph.inputs[0].shape == (1, "seq", 6)
    assert [n.op for n in loaded.graph.nodes].count("lstm") == 1
    for steps, op, other in ((7, "lstm", "lstm_cell"), (1, "lstm_cell", "lstm")):
        _, loaded = import_and_load(model, tmp_path / f"s{steps}.pha", signer,
                                    dims={"seq": steps})
        assert loaded.graph.inputs[0].shape == (1, steps, 6)
        ops = [n.op for n in loaded.graph.nodes]
        assert ops.count(op) == 1 and other not in ops
        check_against_onnxruntime(model, loaded, _feeds((1, steps, 6)))


def test_fixing_the_batch_dim_makes_the_abi_static(tmp_path, signer):
    model = _export(_Conv(), (2, 3, 8, 8), tmp_path / "c.onnx", {0: "batch"}, dynamo=False)
    _, loaded = import_and_load(model, tmp_path / "b.pha", signer, dims={"batch": 2})
    assert loaded.graph.inputs[0].shape == (2, 3, 8, 8)
    check_against_onnxruntime(model, loaded, _feeds((2, 3, 8, 8)))


class _TiledByBatch(torch.nn.Module):
    """Each row repeated batch times: a Tile by a run-time count of an axis that is not 1,
    which the ABI's fixed repeats cannot express (of an axis of 1 it is an expand)."""

    def forward(self, x):
        return x.repeat(1, x.shape[0])


def test_a_refusal_about_a_run_time_dim_points_at_dim(tmp_path, signer):
    model = _export(_TiledByBatch(), (3, 6), tmp_path / "t.onnx", {0: "batch"}, dynamo=False)
    with pytest.raises(UnsupportedModelError) as info:
        build_onnx_artifact(model, tmp_path / "no.pha")
    text = str(info.value)
    assert info.value.op == "Tile" and text.startswith(f"node {info.value.node!r} (Tile): ")
    assert "repeats [1, 'batch']: the run-time repeat 'batch' of axis 1 needs that axis of " \
        "size 1 (shape ['batch', 6])" in text
    assert text.endswith("; 'batch' is a run-time dim of the inputs: --dim batch=SIZE (dims= in "
                         "the Python API) fixes it to the size the device feeds, and what is "
                         "computed from it becomes constant"), text
    _, loaded = import_and_load(model, tmp_path / "b.pha", signer, dims={"batch": 3})
    check_against_onnxruntime(model, loaded, _feeds((3, 6)))


def test_a_refusal_about_a_dim_computed_from_a_run_time_one_points_at_it(tmp_path, signer):
    """The refused shape holds 't-2' (a conv without padding), not 't' itself."""
    helper, tp = onnx.helper, onnx.TensorProto
    w = onnx.numpy_helper.from_array(np.ones((3, 2, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
         helper.make_node("MaxPool", ["c"], ["y"], name="pool", auto_pad="SAME_LOWER",
                          kernel_shape=[4], strides=[2])], "g",
        [helper.make_tensor_value_info("x", tp.FLOAT, [1, 2, "t"])],
        [helper.make_tensor_value_info("y", tp.FLOAT, [1, 3, "u"])], [w])
    model = tmp_path / "p.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    with pytest.raises(UnsupportedModelError) as info:
        build_onnx_artifact(model, tmp_path / "no.pha")
    assert "got (1, 3, 't-2')" in str(info.value)
    assert str(info.value).endswith("; 't' is a run-time dim of the inputs: --dim t=SIZE (dims= "
                                    "in the Python API) fixes it to the size the device feeds, "
                                    "and what is computed from it becomes constant")
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer, dims={"t": 9})
    check_against_onnxruntime(model, loaded, [
        {"x": np.random.default_rng(2).standard_normal((1, 2, 9)).astype(np.float32)}])


def test_a_refusal_about_anything_else_has_no_dim_hint(tmp_path):
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("StringNormalizer", ["x"], ["y"], name="u")], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n"])])
    path = tmp_path / "u.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    with pytest.raises(UnsupportedModelError) as info:
        build_onnx_artifact(path, tmp_path / "no.pha")
    assert "op 'StringNormalizer' is not supported" in str(info.value)
    assert "--dim" not in str(info.value)


def test_an_unknown_name_or_a_bad_size_is_a_usage_error(tmp_path):
    model = _export(_Conv(), (2, 3, 8, 8), tmp_path / "c.onnx",
                    {0: "batch", 2: "h", 3: "w"}, dynamo=False)
    with pytest.raises(UsageError) as info:
        build_onnx_artifact(model, tmp_path / "x.pha", dims={"height": 8, "h": 8})
    assert str(info.value).endswith("no input has a run-time dim named 'height' (the inputs' "
                                    "named run-time dims: batch, h, w)")
    proto = onnx.load(model)
    for size in (0, -3, MAX_FIXED_DIM + 1, 2.0, True):
        with pytest.raises(UsageError, match="is not an integer from 1 to"):
            fix_dims(proto, {"h": size})
    assert not (tmp_path / "x.pha").exists()


def _unnamed_dims_model(path, dims):
    """A conv over an input whose run-time dims are written as converters write them when
    they have no name for one: ``-1`` (paddle2onnx), ``?`` on two axes, a ``dim_param`` that is
    not a name; the output's dims are ``-1`` too."""
    helper, tp = onnx.helper, onnx.TensorProto
    rng = np.random.default_rng(4)
    w = onnx.numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x.image", tp.FLOAT, dims)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x.image", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])],
        "g", [x], [helper.make_tensor_value_info("y", tp.FLOAT, [-1, 4, -1, -1])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


@pytest.mark.parametrize("dims", [[-1, 3, "?", "?"], [None, 3, "p2o.Dim.1", "p2o.Dim.2"]],
                         ids=["minus-one-and-question-marks", "no-name-and-dotted-names"])
def test_run_time_dims_without_a_usable_name_are_named_for_their_input_and_axis(
        dims, tmp_path, signer):
    """Each such dim is its own run-time dim named ``<input>_d<axis>`` in the ABI, and
    ``--dim``, ``--golden-dim`` and the messages take that name."""
    model = _unnamed_dims_model(tmp_path / "u.onnx", dims)
    _, loaded = import_and_load(model, tmp_path / "a.pha", signer,
                                golden_dims={"x_image_d0": [1, 2], "x_image_d2": [5, 3],
                                             "x_image_d3": [4, 7]})
    assert loaded.graph.inputs[0].shape == ("x_image_d0", 3, "x_image_d2", "x_image_d3")
    rng = np.random.default_rng(5)
    check_on_both_backends(model, loaded, [
        {"x.image": rng.standard_normal(s).astype(np.float32)} for s in ((1, 3, 4, 9),
                                                                         (3, 3, 6, 2))])
    _, fixed = import_and_load(model, tmp_path / "b.pha", signer,
                               dims={"x_image_d2": 5, "x_image_d3": 6})
    assert fixed.graph.inputs[0].shape == ("x_image_d0", 3, 5, 6)
    with pytest.raises(UsageError) as info:
        build_onnx_artifact(model, tmp_path / "c.pha", dims={"h": 8})
    assert str(info.value).endswith("no input has a run-time dim named 'h' (the inputs' named "
                                    "run-time dims: x_image_d0, x_image_d2, x_image_d3)")


def test_golden_dims_take_a_dim_param_that_is_no_name_as_dims_do(tmp_path, signer):
    """``--golden-dim p2o.Dim.1=...`` draws every ABI dim that carries that ``dim_param``
    (here two axes of one input) at those sizes, as ``--dim p2o.Dim.1=...`` fixes them; the
    ABI keeps its own names."""
    model = _unnamed_dims_model(tmp_path / "u.onnx", [1, 3, "p2o.Dim.1", "p2o.Dim.1"])
    notes = []
    _, loaded = import_and_load(model, tmp_path / "a.pha", signer,
                                golden_dims={"p2o.Dim.1": [5, 3]}, report=notes.append)
    assert notes[0].startswith("input 'x.image': 'x_image_d2' (axis 2, written 'p2o.Dim.1', "
                               "golden size 5, 3), 'x_image_d3' (axis 3, written 'p2o.Dim.1', "
                               "golden size 5, 3) known only at run time")
    assert loaded.graph.inputs[0].shape == (1, 3, "x_image_d2", "x_image_d3")
    assert [case["x.image"].shape for case, _ in loaded.golden_cases()] == [(1, 3, 5, 5),
                                                                            (1, 3, 3, 3)]
    _, fixed = import_and_load(model, tmp_path / "b.pha", signer, dims={"p2o.Dim.1": 4})
    assert fixed.graph.inputs[0].shape == (1, 3, 4, 4)
    for golden, dims, message in [
            ({"p2o.Dim.2": [5]}, None, "golden dim 'p2o.Dim.2': no input has a run-time dim "
             "of that name (the inputs' run-time dims: 'x_image_d2', 'x_image_d3')"),
            ({"p2o.Dim.1": [5]}, {"p2o.Dim.1": 4}, "golden dim 'p2o.Dim.1': fixed at build "
             "to 4 (--dim)")]:
        with pytest.raises(UsageError) as info:
            build_onnx_artifact(model, tmp_path / "c.pha", golden_dims=golden, dims=dims)
        assert message in str(info.value)


def test_the_rewrite_leaves_the_model_as_read_alone(tmp_path):
    model = onnx.load(_export(_Conv(), (2, 3, 8, 8), tmp_path / "c.onnx", {2: "h"}, False))
    before = model.SerializeToString()
    fixed = fix_dims(model, {"h": 5})
    assert model.SerializeToString() == before and fix_dims(model, {}) is model
    dims = fixed.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [2, 3, 5, 8] and not dims[2].dim_param
    assert fixed.graph.output[0].type.tensor_type.shape.dim[2].dim_value == 5


@pytest.fixture
def free_conv(tmp_path):
    return _export(_Conv(), (1, 3, 8, 8), tmp_path / "c.onnx", {2: "h", 3: "w"}, dynamo=False)


def test_cli_fixes_dims_and_names_those_left(free_conv, tmp_path, capsys):
    assert main(["build", "--onnx", str(free_conv), "--out", str(tmp_path / "a.pha"),
                 "--dim", "h=16"]) == 0
    out = capsys.readouterr().out
    assert "input 'x': 'w' (axis 3, golden size 1) known only at run time" in out
    assert "'h'" not in out
    assert main(["inspect", str(tmp_path / "a.pha")]) == 0
    assert "x: float32 (1, 3, 16, 'w') NCHW" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--dim", "h"], "--dim 'h': expected NAME=SIZE, e.g. h=128"),
    (["--dim", "h=x"], "--dim h=x: the size must be an integer from 1 to 1048576"),
    (["--dim", "h=0"], "--dim h=0: the size must be an integer from 1 to 1048576"),
    (["--dim", "h=2", "--dim", "h=3"], "--dim h: given twice"),
    (["--dim", "q=2"], "no input has a run-time dim named 'q'"),
    (["--golden-dim", "h"], "--golden-dim 'h': expected NAME=SIZE[,SIZE...], e.g. h=64,128"),
    (["--golden-dim", "h=8,x"], "--golden-dim h=8,x: expected sizes, integers from 0 to "
                                "1048576 separated by commas, e.g. h=64,128"),
    (["--golden-dim", "h=-2"], "--golden-dim h=-2: expected sizes"),
    (["--golden-dim", "h=2", "--golden-dim", "h=3"], "--golden-dim h: given twice"),
    (["--golden-dim", "q=2"], "golden dim 'q': no input has a run-time dim of that name"),
    (["--golden-dim", "h=2", "--dim", "h=3"], "golden dim 'h': fixed at build to 3 (--dim)"),
])
def test_cli_bad_dims_are_usage_errors(free_conv, tmp_path, capsys, argv, message):
    code = main(["build", "--onnx", str(free_conv), "--out", str(tmp_path / "a.pha"), *argv])
    err = capsys.readouterr().err
    assert code != 0 and message in err and "Traceback" not in err
    assert not (tmp_path / "a.pha").exists()


def test_cli_dim_goes_with_onnx(tmp_path, capsys):
    assert main(["build", "--demo", "--out", str(tmp_path / "d.pha"), "--dim", "h=2"]) != 0
    assert "--dim" in capsys.readouterr().err


class _Patches(torch.nn.Module):
    """A 4x4 patch embedding over a run-time height and width, its tokens through a linear
    layer and back to the patch grid: the grid's size is the conv's output size, which the
    dynamo exporter computes as H//4 from the input's Shape."""

    def __init__(self):
        super().__init__()
        self.conv, self.linear = torch.nn.Conv2d(3, 8, 4, 4), torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.conv(x)
        n, c, h, w = y.shape
        return self.linear(y.flatten(2).transpose(1, 2)).reshape(n, h, w, c).permute(0, 3, 1, 2)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_golden_sizes_let_a_model_that_needs_them_keep_its_dims_run_time(dynamo, tmp_path,
                                                                        signer):
    """Drawn at 1, the golden image is smaller than the 4x4 kernel and the build is refused,
    naming the sizes and --golden-dim; drawn at the sizes given (case k the k-th, cycling),
    it builds with the height and width still run-time, and takes other sizes too."""
    model = tmp_path / "p.onnx"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(_Patches().eval(), (torch.randn(2, 3, 16, 24),), dynamo=True,
                              verbose=False, input_names=["x"], output_names=["y"],
                              dynamic_shapes={"x": {0: torch.export.Dim("batch"),
                                                    2: torch.export.Dim("H", min=4),
                                                    3: torch.export.Dim("W", min=4)}}
                              ).save(str(model))
        else:  # the output's grid named apart: it is not the input's H and W
            torch.onnx.export(_Patches().eval(), (torch.randn(2, 3, 16, 24),), str(model),
                              dynamo=False, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch", 2: "H", 3: "W"},
                                            "y": {0: "batch", 2: "h", 3: "w"}})
    with pytest.raises(ModelImportError, match=r"the golden cases give the inputs' run-time "
                       r"dims the sizes 'H' 1, 'W' 1, 'batch' 1, where a model may need others: "
                       r"--golden-dim NAME=SIZE,\.\.\. \(golden_dims= in the Python API\) draws "
                       r"them at other sizes and keeps them run-time"):
        import_and_load(model, tmp_path / "no.pha", signer)
    notes: list[str] = []
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer, golden_cases=3,
                                golden_dims={"H": (16, 24), "W": 12}, report=notes.append)
    assert loaded.graph.inputs[0].shape == ("batch", 3, "H", "W")
    assert [case["x"].shape for case, _ in loaded.golden_cases()] == [
        (1, 3, 16, 12), (1, 3, 24, 12), (1, 3, 16, 12)]
    assert notes[0].startswith("input 'x': 'H' (axis 2, golden size 16, 24), 'W' (axis 3, "
                               "golden size 12) known only at run time")
    rng = np.random.default_rng(4)
    feeds = [{"x": rng.standard_normal(shape).astype(np.float32)}
             for shape in ((2, 3, 8, 12), (1, 3, 20, 4), (3, 3, 9, 13))]
    check_on_both_backends(model, loaded, feeds)


def test_bad_golden_sizes_are_usage_errors(tmp_path):
    model = _export(_Conv(), (2, 3, 8, 8), tmp_path / "c.onnx",
                    {0: "batch", 2: "h", 3: "w"}, dynamo=False)
    out = tmp_path / "x.pha"
    for golden, dims, message in [
            ({"height": (8,)}, None, "golden dim 'height': no input has a run-time dim of "
                                     "that name (the inputs' run-time dims: 'batch', 'h', 'w')"),
            ({"h": (8,)}, {"h": 8}, "golden dim 'h': fixed at build to 8 (--dim), so it has "
                                    "no golden sizes of its own"),
            ({"h": ()}, None, "golden dim 'h': sizes () are not one or more integers from 0"),
            ({"h": (8, -1)}, None, "golden dim 'h': sizes [8, -1] are not one or more"),
            ({"h": (2.0,)}, None, "golden dim 'h': sizes [2.0] are not one or more"),
            ({"h": "8"}, None, "golden dim 'h': sizes '8' are not one or more"),
            ({"h": 2.5}, None, "golden dim 'h': sizes 2.5 are not one or more"),
            ({"h": -1}, None, "golden dim 'h': sizes [-1] are not one or more"),
            ({"h": (MAX_FIXED_DIM,), "w": (MAX_FIXED_DIM,)}, None,
             f"golden case 0: input 'x' of shape (1, 3, {MAX_FIXED_DIM}, {MAX_FIXED_DIM}) would "
             f"hold {3 * MAX_FIXED_DIM ** 2} elements, over the cap of")]:
        with pytest.raises(UsageError) as info:
            build_onnx_artifact(model, out, golden_dims=golden, dims=dims)
        assert message in str(info.value)
    assert not out.exists()


def test_cli_draws_golden_cases_at_the_sizes_given(free_conv, tmp_path, capsys):
    assert main(["build", "--onnx", str(free_conv), "--out", str(tmp_path / "a.pha"),
                 "--golden-dim", "h=5,9", "--golden-dim", "w=7"]) == 0
    out = capsys.readouterr().out
    assert "input 'x': 'h' (axis 2, golden size 5, 9), 'w' (axis 3, golden size 7)" in out
    assert main(["inspect", str(tmp_path / "a.pha")]) == 0
    assert "x: float32 (1, 3, 'h', 'w') NCHW" in capsys.readouterr().out
    assert main(["build", "--demo", "--out", str(tmp_path / "d.pha"), "--golden-dim",
                 "h=2"]) != 0
    assert "--golden-dim" in capsys.readouterr().err


# --- golden values drawn from a range of their own (--golden-range) --------------------------


def _scaled_pick_model(path):
    """y = table[lengths - 1] * scale: an integer input read as an Embedding's id (of a
    constant table), minus 1 (ints are drawn from [0, 2) unless told), and a float input."""
    helper, TP = onnx.helper, onnx.TensorProto
    one = helper.make_tensor("one", TP.INT64, [], [1])
    table = onnx.numpy_helper.from_array(
        np.random.default_rng(2).standard_normal((6, 2)).astype(np.float32), "table")
    nodes = [helper.make_node("Sub", ["lengths", "one"], ["i"]),
             helper.make_node("Gather", ["table", "i"], ["picked"], axis=0),
             helper.make_node("Mul", ["picked", "scale"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("lengths", TP.INT64, [3]),
                     helper.make_tensor_value_info("scale", TP.FLOAT, [3, 1])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [3, 2])], [one, table])
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path


def test_golden_ranges_draw_an_input_the_model_takes_only_some_of(tmp_path, signer):
    """Integers drawn from [0, 2) give lengths 0, an Embedding id -1, which the ABI refuses
    where onnxruntime counts it from the end: the build names it. Drawn from [1, 7) and the
    floats from [2, 3), every golden value lies there, and the artifact matches onnxruntime."""
    model = _scaled_pick_model(tmp_path / "m.onnx")
    with pytest.raises(ModelImportError, match=r"outside \[0, 6\).*=-1"):
        build_onnx_artifact(model, tmp_path / "no.pha", golden_cases=4)
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_cases=4,
                                golden_ranges={"lengths": (1, 7), "scale": (2.0, 3.0)})
    cases = [case for case, _ in loaded.golden_cases()]
    lengths = np.concatenate([case["lengths"] for case in cases])
    scales = np.concatenate([case["scale"].ravel() for case in cases])
    assert lengths.min() >= 1 and lengths.max() <= 6 and len(set(lengths.tolist())) > 2
    assert scales.min() >= 2.0 and scales.max() < 3.0 and scales.dtype == np.float32
    rng = np.random.default_rng(6)
    check_on_both_backends(model, loaded, [
        {"lengths": rng.integers(1, 7, 3), "scale": rng.standard_normal((3, 1)).astype(
            np.float32)} for _ in range(3)])


@pytest.mark.parametrize("ranges, message", [
    ({"q": (1, 2)}, "golden range 'q': no input of that name (the inputs: 'lengths', "
                    "'scale')"),
    ({"lengths": (1.5, 3)}, "golden range 'lengths': integer input, so (low, high) must be "
                            "integers, got (1.5, 3)"),
    ({"lengths": (3, 3)}, "golden range 'lengths': (3, 3) is not (low, high), two finite "
                          "numbers with low < high"),
    ({"scale": (0, float("inf"))}, "golden range 'scale': (0, inf) is not (low, high)"),
    ({"scale": "12"}, "golden range 'scale': '12' is not (low, high)"),
])
def test_bad_golden_ranges_are_usage_errors(tmp_path, ranges, message):
    with pytest.raises(UsageError) as info:
        build_onnx_artifact(_scaled_pick_model(tmp_path / "m.onnx"), tmp_path / "a.pha",
                            golden_ranges=ranges)
    assert message in str(info.value)


def test_a_golden_range_keeps_an_embedding_s_indices_in_its_table(tmp_path):
    helper, TP = onnx.helper, onnx.TensorProto
    table = helper.make_tensor("t", TP.FLOAT, [4, 2], np.arange(8, dtype=np.float32))
    graph = helper.make_graph([helper.make_node("Gather", ["t", "i"], ["y"])], "g",
                              [helper.make_tensor_value_info("i", TP.INT64, [3])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, [3, 2])], [table])
    model = tmp_path / "e.onnx"
    model.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    with pytest.raises(UsageError, match=r"golden range 'i': \[1, 5\) reaches outside the "
                                         r"Embedding's indices \[0, 4\)"):
        build_onnx_artifact(model, tmp_path / "a.pha", golden_ranges={"i": (1, 5)})
    build_onnx_artifact(model, tmp_path / "b.pha", golden_ranges={"i": (2, 4)})


@pytest.mark.parametrize("argv, code, message", [
    (["--golden-range", "lengths=1,7", "--golden-range", "scale=2,3"], 0, "built "),
    (["--golden-range", "lengths"], 1, "--golden-range 'lengths': expected NAME=LOW,HIGH, "
                                       "e.g. lengths=1,8"),
    (["--golden-range", "lengths=7,1"], 1, "--golden-range lengths=7,1: expected LOW,HIGH, two "
                                           "finite numbers with LOW < HIGH"),
    (["--golden-range", "lengths=1,x"], 1, "--golden-range lengths=1,x: expected LOW,HIGH"),
    (["--golden-range", "lengths=1,2,3"], 1, "--golden-range lengths=1,2,3: expected LOW,HIGH"),
])
def test_cli_golden_range(tmp_path, capsys, argv, code, message):
    model = _scaled_pick_model(tmp_path / "m.onnx")
    got = main(["build", "--onnx", str(model), "--out", str(tmp_path / "a.pha"), *argv])
    out, err = capsys.readouterr()
    assert got == code and message in (out if code == 0 else err) and "Traceback" not in err
    assert (tmp_path / "a.pha").exists() == (code == 0)


def test_cli_golden_range_goes_with_onnx(tmp_path, capsys):
    assert main(["build", "--demo", "--out", str(tmp_path / "d.pha"),
                 "--golden-range", "x=1,2"]) != 0
    assert "--golden-range" in capsys.readouterr().err
