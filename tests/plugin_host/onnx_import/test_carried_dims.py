"""Run-time sizes that no tensor of the graph has as a dim, carried by a mask built from those
that have their parts: a multiple of one dim (``2*t``: the dynamo exporter's linear
``F.interpolate(x, scale_factor=2)`` takes a Range of that count) and a quotient of one dim
plus an int (``(n+2)//2``: the half spectrum ``x[..., : n // 2 + 1]``, Transformer-XL's
relative shift; ``t+1``: a padded tensor's first ``t + 1`` steps). Compared with
onnxruntime on both backends and with torch."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import check_against_onnxruntime, export_dynamic, import_and_load, torch
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
    for backend in BACKENDS.values():
        runs = check_against_onnxruntime(model, loaded, feeds, backend=backend())
        for feed, (got, _) in zip(feeds, runs):
            want = module()(torch.from_numpy(feed["x"])).numpy()
            np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-5)
