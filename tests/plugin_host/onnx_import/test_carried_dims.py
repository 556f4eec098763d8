"""Run-time sizes that no tensor of the graph has as a dim, carried by a mask built from those
that have their parts: a multiple of one dim (``2*t``: the dynamo exporter's linear
``F.interpolate(x, scale_factor=2)`` takes a Range of that count) and a quotient of one dim
plus an int (``(n+2)//2``: the half spectrum ``x[..., : n // 2 + 1]``, Transformer-XL's
relative shift; ``t+1``: a padded tensor's first ``t + 1`` steps; ``h//6+1``: the windows
of PSPNet's adaptive pooling). Compared with onnxruntime on both backends and with torch."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError

from .conftest import (assert_refused, check_against_onnxruntime,
                       check_against_onnxruntime_and_torch, export_dynamic, import_and_load,
                       index_refused_on_both_backends, onnx, onnxruntime_outputs, torch)
from .test_range_steps import _range_model
from .test_scatter_runtime import BACKENDS

RNG = np.random.default_rng(61)
F = torch.nn.functional


class _Upsample(torch.nn.Module):
    def forward(self, x):
        return F.interpolate(x, scale_factor=2.0, mode="linear", align_corners=False)


class _HalfSpectrum(torch.nn.Module):
    def forward(self, x):
        return x[:, :, : x.shape[2] // 2 + 1] * 2


class _PadAndCut(torch.nn.Module):
    """Three zero steps appended, then the first ``t + 1`` kept: ``t+3`` is the padded
    tensor's dim, ``t+1`` no tensor's."""

    def forward(self, x):
        return F.pad(x, (0, 3))[:, :, : x.shape[2] + 1] + 1


class _RelShift(torch.nn.Module):
    """Transformer-XL's relative shift of scores (b, h, t, n): a zero column, a view as
    (n + 1, t), the first row dropped, and the first n // 2 + 1 columns kept."""

    def forward(self, x):
        b, h, t, n = x.shape
        padded = torch.cat([torch.zeros(b, h, t, 1), x], dim=-1).view(b, h, n + 1, t)
        return padded[:, :, 1:].reshape(b, h, t, n)[:, :, :, : n // 2 + 1]


#: name: (module, example input, its run-time dims, exporters, golden dims, feed shapes)
CASES = {
    "upsample-linear": (_Upsample, (2, 3, 7), {2: "t"}, [True], {"t": [4, 9]},
                        [(2, 3, 1), (2, 3, 5), (2, 3, 40)]),
    "half-spectrum": (_HalfSpectrum, (2, 3, 8), {2: "n"}, [False, True], {"n": [4, 9]},
                      [(2, 3, 2), (2, 3, 7), (2, 3, 33)]),
    "pad-and-cut": (_PadAndCut, (2, 3, 6), {2: "t"}, [False, True], {"t": [4, 9]},
                    [(2, 3, 1), (2, 3, 5), (2, 3, 17)]),
    "relative-shift": (_RelShift, (2, 2, 5, 9), {2: "t", 3: "n"}, [False, True],
                       {"t": [4, 6], "n": [7, 11]}, [(2, 2, 2, 3), (2, 2, 6, 11),
                                                      (2, 2, 9, 4)]),
}


@pytest.mark.parametrize("case, dynamo", [(c, d) for c, v in CASES.items() for d in v[3]])
def test_sizes_no_tensor_has_match_onnxruntime_and_torch(case, dynamo, tmp_path, signer):
    module, example, dims, _, golden, shapes = CASES[case]
    model = export_dynamic(module(), [torch.randn(*example)], tmp_path / "m.onnx",
                           dynamo=dynamo, names=["x"], dims=[dims],
                           bounds={n: (2, 64) for n in dims.values()})
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims=golden)
    feeds = [{"x": RNG.standard_normal(s).astype(np.float32)} for s in shapes]
    check_against_onnxruntime_and_torch(model, loaded, feeds, module(), 1e-5)


def _range_to_a_multiple(path, factor: int):
    """y = Range(0, t * factor, 1) as float, t the run-time dim of x (2, t)."""
    helper, tp = onnx.helper, onnx.TensorProto
    nodes = [helper.make_node("Shape", ["x"], ["shape"], start=1, end=2),
             helper.make_node("Squeeze", ["shape"], ["t"]),
             helper.make_node("Mul", ["t", "k"], ["limit"]),
             helper.make_node("Range", ["zero", "limit", "one"], ["r"], name="steps"),
             helper.make_node("Cast", ["r"], ["y"], to=tp.FLOAT)]
    inits = [helper.make_tensor(n, tp.INT64, [], [v])
             for n, v in (("k", factor), ("zero", 0), ("one", 1))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", tp.FLOAT,
                                                                         [2, "t"])],
                              [helper.make_tensor_value_info("y", tp.FLOAT, ["n"])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_range_to_a_multiple_of_a_dim_matches_onnxruntime(tmp_path, signer):
    model = _range_to_a_multiple(tmp_path / "r.onnx", 3)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    feeds = [{"x": np.zeros((2, t), np.float32)} for t in (0, 1, 7)]
    for backend in BACKENDS.values():
        runs = check_against_onnxruntime(model, loaded, feeds, backend=backend())
        for feed, (got, _) in zip(feeds, runs):
            np.testing.assert_array_equal(got["y"], np.arange(3 * feed["x"].shape[1]))


@pytest.mark.parametrize("model", [
    # (t + 2**62)//2: every second entry of t's mask and 2**61 more
    lambda path: _range_model(path, 0, ("t", 2 ** 62), 2),
    lambda path: _range_to_a_multiple(path, 2 ** 40),  # t * 2**40: a factor of 2**40
], ids=["int-part", "factor"])
def test_a_size_whose_mask_is_past_the_tensor_cap_is_refused(model, tmp_path):
    """A hostile file's constant (found by the fuzz) makes the mask that would carry the size
    larger than the tensor cap: refused naming the node, nothing allocated."""
    assert_refused(model(tmp_path / "r.onnx"), ModelFileError, "node 'steps' (Range)",
                   "above the cap of")


class _Pyramid(torch.nn.Module):
    """PSPNet's pyramid pooling: the map and its adaptive average pools to 1, 2, 3 and 6 bins,
    each upsampled back to the map's size, side by side. Over a run-time height and width the
    dynamo exporter writes each pool as windows gathered at ``bin * h // bins`` plus
    ``arange(h // bins + 1)``: a Range to a quotient of the dim plus one, which a mask carries
    (the legacy exporter cannot export adaptive pooling over a run-time size)."""

    def forward(self, x):
        h, w = x.shape[-2:]
        return torch.cat([x] + [F.interpolate(F.adaptive_avg_pool2d(x, bins), size=(h, w),
                                              mode="bilinear", align_corners=False)
                                for bins in (1, 2, 3, 6)], 1)


@pytest.fixture(scope="module")
def pyramid(tmp_path_factory, signer):
    """The pyramid exported at 13 x 19: the exporter's windows hold where the height and width
    leave the remainders 13 and 19 leave by every bin count, 1 (torch.export's guards)."""
    path = tmp_path_factory.mktemp("pyramid")
    model = export_dynamic(_Pyramid(), [torch.randn(1, 3, 13, 19)], path / "m.onnx",
                           dynamo=True, names=["x"], dims=[{0: "b", 2: "h", 3: "w"}])
    _, loaded = import_and_load(model, path / "m.pha", signer,
                                golden_dims={"b": [1, 2], "h": [13, 25], "w": [19, 31]})
    return model, loaded


def test_pyramid_pooling_over_a_run_time_map_matches_onnxruntime_and_torch(pyramid):
    model, loaded = pyramid
    feeds = [{"x": RNG.standard_normal(s).astype(np.float32)}
             for s in ((1, 3, 1, 1), (2, 3, 7, 13), (1, 3, 25, 7), (1, 3, 31, 37))]
    check_against_onnxruntime_and_torch(model, loaded, feeds, _Pyramid(), 1e-5)


@pytest.mark.parametrize("shape", [(1, 3, 12, 18), (1, 3, 7, 8), (1, 3, 2, 2)])
def test_pyramid_pooling_past_the_exporters_windows_is_refused_as_by_onnxruntime(pyramid,
                                                                                 shape):
    """At other remainders the exported windows reach past the map: onnxruntime refuses the
    call (its GatherND's index), and so does the artifact on either backend, naming the
    node."""

    model, loaded = pyramid
    feed = {"x": RNG.standard_normal(shape).astype(np.float32)}
    with pytest.raises(Exception, match="GatherND.*invalid index"):
        onnxruntime_outputs(model, feed)
    index_refused_on_both_backends(loaded.graph, feed, r"node 'node_GatherND_\d+/check\d'.* "
                                                       r"outside \[0, \d+\)")
