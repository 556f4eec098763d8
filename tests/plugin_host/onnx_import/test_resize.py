"""Upsampling and pixel shuffling imported from ONNX: Resize (torch's interpolate and Upsample,
nearest, linear and bicubic, and trilinear and nearest over volumes) as the resize op,
DepthToSpace and SpaceToDepth (torch's pixel_shuffle; pixel_unshuffle is exported as Reshape and
Transpose) as reshape -> transpose -> reshape; compared with onnxruntime (cubic to the last
bit). What the mapping cannot take is refused naming the node and the attribute."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from abi.errors import BackendError, ShapeError
from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.executor import Executor
from plugin_host.onnx_import import import_onnx
from plugins.numpy_backend import NumpyBackend
from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (EXPORTERS, Fn, check_against_onnxruntime, check_on_both_backends, export,
                       import_and_load, onnx, onnxruntime_outputs, refused_on_every_side, torch)

F = torch.nn.functional
helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(5)
BIG = np.finfo(np.float32).max


def _feeds(shape, nonfinite=True):
    """Random inputs, and one with float32 extremes (and infinities and nan) spread in."""
    feeds = [{"x": (RNG.standard_normal(shape) * 3).astype(np.float32)} for _ in range(2)]
    x = RNG.standard_normal(shape).astype(np.float32)
    special = [BIG, -BIG, 1e-45, -0.0, 1e30] + ([np.inf, -np.inf, np.nan] if nonfinite else [])
    flat = x.reshape(-1)
    flat[RNG.choice(flat.size, size=len(special), replace=False)] = special
    return feeds + [{"x": x}]


class _Up2d(torch.nn.Module):
    """What torch's exporters write as Resize: each mode, by scale and by size, up and down."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Upsample(scale_factor=(2, 3))
        self.up_bilinear = torch.nn.Upsample(scale_factor=2.5, mode="bilinear")

    def forward(self, x):
        return (F.interpolate(x, scale_factor=2, mode="nearest"),
                F.interpolate(x, scale_factor=1.5, mode="nearest"),
                F.interpolate(x, scale_factor=0.5, mode="nearest"),
                F.interpolate(x, size=(7, 3), mode="nearest"),
                F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=False),
                F.interpolate(x, scale_factor=0.6, mode="bilinear", align_corners=True),
                F.interpolate(x, size=(3, 8), mode="bilinear"),
                F.interpolate(x, size=(9, 11), mode="bilinear", align_corners=True),
                self.up(x), self.up_bilinear(x))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_interpolate_and_upsample_match_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    names = [f"y{i}" for i in range(10)]
    model = export(_Up2d(), [torch.randn(2, 3, 5, 6)], tmp_path / "u.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"], output_names=names)
    _, loaded = import_and_load(model, tmp_path / "u.pha", signer)
    resized = [n for n in loaded.graph.nodes if n.op == "resize"]
    assert len(resized) == 10
    assert {(n.attrs["mode"], n.attrs["coordinate_mode"]) for n in resized} == {
        ("nearest", "asymmetric"), ("linear", "half_pixel"), ("linear", "align_corners")}
    assert {s.name: s.shape for s in loaded.graph.outputs}["y1"] == (2, 3, 7, 9)
    check_against_onnxruntime(model, loaded, _feeds((2, 3, 5, 6)))


class _Up1d(torch.nn.Module):
    def forward(self, x):
        return (F.interpolate(x, scale_factor=2.5, mode="nearest"),
                F.interpolate(x, size=4, mode="nearest"))


class _Linear1d(torch.nn.Module):
    def forward(self, x):
        return (F.interpolate(x, scale_factor=2.5, mode="linear"),
                F.interpolate(x, size=4, mode="linear", align_corners=True))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_one_dimensional_resize_matches_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    modules = [_Up1d()] + ([] if dynamo else [_Linear1d()])  # dynamo: linear as GatherND
    for i, module in enumerate(modules):
        model = export(module, [torch.randn(2, 3, 6)], tmp_path / f"l{i}.onnx", dynamo=dynamo,
                       fold=fold, optimize=optimize, input_names=["x"], output_names=["a", "b"])
        _, loaded = import_and_load(model, tmp_path / f"l{i}.pha", signer)
        assert [n.op for n in loaded.graph.nodes] == ["resize", "resize"]
        # onnxruntime's linear over (N, C, L) weighs the neighbouring channels by 0, so an inf
        # or nan there spreads (0 * inf); torch and the numpy backend keep channels apart
        check_against_onnxruntime(model, loaded, _feeds((2, 3, 6), nonfinite=i == 0))


class _Volume(torch.nn.Module):
    """3-D upsampling as volumetric models write it: trilinear and nearest, by scale and to a
    size, with and without align_corners."""

    def forward(self, x):
        return (F.interpolate(x, scale_factor=2.0, mode="trilinear"),
                F.interpolate(x, size=(3, 7, 5), mode="trilinear", align_corners=True),
                F.interpolate(x, scale_factor=(1.5, 2.0, 0.5), mode="nearest"),
                torch.nn.Upsample(size=(6, 4, 9))(x))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_volumetric_resize_matches_onnxruntime(dynamo, fold, optimize, tmp_path, signer):
    model = export(_Volume(), [torch.randn(2, 3, 4, 5, 6)], tmp_path / "v.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"],
                   output_names=["a", "b", "c", "d"])
    _, loaded = import_and_load(model, tmp_path / "v.pha", signer)
    assert [n.op for n in loaded.graph.nodes].count("resize") == 4
    assert {s.name: s.shape for s in loaded.graph.outputs} == {
        "a": (2, 3, 8, 10, 12), "b": (2, 3, 3, 7, 5), "c": (2, 3, 6, 10, 3), "d": (2, 3, 6, 4, 9)}
    check_on_both_backends(model, loaded, _feeds((2, 3, 4, 5, 6)))


def _export_batched(module, args, path, dynamo: bool) -> None:
    if dynamo:
        program = torch.onnx.export(module.eval(), args, dynamo=True, verbose=False,
                                    input_names=["x"], output_names=["y"],
                                    dynamic_shapes=({0: torch.export.Dim("batch")},))
        program.save(str(path))
    else:
        torch.onnx.export(module.eval(), args, str(path), dynamo=False, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "batch"},
                                                            "y": {0: "batch"}})


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_symbolic_batch_dim_passes_through_resize(dynamo, tmp_path, signer):
    module = torch.nn.Sequential(torch.nn.Upsample(scale_factor=2, mode="bilinear"),
                                 torch.nn.Upsample(scale_factor=1.5),
                                 torch.nn.Upsample(scale_factor=0.5, mode="bicubic"))
    path = tmp_path / "b.onnx"
    args = (torch.randn(2, 3, 4, 5),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _export_batched(module, args, path, dynamo)
    _, loaded = import_and_load(path, tmp_path / "b.pha", signer)
    assert loaded.graph.inputs[0].shape == ("batch", 3, 4, 5)
    assert loaded.graph.outputs[0].shape == ("batch", 3, 6, 7)
    check_against_onnxruntime(path, loaded, [{"x": RNG.standard_normal((n, 3, 4, 5))
                                              .astype(np.float32)} for n in (1, 4)])


class _Shuffle(torch.nn.Module):
    def forward(self, x):
        return F.pixel_shuffle(x, 2), F.pixel_unshuffle(x, 2), F.pixel_shuffle(x, 1)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_pixel_shuffle_and_unshuffle_match_onnxruntime(dynamo, fold, optimize, tmp_path,
                                                       signer):
    model = export(_Shuffle(), [torch.randn(2, 8, 4, 6)], tmp_path / "s.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"],
                   output_names=["up", "down", "same"])
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    assert {n.op for n in loaded.graph.nodes} <= {"reshape", "transpose", "identity"}
    assert {s.name: s.shape for s in loaded.graph.outputs} == {
        "up": (2, 2, 8, 12), "down": (2, 32, 2, 3), "same": (2, 8, 4, 6)}
    check_against_onnxruntime(model, loaded, _feeds((2, 8, 4, 6)))


def _export_spatial(module, path, dynamo: bool) -> None:
    """``module`` of an (N, 8, H, W) image exported with a run-time batch, height and width."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(module, (torch.randn(2, 8, 4, 6),), dynamo=True, verbose=False,
                              input_names=["x"], output_names=["y"], dynamic_shapes=(
                                  {0: torch.export.Dim("batch"), 2: torch.export.Dim("h"),
                                   3: torch.export.Dim("w")},)).save(str(path))
        else:  # the output's dims named apart: they are not the input's
            torch.onnx.export(module, (torch.randn(2, 8, 4, 6),), str(path), dynamo=False,
                              input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch", 2: "h", 3: "w"},
                                            "y": {0: "batch", 2: "oh", 3: "ow"}})


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_pixel_shuffle_over_a_run_time_height_and_width(dynamo, tmp_path, signer):
    """DepthToSpace (legacy) or its Reshape and Transpose form (dynamo) of an image whose
    batch, height and width are all run-time."""
    path = tmp_path / "p.onnx"
    _export_spatial(Fn(lambda x: F.pixel_shuffle(x, 2)).eval(), path, dynamo)
    _, loaded = import_and_load(path, tmp_path / "p.pha", signer)
    assert loaded.graph.inputs[0].shape == ("batch", 8, "h", "w")
    feeds = [{"x": RNG.standard_normal((n, 8, h, w)).astype(np.float32)}
             for n, h, w in ((1, 1, 1), (3, 2, 5), (2, 7, 3))]
    check_on_both_backends(path, loaded, feeds)


@pytest.mark.parametrize("resize", [
    lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
    lambda x: F.interpolate(x, scale_factor=0.5, mode="nearest"),
    lambda x: F.interpolate(x, scale_factor=(1.5, 2), mode="bilinear"),
    lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
    lambda x: F.interpolate(x, scale_factor=0.75, mode="bicubic"),
], ids=["nearest2", "nearest0.5", "bilinear1.5x2", "bilinear2-corners", "bicubic0.75"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_scales_over_a_run_time_height_and_width(dynamo, resize, tmp_path, signer):
    """interpolate by scale_factor of an image whose batch, height and width are all run-time:
    the output size is floor(in * scale) when the call runs, as onnxruntime's; a height that
    scales to no row gives an empty output, as onnxruntime does."""
    path = tmp_path / "s.onnx"
    _export_spatial(Fn(resize).eval(), path, dynamo)
    _, loaded = import_and_load(path, tmp_path / "s.pha", signer, golden_dims={"h": 4, "w": 4})
    assert loaded.graph.inputs[0].shape == ("batch", 8, "h", "w")
    feeds = [{"x": RNG.standard_normal((n, 8, h, w)).astype(np.float32)}
             for n, h, w in ((1, 2, 2), (3, 5, 7), (2, 8, 3), (1, 1, 3))]
    check_on_both_backends(path, loaded, feeds)


class _Decoder(torch.nn.Module):
    """A U-Net's way up: upsampled by 2, concatenated with the skip, convolved."""

    def __init__(self):
        super().__init__()
        self.down = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.merge = torch.nn.Conv2d(16, 4, 3, padding=1)

    def forward(self, x):
        up = F.interpolate(torch.relu(self.down(x)), scale_factor=2, mode="bilinear")
        return self.merge(torch.cat([up, x], 1))


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_decoder_upsampling_by_scale_over_a_run_time_image(dynamo, tmp_path, signer):
    path = tmp_path / "d.onnx"
    torch.manual_seed(0)
    _export_spatial(_Decoder().eval(), path, dynamo)
    _, loaded = import_and_load(path, tmp_path / "d.pha", signer, golden_dims={"h": 4, "w": 6})
    feeds = [{"x": RNG.standard_normal((n, 8, h, w)).astype(np.float32)}
             for n, h, w in ((1, 2, 2), (2, 6, 10), (1, 16, 4))]
    check_on_both_backends(path, loaded, feeds)


class _DetectionHead(torch.nn.Module):
    """A detector's top-down step and head: the coarser map upsampled by 2 and added to the
    finer one, whose height the dynamo exporter computes apart ((h-1)//2+1 there, the add's
    ((h+3)//4)*2 here, equal where h fits), split into anchors and offset by a grid of
    arange over that height and width."""

    def __init__(self):
        super().__init__()
        self.fine = torch.nn.Conv2d(8, 4, 3, stride=2, padding=1)
        self.coarse = torch.nn.Conv2d(4, 4, 3, stride=2, padding=1)
        self.head = torch.nn.Conv2d(4, 6, 1)

    def forward(self, x):
        fine = self.fine(x)
        y = self.head(fine + F.interpolate(self.coarse(fine), scale_factor=2))
        b, _, h, w = y.shape
        y = y.view(b, 2, 3, h, w).permute(0, 1, 3, 4, 2)
        gy, gx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        return y[..., :2] + torch.stack((gx, gy), -1).float(), y[..., 2:].sigmoid()


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_detection_head_over_a_run_time_image(dynamo, tmp_path, signer):
    """Imports from both exporters (the dynamo one's reshape settles the add's undecided
    height as the finer map's, checked when the call runs); matches onnxruntime where the
    image's size lets the maps add, and where it does not, each backend refuses the call as
    onnxruntime does."""
    path = tmp_path / "d.onnx"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dims = {0: "batch", 2: "h", 3: "w"}
        if dynamo:
            torch.onnx.export(_DetectionHead().eval(), (torch.randn(2, 8, 32, 48),),
                              dynamo=True, verbose=False, input_names=["x"],
                              output_names=["xy", "p"], dynamic_shapes=(
                                  {a: torch.export.Dim(n) for a, n in dims.items()},)
                              ).save(str(path))
        else:
            torch.onnx.export(_DetectionHead().eval(), (torch.randn(2, 8, 32, 48),), str(path),
                              dynamo=False, input_names=["x"], output_names=["xy", "p"],
                              dynamic_axes={"x": dims})
    _, loaded = import_and_load(path, tmp_path / "d.pha", signer,
                                golden_dims={"h": 32, "w": 48})
    feeds = [{"x": RNG.standard_normal((n, 8, h, w)).astype(np.float32)}
             for n, h, w in ((1, 32, 48), (2, 16, 8), (1, 4, 12))]
    check_on_both_backends(path, loaded, feeds)
    odd = {"x": RNG.standard_normal((1, 8, 6, 8)).astype(np.float32)}  # 3 rows and 2 * 2
    with pytest.raises(Exception):
        onnxruntime_outputs(path, odd)
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        with pytest.raises((ShapeError, BackendError)):
            Executor(loaded.graph, backend).run(odd)


class _Pyramid(torch.nn.Module):
    """A feature pyramid's top-down step: the coarser map brought to the finer one's size
    (``interpolate(c, size=x.shape[-2:])``), added to it."""

    def __init__(self):
        super().__init__()
        self.coarse = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.lateral = torch.nn.Conv2d(8, 8, 1)

    def forward(self, x):
        return self.lateral(x) + F.interpolate(self.coarse(x), size=x.shape[-2:])


class _Segmenter(torch.nn.Module):
    """A segmentation head's last step: logits brought back to the image's size, bilinear."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Conv2d(8, 3, 3, stride=4, padding=1)

    def forward(self, x):
        return F.interpolate(self.head(x), size=x.shape[2:], mode="bilinear",
                             align_corners=False)


@pytest.mark.parametrize("module", [_Pyramid, _Segmenter], ids=["pyramid", "segmenter"])
@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_sizes_from_a_run_time_shape(dynamo, module, tmp_path, signer):
    """Resize to sizes the model takes from a tensor's shape over a run-time image: read from
    that tensor's shape when the call runs (resize's like)."""
    path = tmp_path / "p.onnx"
    torch.manual_seed(0)
    _export_spatial(module().eval(), path, dynamo)
    _, loaded = import_and_load(path, tmp_path / "p.pha", signer, golden_dims={"h": 9, "w": 14})
    [resize] = [n for n in loaded.graph.nodes if n.op == "resize"]
    assert resize.attrs["size"] == (-1, -1) and len(resize.inputs) == 2
    feeds = [{"x": RNG.standard_normal((n, 8, h, w)).astype(np.float32)}
             for n, h, w in ((1, 9, 14), (2, 5, 7), (1, 16, 3), (2, 1, 1))]
    check_on_both_backends(path, loaded, feeds)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_pixel_unshuffle_over_a_run_time_height_and_width(dynamo, tmp_path, signer):
    """The legacy exporter's Reshape to (h//2, 2): a -1 that no product of the dims gives,
    left to the call. The dynamo exporter's to (h//2, 2) computed from the shape: h read as
    2 * (h//2). Either refuses an odd height on both backends, as onnxruntime does."""
    path = tmp_path / "u.onnx"
    _export_spatial(Fn(lambda x: F.pixel_unshuffle(x, 2)).eval(), path, dynamo=dynamo)
    _, loaded = import_and_load(path, tmp_path / "u.pha", signer,
                                golden_dims={"h": (4, 2), "w": (6,)})
    feeds = [{"x": RNG.standard_normal((n, 8, h, w)).astype(np.float32)}
             for n, h, w in ((1, 2, 2), (3, 4, 6), (2, 8, 2))]
    check_on_both_backends(path, loaded, feeds)
    refused_on_every_side(path, loaded.graph, {"x": np.zeros((1, 8, 3, 4), np.float32)},
                          onnxruntime_says="Reshape", numpy_says="does not split into sizes",
                          backend_says=r"^unflatten: ")


# --- ONNX models written with onnx.helper: what torch does not write, and the refusals -----------


def _model(tmp_path, op_type, x_shape, consts=(), inputs=None, attrs=None, opset=18,
           runtime=()):
    """A one-node model of ``op_type`` named ``node`` over ``x`` (float32) with the constant
    inputs ``consts`` (name -> array) and run-time inputs ``runtime`` (name -> shape)."""
    inits = [onnx.numpy_helper.from_array(np.asarray(v), name) for name, v in dict(consts)
             .items()]
    node = helper.make_node(op_type, inputs or ["x", *dict(consts)], ["y"], name="node",
                            **(attrs or {}))
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TP.FLOAT, list(x_shape))] +
        [helper.make_tensor_value_info(n, e, list(s)) for n, (e, s) in dict(runtime).items()],
        [helper.make_tensor_value_info("y", TP.FLOAT, [None] * len(x_shape))],
        initializer=inits)
    path = tmp_path / f"{op_type}.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString())
    return path


SCALES = np.array([1, 1, 1.5, 0.75], np.float32)


@pytest.mark.parametrize("attrs, given", [
    ({"mode": "nearest", "coordinate_transformation_mode": "half_pixel",
      "nearest_mode": "round_prefer_ceil"}, "scales"),
    ({"mode": "nearest", "coordinate_transformation_mode": "pytorch_half_pixel"}, "scales"),
    ({"mode": "nearest", "coordinate_transformation_mode": "align_corners",
      "nearest_mode": "ceil"}, "sizes"),
    ({}, "sizes"),  # ONNX's defaults: nearest, half_pixel, round_prefer_floor
    ({"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, "sizes"),
    ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, "scales"),
    ({"mode": "linear", "axes": [3, 2]}, "axes"),
    ({"mode": "linear"}, "kept"),  # every size kept: onnxruntime copies x (an inf stays)
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
     "kept"),
    ({"mode": "linear"}, "same sizes"),
    # TensorFlow's half-pixel centres (tf2onnx writes them for tf.image.resize's nearest)
    ({"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}, "scales"),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}, "sizes"),
    # one axis of scale 1, which onnxruntime reads as it is in every mode (half a pixel off
    # under tf_half_pixel_for_nn otherwise)
    ({"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn",
      "nearest_mode": "ceil"}, "one kept"),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}, "one kept"),
    ({"mode": "cubic", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}, "one kept"),
    # opset 19's centred half pixel: an offset where the size is not scale * length
    ({"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, "scales"),
    ({"mode": "nearest", "coordinate_transformation_mode": "half_pixel_symmetric"}, "sizes"),
    ({"mode": "cubic", "coordinate_transformation_mode": "half_pixel_symmetric"}, "odd scales"),
])
def test_resize_modes_torch_does_not_write_match_onnxruntime(tmp_path, signer, attrs, given):
    sizes = np.array([2, 3, 1, 9], np.int64)  # a length-1 output: pytorch_half_pixel's case
    consts = {"scales": {"roi": np.zeros(0, np.float32), "scales": SCALES},
              "sizes": {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
                        "sizes": sizes},
              "axes": {"roi": np.zeros(0, np.float32), "scales": np.array([2.0, 0.5],
                                                                           np.float32)},
              "kept": {"roi": np.zeros(0, np.float32),
                       "scales": np.array([1, 1, 1.1, 1.1], np.float32)},
              "same sizes": {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
                             "sizes": np.array([2, 3, 4, 6], np.int64)},
              "one kept": {"roi": np.zeros(0, np.float32),
                           "scales": np.array([1, 1, 1, 0.5], np.float32)},
              "odd scales": {"roi": np.zeros(0, np.float32),  # 4 * 1.3 and 6 * 0.7 round down
                             "scales": np.array([1, 1, 1.3, 0.7], np.float32)}}[given]
    model = _model(tmp_path, "Resize", (2, 3, 4, 6), consts, attrs=attrs, opset=19)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["resize"]
    check_against_onnxruntime(model, loaded, _feeds((2, 3, 4, 6)))


def _assert_bit_exact(runs) -> None:
    """The numpy backend's outputs are onnxruntime's, bit for bit (nan where it has nan)."""
    for got, want in runs:
        for name, value in want.items():
            np.testing.assert_array_equal(got[name], value, err_msg=name)


class _Bicubic(torch.nn.Module):
    """torch's bicubic interpolate and Upsample, up and down, by scale and by size."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Upsample(scale_factor=(1.5, 2), mode="bicubic", align_corners=True)

    def forward(self, x):
        return (F.interpolate(x, scale_factor=2, mode="bicubic"),
                F.interpolate(x, scale_factor=0.5, mode="bicubic"),
                F.interpolate(x, scale_factor=1.7, mode="bicubic", align_corners=True),
                F.interpolate(x, size=(3, 8), mode="bicubic"),
                F.interpolate(x, size=(9, 2), mode="bicubic", align_corners=True),
                F.interpolate(x, size=(1, 1), mode="bicubic"),
                self.up(x))


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_bicubic_exported_by_torch_matches_onnxruntime(dynamo, fold, optimize, tmp_path,
                                                       signer):
    names = [f"y{i}" for i in range(7)]
    model = export(_Bicubic(), [torch.randn(2, 3, 5, 6)], tmp_path / "c.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"], output_names=names)
    _, loaded = import_and_load(model, tmp_path / "c.pha", signer)
    resized = [n for n in loaded.graph.nodes if n.op == "resize"]
    assert len(resized) == 7
    assert {(n.attrs["mode"], n.attrs["coordinate_mode"], n.attrs["cubic_coeff_a"],
             n.attrs["exclude_outside"]) for n in resized} == {
        ("cubic", "half_pixel", -0.75, False), ("cubic", "align_corners", -0.75, False)}
    assert {s.name: s.shape for s in loaded.graph.outputs}["y2"] == (2, 3, 8, 10)
    _assert_bit_exact(check_against_onnxruntime(model, loaded, _feeds((2, 3, 5, 6))))


CUBIC_SCALES = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 1.5, 0.6], np.float32)}
CUBIC_SIZES = {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
               "sizes": np.array([2, 3, 1, 9], np.int64)}


@pytest.mark.parametrize("coordinate", ["pytorch_half_pixel", "half_pixel", "align_corners",
                                        "asymmetric"])
@pytest.mark.parametrize("attrs, consts", [
    ({}, CUBIC_SCALES),
    ({}, CUBIC_SIZES),  # a length-1 output: pytorch_half_pixel's case
    ({"exclude_outside": 1}, CUBIC_SCALES),
    ({"exclude_outside": 1, "cubic_coeff_a": -0.5}, CUBIC_SIZES),
    ({"cubic_coeff_a": -0.5}, {"roi": np.zeros(0, np.float32),
                               "scales": np.array([1, 1, 3, 2.5], np.float32)}),
    ({"axes": [3]}, {"roi": np.zeros(0, np.float32), "scales": np.array([0.75], np.float32)}),
    ({}, {"roi": np.zeros(0, np.float32),  # every size kept: onnxruntime copies x
          "scales": np.array([1, 1, 1.1, 1.1], np.float32)}),
])
def test_cubic_matches_onnxruntime_bit_for_bit(tmp_path, signer, coordinate, attrs, consts):
    model = _model(tmp_path, "Resize", (2, 3, 4, 6), consts,
                   attrs={"mode": "cubic", "coordinate_transformation_mode": coordinate,
                          **attrs})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["resize"]
    _assert_bit_exact(check_against_onnxruntime(model, loaded, _feeds((2, 3, 4, 6))))


def test_cubic_on_the_onnxruntime_backend_matches_onnxruntime(tmp_path, signer):
    """The resize glue op run by the onnxruntime backend plugin: its Resize carries the cubic
    coefficient and exclude_outside."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    model = _model(tmp_path, "Resize", (2, 3, 4, 6), CUBIC_SIZES,
                   attrs={"mode": "cubic", "coordinate_transformation_mode": "half_pixel",
                          "exclude_outside": 1, "cubic_coeff_a": -0.5})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    _assert_bit_exact(check_against_onnxruntime(model, loaded, _feeds((2, 3, 4, 6)),
                                                backend=OnnxruntimeBackend()))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_to_sizes_takes_run_time_spatial_dims(tmp_path, signer, mode):
    consts = {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
              "sizes": np.array([1, 3, 6, 8], np.int64)}
    model = _model(tmp_path, "Resize", (1, 3, "h", "w"), consts, attrs={"mode": mode})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert loaded.graph.outputs[0].shape == (1, 3, 6, 8)
    check_against_onnxruntime(model, loaded, [{"x": RNG.standard_normal((1, 3, h, w))
                                               .astype(np.float32)} for h, w in
                                              ((4, 4), (2, 9), (12, 3), (4, 4), (6, 8))])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_of_some_axes_keeps_a_run_time_spatial_dim(tmp_path, signer, mode):
    """Resize's axes=[3] to a fixed width: the run-time height is kept, read from x itself."""
    consts = {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
              "sizes": np.array([8], np.int64)}
    model = _model(tmp_path, "Resize", (1, 3, "h", 4), consts,
                   attrs={"mode": mode, "axes": [3]})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    assert loaded.graph.outputs[0].shape[3] == 8
    check_on_both_backends(model, loaded, [{"x": RNG.standard_normal((1, 3, h, 4))
                                            .astype(np.float32)} for h in (1, 5, 2)])


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_matches_onnxruntime(tmp_path, signer, mode):
    model = _model(tmp_path, "DepthToSpace", (2, 18, 2, 3), attrs={"blocksize": 3,
                                                                   "mode": mode})
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["reshape", "transpose", "reshape"]
    assert loaded.graph.outputs[0].shape == (2, 2, 6, 9)
    check_against_onnxruntime(model, loaded, _feeds((2, 18, 2, 3)))


@pytest.mark.parametrize("mode", [None, "DCR", "CRD"])
def test_space_to_depth_matches_onnxruntime(tmp_path, signer, mode):
    """Opset 28 gave SpaceToDepth DepthToSpace's modes (DCR, the layout before, by default)."""
    model = _model(tmp_path, "SpaceToDepth", (2, 3, 4, 6), opset=18 if mode is None else 28,
                   attrs={"blocksize": 2, **({} if mode is None else {"mode": mode})})
    _, loaded = import_and_load(model, tmp_path / "s.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ["reshape", "transpose", "reshape"]
    assert loaded.graph.outputs[0].shape == (2, 12, 2, 3)
    check_on_both_backends(model, loaded, _feeds((2, 3, 4, 6)))


@pytest.mark.parametrize("op, channels, attrs", [
    ("DepthToSpace", 18, {"blocksize": 3, "mode": "DCR"}),
    ("DepthToSpace", 8, {"blocksize": 2, "mode": "CRD"}),
    ("SpaceToDepth", 3, {"blocksize": 2}),
    ("SpaceToDepth", 3, {"blocksize": 2, "mode": "CRD"})],
    ids=["d2s-DCR", "d2s-CRD", "s2d", "s2d-CRD"])
def test_depth_and_space_over_a_run_time_height_and_width(op, channels, attrs, tmp_path,
                                                          signer):
    """unflatten, transpose and flatten keep N, H and W run-time; SpaceToDepth of an H the
    block does not divide is refused when the call runs on both backends, as onnxruntime
    refuses it."""
    model = _model(tmp_path, op, ("n", channels, "h", "w"), attrs=attrs,
                   opset=28 if op == "SpaceToDepth" and "mode" in attrs else 18)
    _, loaded = import_and_load(model, tmp_path / "d.pha", signer,
                                golden_dims={"h": (4,), "w": (6,)})
    assert {"unflatten", "transpose", "flatten"} == {n.op for n in loaded.graph.nodes}
    sizes = ((1, 2, 4), (3, 6, 2), (2, 4, 8)) if op == "SpaceToDepth" else (
        (1, 1, 1), (3, 2, 5), (2, 4, 1))
    feeds = [{"x": RNG.standard_normal((n, channels, h, w)).astype(np.float32)}
             for n, h, w in sizes]
    check_on_both_backends(model, loaded, feeds)
    if op == "SpaceToDepth":
        refused_on_every_side(model, loaded.graph, {"x": np.zeros((1, 3, 3, 4), np.float32)},
                              onnxruntime_says="SpaceToDepth",
                              numpy_says="does not split into sizes", backend_says=r"^unflatten: ")


def _resize(attrs=None, consts=None, **kw):
    return ("Resize", (1, 3, 4, 4), {"roi": np.zeros(0, np.float32),
                                     "scales": np.array([1, 1, 2, 2], np.float32)}
            if consts is None else consts, attrs or {}, kw)


@pytest.mark.parametrize("case, error, message", [
    (_resize({"mode": "area"}), UnsupportedModelError,
     "attribute mode='area' is not supported (only nearest, linear, cubic)"),
    (_resize({"mode": "cubic", "exclude_outside": 2}), UnsupportedModelError,
     "attribute exclude_outside=2 is not supported (only 0, 1)"),
    (_resize({"mode": "cubic", "cubic_coeff_a": float("nan")}), UnsupportedModelError,
     "attribute cubic_coeff_a=nan must be a finite float"),
    (("Resize", (1, 3, 4), {"roi": np.zeros(0, np.float32),
                            "scales": np.array([1, 1, 2], np.float32)}, {"mode": "cubic"}, {}),
     UnsupportedModelError, "input shape [1, 3, 4]: mode='cubic' needs (N, C, H, W)"),
    (_resize({"coordinate_transformation_mode": "tf_crop_and_resize",
              "extrapolation_value": 1.0}), ModelFileError,
     "roi [] must hold 8 values, a start and an end for each of the 4 axes"),
    (_resize({"nearest_mode": "nearest"}), UnsupportedModelError,
     "attribute nearest_mode='nearest' is not supported"),
    (_resize({"keep_aspect_ratio_policy": "not_larger"}), UnsupportedModelError,
     "attribute keep_aspect_ratio_policy='not_larger' needs the sizes input, not scales"),
    (_resize(consts={"roi": np.zeros(0, np.float32)}, inputs=["x", "roi", "s"],
             runtime={"s": (TP.FLOAT, [4])}), UnsupportedModelError,
     "scales 's' must be a constant (known at import), but it is computed at run time"),
    (_resize(consts={}, inputs=["x", "", "", "sz"], runtime={"sz": (TP.INT64, [4])}),
     UnsupportedModelError, "sizes 'sz' must be a constant"),
    (_resize(consts={"roi": np.zeros(0, np.float32),
                     "scales": np.array([1, 2, 2, 2], np.float32)}), UnsupportedModelError,
     "scales [1.0, 2.0, 2.0, 2.0] does not keep the batch and channel axes"),
    (_resize(consts={"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
                     "sizes": np.array([2, 3, 8, 8], np.int64)}), UnsupportedModelError,
     "sizes [2, 3, 8, 8] does not keep the batch and channel axes"),
    (_resize(consts={"roi": np.zeros(0, np.float32), "scales": SCALES,
                     "sizes": np.array([1, 3, 8, 8], np.int64)}), UnsupportedModelError,
     "needs exactly one of the scales and sizes inputs"),
    (_resize(consts={"roi": np.zeros(0, np.float32),
                     "scales": np.array([1, 1, 0, 2], np.float32)}), UnsupportedModelError,
     "scales [1.0, 1.0, 0.0, 2.0] must be in (0, 1e9]"),
    (_resize(consts={"roi": np.zeros(0, np.float32),
                     "scales": np.array([1, 1, 0.1, 2], np.float32)}), UnsupportedModelError,
     "maps to resize, which refuses it: op 'resize' v1: attribute 'size' must have every "
     "entry >= 1, or -1 for floor(in * scale) when the call runs, got [0, 8]"),
    (_resize(consts={"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
                     "sizes": np.array([1, 3, 10 ** 6, 10 ** 6], np.int64)}), ModelFileError,
     "its resize output of shape (1, 3, 1000000, 1000000) would have 3000000000000 elements"),
    (("Resize", (1, 3, 2, 2, 2, 2), {"roi": np.zeros(0, np.float32),
                                     "scales": np.ones(6, np.float32)}, {}, {}),
     UnsupportedModelError, "input shape [1, 3, 2, 2, 2, 2]: only (N, C, L), (N, C, H, W) and "
     "(N, C, D, H, W)"),
    (("Resize", (1, 3, 2, 2, 2), {"roi": np.zeros(0, np.float32),
                                  "scales": np.array([1, 1, 2, 2, 2], np.float32)},
      {"mode": "cubic"}, {}),
     UnsupportedModelError, "mode='cubic' needs (N, C, H, W)"),
    (("Resize", (1, 3, 2, 2, 2), {"roi": np.zeros(0, np.float32),
                                  "scales": np.array([1, 1, 0.5, 0.5, 0.5], np.float32)},
      {"mode": "linear", "antialias": 1}, {}),
     UnsupportedModelError, "antialias is supported on 1 or 2 spatial axes"),
    (("Resize", (1, 3, "h", 4), {"roi": np.zeros(0, np.float32),
                                 "scales": np.array([1, 1, 0.7, 2], np.float32)}, {}, {}),
     UnsupportedModelError, "resize: scale 0.699999988079071 on symbolic spatial axis 0: "
     "float32 floor(10 * 0.699999988079071) (onnxruntime's) is 7, not the exact 6"),
    (("DepthToSpace", (1, 8, 2, 2), {}, {"blocksize": 2, "mode": "XYZ"}, {}),
     UnsupportedModelError, "attribute mode='XYZ' is not supported (only DCR, CRD)"),
    (("DepthToSpace", (1, 6, 2, 2), {}, {"blocksize": 2}, {}), UnsupportedModelError,
     "6 channels are not a multiple of blocksize^2 = 4"),
    (("DepthToSpace", (1, 8, 2, 2), {}, {"blocksize": 0}, {}), UnsupportedModelError,
     "attribute blocksize=0 must be an integer >= 1"),
    (("SpaceToDepth", (1, 2, 4, 5), {}, {"blocksize": 2}, {}), UnsupportedModelError,
     "spatial dims 4x5 are not multiples of blocksize 2"),
    (("SpaceToDepth", (1, "c", 4, 4), {}, {"blocksize": 2}, {}), UnsupportedModelError,
     "input shape [1, 'c', 4, 4]: needs (N, C, H, W) with C static"),
    (("SpaceToDepth", (1, 2, "h", 5), {}, {"blocksize": 2}, {}), UnsupportedModelError,
     "spatial dims hx5 are not multiples of blocksize 2"),
    (("SpaceToDepth", (1, 2, 4, 4), {}, {"blocksize": 2, "mode": "XYZ"}, {"opset": 28}),
     UnsupportedModelError, "attribute mode='XYZ' is not supported (only DCR, CRD)"),
])
def test_what_resize_and_depth_to_space_refuse_names_node_and_value(tmp_path, case, error,
                                                                    message):
    op_type, shape, consts, attrs, kw = case
    path = _model(tmp_path, op_type, shape, consts, attrs=attrs, **kw)
    with pytest.raises(error) as info:
        import_onnx(path)
    assert type(info.value) is error
    text = str(info.value)
    assert f"node 'node' ({op_type})" in text and message in text, text
    assert "\n" not in text



@pytest.mark.parametrize("nearest_mode, scale", [("round_prefer_floor", 1.9999998),
                                                 ("round_prefer_ceil", 2.0000002)])
def test_nearest_takes_a_coordinate_a_hair_from_a_half_as_the_half(nearest_mode, scale,
                                                                   tmp_path, signer):
    """Asymmetric coordinates o / scale a hair past a half (1.9999998: 0.5000001, ...) or
    short of one (2.0000002): within 1e-6 of it, which onnxruntime rounds as the half; so do
    both backends (:data:`abi.resampling.NEAREST_HALF`), where an exact rounding of the float32
    coordinates parts from it in 3 places."""
    model = _model(tmp_path, "Resize", (1, 1, 1, 4), {
        "roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 1, scale], np.float32)},
        attrs={"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
               "nearest_mode": nearest_mode})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    feed = {"x": np.array([[[[1, 2, 3, 4]]]], np.float32)}
    want = onnxruntime_outputs(model, feed)["y"].reshape(-1)
    c = np.arange(want.size, dtype=np.float32) / np.float32(scale)  # float32, as onnxruntime
    frac = c - np.floor(c)
    up = frac > 0.5 if nearest_mode == "round_prefer_floor" else frac >= 0.5
    exact = feed["x"].reshape(-1)[np.minimum(np.floor(c) + up, 3).astype(int)]
    assert (want != exact).sum() == 3
    check_on_both_backends(model, loaded, [feed])
