"""TopK whose k is computed from a run-time dim (``x.topk(x.shape[1] // 2, 1)``, the better
half of a run-time number of candidates): the whole axis sorted and each output's first k
entries, k read from a mask when the call runs. Against onnxruntime on both backends at
lengths from 1 (k = 0) up, ties and nan included; a k that may exceed the axis is refused
naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError

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
