"""Range by a step other than 1 over a run-time dim: ``torch.arange(0, t, 2)`` (the even
positions), ``torch.arange(0, w * 8, 8)`` (FCOS's locations of a stride-8 map under a
run-time image size), ``torch.arange(t - 1, -1, -1)`` (the positions reversed),
``torch.arange(past, past + t)`` (a decoder's positions after its cache) and a Gather
at such a Range along the data's own axis (``x.index_select(1, torch.arange(1, t, 3))``), a
slice by that step. Each matches onnxruntime and torch on both backends at several sizes,
from both of torch's exporters; a Range this cannot lay out is still refused naming the node.

onnxruntime is the reference with its graph optimizations off, as the build's golden cases
run it: onnxruntime 1.32's extended optimizations rewrite the legacy exporter's
``Gather(x, Range(t - 1, -1, -1))`` into a Slice ending at -1, which Slice reads as the
last position, so that session gives an empty result where torch gives the reversed steps."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError

from plugins.onnxruntime_backend import OnnxruntimeBackend

from .conftest import (assert_close, assert_refused, check_against_onnxruntime, export_dynamic,
                       import_and_load, index_refused_on_both_backends, onnx, onnxruntime_outputs,
                       torch)

helper, TP = onnx.helper, onnx.TensorProto


class _Locations(torch.nn.Module):
    """FCOS's ``compute_locations``: each pixel's centre in image coordinates, a float Range
    to the map's run-time width (height) times the stride, by the stride."""

    def forward(self, x):
        h, w = x.shape[-2:]
        xs = torch.arange(0, w * 8, step=8, dtype=torch.float32)
        ys = torch.arange(0, h * 8, step=8, dtype=torch.float32)
        yy, xx = torch.meshgrid(ys, xs, indexing="ij")
        return x + (xx + 2.0 * yy + 4.0)[None, None]


class _EvenPositions(torch.nn.Module):
    def forward(self, x):
        return x[:, ::2] + torch.arange(0, x.shape[1], 2).float()[None, :, None]


class _Countdown(torch.nn.Module):
    """Ranges counting down: by -1 from t - 1 (the positions reversed), by -2 from 2 * t."""

    def forward(self, x):
        t = x.shape[1]
        down = torch.arange(t - 1, -1, -1).float()
        twice = torch.arange(2 * t, 0, -2).float()
        return x * down[None, :, None] + twice[None, :, None]


class _EveryThird(torch.nn.Module):
    def forward(self, x):
        return x.index_select(1, torch.arange(1, x.shape[1], 3)) * 2.0


class _Reversed(torch.nn.Module):
    """The steps reversed, and every other one from the last back."""

    def forward(self, x):
        t = x.shape[1]
        back = x.index_select(1, torch.arange(t - 1, -1, -1))
        return back + x, x.index_select(1, torch.arange(t - 1, -1, -2)) - 1.0


CASES = {
    "locations": (_Locations, (1, 2, 5, 7), {0: "b", 2: "h", 3: "w"},
                  [(1, 1, 1), (2, 3, 4), (1, 6, 9)], ("y",)),
    "even": (_EvenPositions, (2, 6, 3), {0: "b", 1: "t"}, [(1, 1), (2, 5), (3, 8)], ("y",)),
    "countdown": (_Countdown, (2, 6, 3), {0: "b", 1: "t"}, [(1, 1), (2, 5), (3, 8)], ("y",)),
    "every_third": (_EveryThird, (2, 7, 3), {0: "b", 1: "t"}, [(1, 1), (2, 5), (3, 10)],
                    ("y",)),
    "reversed": (_Reversed, (2, 7, 3), {0: "b", 1: "t"}, [(1, 1), (2, 4), (3, 9)],
                 ("y", "z")),
}


def _matches_onnxruntime_and_torch(model, loaded, module, feeds, outputs) -> None:
    """On both backends, each feed's outputs match onnxruntime's (its graph optimizations
    off) and the torch module's."""
    for backend in (None, OnnxruntimeBackend()):
        runs = check_against_onnxruntime(model, loaded, feeds, backend=backend, optimized=False)
        for feed, (got, _) in zip(feeds, runs):
            with torch.no_grad():
                want = module(*(torch.from_numpy(v) for v in feed.values()))
            for name, value in zip(outputs, want if isinstance(want, tuple) else (want,)):
                assert_close(loaded, name, got[name], value.numpy())


def _feed(base: tuple, dims: dict, sizes: tuple, rng) -> dict:
    shape = list(base)
    for axis, size in zip(sorted(dims), sizes):
        shape[axis] = size
    return {"x": rng.standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_range_by_a_step_over_a_run_time_dim_matches_onnxruntime(case, dynamo, tmp_path,
                                                                   signer):
    module, base, dims, sizes, outputs = CASES[case]
    model = export_dynamic(module(), [torch.randn(*base)], tmp_path / f"{case}.onnx",
                           dynamo=dynamo, names=["x"], dims=[dims], outputs=outputs)
    _, loaded = import_and_load(model, tmp_path / f"{case}.pha", signer)
    assert any(type(d) is str for s in loaded.graph.inputs for d in s.shape)
    rng = np.random.default_rng(sum(map(ord, case)))
    _matches_onnxruntime_and_torch(model, loaded, module(),
                                   [_feed(base, dims, s, rng) for s in sizes], outputs)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_gather_at_a_range_over_its_axis_is_a_slice(dynamo, tmp_path, signer):
    """No run-time gather is left: the indices are positions the slice takes."""
    model = export_dynamic(_Reversed(), [torch.randn(2, 7, 3)], tmp_path / "r.onnx",
                           dynamo=dynamo, names=["x"], dims=[{0: "b", 1: "t"}],
                           outputs=("y", "z"))
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    ops = [n.op for n in loaded.graph.nodes]
    assert "gather_elements" not in ops
    steps = sorted(n.attrs["steps"] for n in loaded.graph.nodes
                   if n.op == "slice" and n.attrs["steps"] and n.attrs["axes"] == (1,))
    assert steps == [(-2,), (-1,)], steps


class _PastPositions(torch.nn.Module):
    """A decoder step's learned positions after its cache: torch.arange(past, past + t),
    both ends run-time dims (GPT-2's position ids without a mask)."""

    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Embedding(16, 4)

    def forward(self, cache, x):
        past = cache.shape[1]
        return x + self.pos(torch.arange(past, past + x.shape[1]))[None] + cache.mean(1, True)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_a_range_from_one_run_time_dim_to_another_matches_onnxruntime(dynamo, tmp_path, signer):
    """The start's value is read when the call runs; a position past the table is an
    IndexRangeError naming the lookup on both backends, as onnxruntime refuses it too."""

    module = _PastPositions()
    model = export_dynamic(module, [torch.randn(1, 3, 4), torch.randn(1, 2, 4)],
                           tmp_path / "p.onnx", dynamo=dynamo, names=["cache", "x"],
                           dims=[{1: "past"}, {1: "seq"}],
                           bounds={"past": (1, 15), "seq": (1, 15)})
    _, loaded = import_and_load(model, tmp_path / "p.pha", signer)
    rng = np.random.default_rng(5)
    feeds = [{"cache": rng.standard_normal((1, p, 4)).astype(np.float32),
              "x": rng.standard_normal((1, t, 4)).astype(np.float32)}
             for p, t in ((1, 1), (3, 2), (10, 6))]
    _matches_onnxruntime_and_torch(model, loaded, module, feeds, ("y",))
    past = {"cache": np.zeros((1, 12, 4), np.float32), "x": np.zeros((1, 5, 4), np.float32)}
    with pytest.raises(Exception, match="out of|invalid|idx"):
        onnxruntime_outputs(model, past, optimized=False)
    index_refused_on_both_backends(loaded.graph, past, "16")


def _range_model(path, start, limit, delta, dtype=TP.INT64):
    """y = Range(start, limit, delta) as float, the ends given as ("t", k) (x's run-time dim
    t plus k) or a number."""
    nodes, inits = [helper.make_node("Shape", ["x"], ["shape"], start=1, end=2),
                    helper.make_node("Squeeze", ["shape"], ["t"])], []
    names = []
    for i, end in enumerate((start, limit, delta)):
        name = f"e{i}"
        if isinstance(end, tuple):
            inits.append(helper.make_tensor(f"k{i}", TP.INT64, [], [end[1]]))
            nodes.append(helper.make_node("Add", ["t", f"k{i}"], [f"{name}64"]))
            nodes.append(helper.make_node("Cast", [f"{name}64"], [name], to=dtype))
        else:
            inits.append(helper.make_tensor(name, dtype, [], [end]))
        names.append(name)
    nodes.append(helper.make_node("Range", names, ["r"], name="steps"))
    nodes.append(helper.make_node("Cast", ["r"], ["y"], to=TP.FLOAT))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT,
                                                                         [2, "t"])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, ["n"])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("start, limit, delta, want", [
    (("t", -1), -1, -2, lambda t: np.arange(t - 1, -1, -2)),  # (t+1)//2 values: a slice
    (("t", -1), -1, -1, lambda t: np.arange(t - 1, -1, -1)),
    (1, ("t", 0), 2, lambda t: np.arange(1, t, 2)),
    (0, ("t", 0), 5, lambda t: np.arange(0, t, 5)),
    # (t+6)//2 values over t+5: neither is a dim of the graph; the count is every second
    # entry of t's mask and 3 more
    (0, ("t", 5), 2, lambda t: np.arange(0, t + 5, 2)),
    (("t", 5), -1, -2, lambda t: np.arange(t + 5, -1, -2)),  # the same counting down
])
def test_a_range_by_a_step_matches_onnxruntime_and_numpy(start, limit, delta, want, tmp_path,
                                                         signer):
    model = _range_model(tmp_path / "r.onnx", start, limit, delta)
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer)
    feeds = [{"x": np.zeros((2, t), np.float32)} for t in (1, 2, 5, 8, 9)]
    for backend in (None, OnnxruntimeBackend()):
        runs = check_against_onnxruntime(model, loaded, feeds, backend=backend, optimized=False)
        for feed, (got, _) in zip(feeds, runs):
            np.testing.assert_array_equal(got["y"], want(feed["x"].shape[1]).astype(np.float32))


@pytest.mark.parametrize("start, limit, delta", [
    (0, ("t", 0), 0.5),        # not a whole step
])
def test_a_range_this_cannot_lay_out_is_refused_naming_the_node(start, limit, delta, tmp_path):
    dtype = TP.FLOAT if isinstance(delta, float) else TP.INT64
    model = _range_model(tmp_path / "r.onnx", start, limit, delta, dtype)
    assert_refused(model, UnsupportedModelError, "node 'steps' (Range)",
                   "computed at run time")
