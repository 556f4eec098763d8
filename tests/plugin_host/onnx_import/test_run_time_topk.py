"""TopK whose k is computed from a run-time dim (``x.topk(x.shape[1] // 2, 1)``, the better
half of a run-time number of candidates): the whole axis sorted and each output's first k
entries, k read from a mask when the call runs; k = min(5, t) too. Against onnxruntime on
both backends at lengths from 1 (k = 0) up, ties and nan included; a k that may exceed the
axis is refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError
from plugin_host.executor import Executor
from plugins.numpy_backend import NumpyBackend

from .conftest import (assert_refused, check_on_both_backends, export_dynamic, import_and_load,
                       torch)

RNG = np.random.default_rng(41)


class _Half(torch.nn.Module):
    """The values and indices of the k largest (or smallest) along axis 1 of (b, t, c)."""

    def __init__(self, k, largest: bool = True):
        super().__init__()
        self.k, self.largest = k, largest

    def forward(self, x):
        values, indices = x.topk(self.k(x.shape[1]), 1, largest=self.largest)
        return values * 2, indices


#: name: (k of the length t, largest)
CASES = {
    "half": (lambda t: t // 2, True),
    "half-smallest": (lambda t: t // 2, False),
    "half-up": (lambda t: (t + 1) // 2, True),
    "all-but-a-quarter": (lambda t: t - t // 4, True),
}


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
@pytest.mark.parametrize("case", list(CASES))
def test_k_from_a_run_time_length_matches_onnxruntime(case, dynamo, tmp_path, signer):
    k, largest = CASES[case]
    model = export_dynamic(_Half(k, largest), [torch.randn(2, 8, 3)], tmp_path / "k.onnx",
                           dynamo=dynamo, names=["x"], dims=[{1: "t"}], outputs=("y", "i"),
                           bounds={"t": (2, 64)})
    _, loaded = import_and_load(model, tmp_path / "k.pha", signer, golden_dims={"t": [5, 8]})
    assert [n.attrs["k"] for n in loaded.graph.nodes if n.op == "topk"] == [-1]
    feeds = []
    for t in (1, 2, 3, 4, 7, 12):
        x = RNG.standard_normal((2, t, 3)).astype(np.float32)
        x[1] = np.round(x[1])  # ties: the lower index first, as onnxruntime
        feeds.append({"x": x})
    feeds[-1]["x"][0, 3, 1] = np.nan
    check_on_both_backends(model, loaded, feeds)


class _AtMost(torch.nn.Module):
    """The 5 largest of a run-time length, or all of them where there are fewer: k is
    ``min(5, t)``, a Min of the length and an int (a detector's queries, ``topk(scores,
    min(300, n))``)."""

    def forward(self, x):
        values, indices = x.topk(min(5, x.shape[1]), 1)
        return values * 2, indices


def test_k_at_most_an_int_matches_onnxruntime_and_torch(tmp_path, signer):
    """The dynamo exporter writes the Min: k is the ABI's dim of the length's first 5
    entries, read from its mask when the call runs; against onnxruntime on both backends and
    torch at lengths 1 to 12 (below, at and above 5)."""
    model = export_dynamic(_AtMost(), [torch.randn(2, 8, 3)], tmp_path / "m.onnx",
                           dynamo=True, names=["x"], dims=[{1: "t"}], outputs=("y", "i"),
                           bounds={"t": (1, 64)})
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims={"t": [3, 8]})
    assert [n.attrs["k"] for n in loaded.graph.nodes if n.op == "topk"] == [-1]
    feeds = [{"x": RNG.standard_normal((2, t, 3)).astype(np.float32)}
             for t in (1, 2, 4, 5, 6, 12)]
    check_on_both_backends(model, loaded, feeds)
    for feed in feeds:
        values, indices = _AtMost()(torch.from_numpy(feed["x"]))
        got = Executor(loaded.graph, NumpyBackend()).run(dict(feed))
        np.testing.assert_array_equal(got["y"], values.numpy())
        np.testing.assert_array_equal(got["i"], indices.numpy())


class _Queries(torch.nn.Module):
    """A detector's choice of its 20 best anchors over two levels of a run-time image size
    (RT-DETR's ``topk(scores, min(anchors, 300))``): k = min(20, h*w + (h//2)*(w//2))."""

    def forward(self, x):
        scores = torch.cat([x.flatten(2), torch.nn.functional.max_pool2d(x, 2).flatten(2)],
                           2).amax(1)
        return scores.topk(min(20, scores.shape[1]), 1)


def test_a_detectors_queries_over_a_run_time_image_match_onnxruntime(tmp_path, signer):
    """Fewer anchors than 20 (a 2 x 2 image), as many (4 x 4) and more. A level's pooled
    anchor ties with the other level's largest: torch orders ties its own way, so its
    indices are compared by the scores they pick."""
    model = export_dynamic(_Queries(), [torch.randn(1, 3, 8, 8)], tmp_path / "q.onnx",
                           dynamo=True, names=["x"], dims=[{2: "h", 3: "w"}],
                           outputs=("y", "i"))
    _, loaded = import_and_load(model, tmp_path / "q.pha", signer,
                                golden_dims={"h": [4, 8], "w": [4, 6]})
    feeds = [{"x": RNG.standard_normal((1, 3, h, w)).astype(np.float32)}
             for h, w in ((2, 2), (4, 4), (8, 6), (7, 9))]
    check_on_both_backends(model, loaded, feeds)
    for feed in feeds:
        x = torch.from_numpy(feed["x"])
        values, _ = _Queries()(x)
        got = Executor(loaded.graph, NumpyBackend()).run(dict(feed))
        np.testing.assert_array_equal(got["y"], values.numpy())
        scores = torch.cat([x.flatten(2), torch.nn.functional.max_pool2d(x, 2).flatten(2)],
                           2).amax(1).numpy()
        np.testing.assert_array_equal(np.take_along_axis(scores, got["i"], 1), got["y"])


class _ByOther(torch.nn.Module):
    """k the length of another input, which may exceed x's."""

    def forward(self, x, other):
        return x.topk(other.shape[0], 1)[0]


def test_a_k_that_may_exceed_the_axis_is_refused_naming_the_node(tmp_path):
    model = export_dynamic(_ByOther(), [torch.randn(2, 8, 3), torch.randn(3)],
                           tmp_path / "o.onnx", dynamo=False, names=["x", "other"],
                           dims=[{1: "t"}, {0: "n"}])
    assert_refused(model, UnsupportedModelError, "(TopK)", "must be a constant (known at "
                   "import), but it holds run-time dims: ['n']")
