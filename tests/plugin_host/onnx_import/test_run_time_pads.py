"""Pads computed from run-time dims: Swin's pad of a map to a multiple of its window
(``F.pad(x, (0, 0, 0, (ws - h % ws) % ws))``), which both exporters write as Mod of the
input's Shape, evaluated at import as shape arithmetic, and a Pad of those pads, a gather of
the padded positions. Compared with onnxruntime on both backends and with torch, at sizes
the window divides and does not, 0 included where torch runs it; Mod of run-time dims read
as a tensor against onnxruntime; what is not mapped is refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import UnsupportedModelError

from .conftest import (assert_refused, check_against_onnxruntime_and_torch, check_on_both_backends,
                       export_dynamic, import_and_load, index_refused_on_both_backends, onnx,
                       onnxruntime_outputs, torch)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(71)
F = torch.nn.functional


def _to_multiple(size, ws: int):
    return (ws - size % ws) % ws


class _PadTime(torch.nn.Module):
    """(b, t, c) padded along t to a multiple of 4 with zeros, then scaled."""

    def forward(self, x):
        return F.pad(x, (0, 0, 0, _to_multiple(x.shape[1], 4))) * 2


class _SwinWindows(torch.nn.Module):
    """Swin's window partition of (b, h, w, c): padded to multiples of the window (3), then
    viewed as windows and summed within each."""

    def forward(self, x):
        b, h, w, c = x.shape
        x = F.pad(x, (0, 0, 0, _to_multiple(w, 3), 0, _to_multiple(h, 3)))
        hp, wp = x.shape[1], x.shape[2]
        windows = x.view(b, hp // 3, 3, wp // 3, 3, c).permute(0, 1, 3, 2, 4, 5)
        return windows.sum((3, 4)) + 1


class _Replicate(torch.nn.Module):
    """(b, c, t) padded at the end to a multiple of 5 by repeating the last step."""

    def forward(self, x):
        return F.pad(x, (0, _to_multiple(x.shape[2], 5)), mode="replicate")


class _Before(torch.nn.Module):
    """(b, c, t) padded in front with 1.5 to a multiple of 4."""

    def forward(self, x):
        return F.pad(x, (_to_multiple(x.shape[2], 4), 0), value=1.5)


class _BothEnds(torch.nn.Module):
    """(b, c, t) padded with -2 by one step in front and at the end to a multiple of 4, and
    by two fixed steps on both ends of the channels."""

    value = -2.0

    def forward(self, x):
        return F.pad(x, (1, _to_multiple(x.shape[2] + 1, 4), 2, 2), value=self.value)


class _BothEndsMinusInf(_BothEnds):
    """As :class:`_BothEnds` by -inf, which the artifact's manifest cannot hold as the pad's
    value: a pad by 0 and a where of -inf."""

    value = float("-inf")


class _UNet(torch.nn.Module):
    """A two-level U-Net's way down (max pooling by 2) and up (a stride-2 ConvTranspose), each
    upsampled map padded to its skip connection's size, as U-Net implementations write it:
    pads of half the difference, which is the skip's size modulo 2 (0 or 1)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.inner = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.deep = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.up_deep = torch.nn.ConvTranspose2d(4, 4, 2, stride=2)
        self.up = torch.nn.ConvTranspose2d(8, 3, 2, stride=2)
        self.out = torch.nn.Conv2d(6, 2, 1)

    @staticmethod
    def _to_skip(up, skip):
        dy, dx = skip.size(2) - up.size(2), skip.size(3) - up.size(3)
        return torch.cat([skip, F.pad(up, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])], 1)

    def forward(self, x):
        inner = torch.relu(self.inner(F.max_pool2d(x, 2)))
        deep = torch.relu(self.deep(F.max_pool2d(inner, 2)))
        inner = self._to_skip(self.up_deep(deep), inner)
        return self.out(self._to_skip(self.up(inner), x))


#: name: (module, example shape, run-time dims, exporters, feed shapes)
CASES = {
    "time": (_PadTime, (2, 6, 3), {1: "t"}, [False, True],
             [(2, 1, 3), (2, 4, 3), (2, 5, 3), (2, 8, 3), (2, 11, 3)]),
    "swin-windows": (_SwinWindows, (2, 5, 7, 4), {1: "h", 2: "w"}, [False, True],
                     [(2, 1, 2, 4), (2, 3, 3, 4), (2, 7, 9, 4), (2, 4, 10, 4)]),
    "replicate": (_Replicate, (2, 3, 7), {2: "t"}, [False, True],
                  [(2, 3, 1), (2, 3, 5), (2, 3, 9)]),
    "before": (_Before, (2, 3, 7), {2: "t"}, [False, True],
               [(2, 3, 1), (2, 3, 4), (2, 3, 6)]),
    "both-ends": (_BothEnds, (2, 3, 7), {2: "t"}, [False, True],
                  [(2, 3, 1), (2, 3, 3), (2, 3, 6), (2, 3, 10)]),
    "both-ends-minus-inf": (_BothEndsMinusInf, (2, 3, 7), {2: "t"}, [False, True],
                            [(2, 3, 1), (2, 3, 6)]),
    "u-net": (_UNet, (2, 3, 9, 11), {0: "batch", 2: "h", 3: "w"}, [False, True],
              [(1, 3, 4, 5), (1, 3, 9, 11), (2, 3, 16, 13), (1, 3, 7, 6), (1, 3, 15, 14)]),
}


@pytest.mark.parametrize("case, dynamo", [(c, d) for c, v in CASES.items() for d in v[3]])
def test_pads_to_a_multiple_of_a_window_match_onnxruntime_and_torch(case, dynamo, tmp_path,
                                                                     signer):
    module, example, run_time, _, shapes = CASES[case]
    model = export_dynamic(module(), [torch.randn(*example)], tmp_path / "m.onnx",
                           dynamo=dynamo, names=["x"], dims=[run_time],
                           bounds={n: (2, 64) for n in run_time.values()})
    assert "Pad" in {n.op_type for n in onnx.load(model).graph.node}
    golden = {n: [5, 8] for n in run_time.values()}
    _, loaded = import_and_load(model, tmp_path / "m.pha", signer, golden_dims=golden)
    assert "gather_elements" in {n.op for n in loaded.graph.nodes}  # of the positions
    feeds = [{"x": RNG.standard_normal(s).astype(np.float32)} for s in shapes]
    check_against_onnxruntime_and_torch(model, loaded, feeds, module(), 1e-5)


class _Reflect(torch.nn.Module):
    """(b, c, t) padded at the end to a multiple of 4 by reflection, and by 1 in front."""

    def forward(self, x):
        return F.pad(x, (1, _to_multiple(x.shape[2] + 1, 4)), mode="reflect")


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
def test_run_time_pads_in_reflect_mode_match_onnxruntime_and_torch(dynamo, tmp_path, signer):
    """Mirrored positions at both ends, at lengths whose pads the dim holds (the dim less one
    at most); a shorter one is an IndexRangeError naming the node on both backends, as
    onnxruntime refuses it."""
    model = export_dynamic(_Reflect(), [torch.randn(1, 2, 6)], tmp_path / "r.onnx",
                           dynamo=dynamo, names=["x"], dims=[{2: "t"}], bounds={"t": (4, 64)})
    _, loaded = import_and_load(model, tmp_path / "r.pha", signer, golden_dims={"t": [5, 8]})
    feeds = [{"x": RNG.standard_normal((1, 2, t)).astype(np.float32)} for t in (4, 5, 7, 11)]
    check_against_onnxruntime_and_torch(model, loaded, feeds, _Reflect(), 0)
    short = {"x": np.ones((1, 2, 1), np.float32)}  # pads 1 and 2 of a dim of 1
    with pytest.raises(Exception, match="requires axis length >= 2"):
        onnxruntime_outputs(model, short)
    index_refused_on_both_backends(loaded.graph, short, r"outside \[0, 1\)")


def _pad_by_the_length(tmp_path, mode: str, front: bool) -> str:
    """x (t,) padded by t in front (``front``) or at the end, in ``mode``."""
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Concat", ["shape", "zero"] if front else ["zero", "shape"],
                              ["pads"], axis=0), node]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["t"])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, ["u"])],
                              [helper.make_tensor("zero", TP.INT64, [1], [0])])
    path = tmp_path / f"{mode}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), path)
    return path


@pytest.mark.parametrize("front", [True, False], ids=["before", "after"])
def test_a_reflect_pad_as_long_as_the_dim_is_refused_when_the_call_runs(front, tmp_path,
                                                                       signer):
    """Pads of t in reflect mode exceed the dim less one at every length but 0: onnxruntime
    refuses the call, and so does each backend (an IndexRangeError naming the node), where
    mirroring once more would give a value."""
    path = _pad_by_the_length(tmp_path, "reflect", front)
    _, loaded = import_and_load(path, tmp_path / "r.pha", signer, golden_dims={"t": [0]})
    feed = {"x": np.arange(4, dtype=np.float32)}
    with pytest.raises(Exception, match="exceeds maximum allowed"):
        onnxruntime_outputs(path, feed)
    index_refused_on_both_backends(loaded.graph, feed, r"outside \[0, 4\)")


def test_run_time_pads_in_wrap_mode_are_refused_naming_the_pad(tmp_path):
    assert_refused(_pad_by_the_length(tmp_path, "wrap", False), UnsupportedModelError,
                   "(Pad)", "hold run-time dims: supported with mode 'constant', 'edge' or "
                   "'reflect', not 'wrap'")


def _mod_model(a_of: str, k: int, b: int, fmod: int) -> onnx.ModelProto:
    """y = x + Cast(Mod(a, b)) where a is t + k (``a_of`` "Add"), k - t ("Sub") or t * k
    ("Mul"), t the run-time length of x (t,)."""
    nodes = [helper.make_node("Shape", ["x"], ["t"]),
             helper.make_node(a_of, ["k", "t"] if a_of == "Sub" else ["t", "k"], ["a"]),
             helper.make_node("Mod", ["a", "b"], ["m"], fmod=fmod),
             helper.make_node("Cast", ["m"], ["f"], to=TP.FLOAT),
             helper.make_node("Add", ["x", "f"], ["y"])]
    inits = [helper.make_tensor("k", TP.INT64, [1], [k]),
             helper.make_tensor("b", TP.INT64, [], [b])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, ["t"])],
                              [helper.make_tensor_value_info("y", TP.FLOAT, ["t"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("a_of, k, b, fmod, at_import", [
    ("Add", 0, 4, 0, True), ("Sub", 4, 4, 0, True), ("Sub", 2, 3, 0, True),
    ("Add", 5, 3, 0, True), ("Add", 5, 3, 1, True), ("Sub", 2, 3, 1, False),
    ("Mul", 2, 4, 0, False), ("Sub", -7, 3, 0, True)],
    ids=["t%4", "(4-t)%4", "(2-t)%3", "(t+5)%3", "fmod(t+5,3)", "fmod(2-t,3)", "2t%4",
         "(-7-t)%3"])
def test_mod_of_a_run_time_dim_matches_onnxruntime(a_of, k, b, fmod, at_import, tmp_path,
                                                   signer):
    """Mod of the length by an int, read as a tensor (cast to float, added to x): evaluated at
    import where exact (no ``mod`` in the graph), else computed when the call runs; at
    lengths 0 to 9."""
    path = tmp_path / "m.onnx"
    onnx.save(_mod_model(a_of, k, b, fmod), path)
    _, loaded = import_and_load(path, tmp_path / "m.pha", signer, golden_dims={"t": [3, 8]})
    assert ("mod" in {n.op for n in loaded.graph.nodes}) is not at_import
    feeds = [{"x": RNG.standard_normal(t).astype(np.float32)} for t in range(10)]
    check_on_both_backends(path, loaded, feeds)


@pytest.mark.parametrize("value", [float("-inf"), float("inf"), float("nan")])
def test_fixed_pads_by_a_value_that_is_not_finite_match_onnxruntime(value, tmp_path, signer):
    """A constant Pad by inf, -inf or nan (with a crop on another axis): a pad by 0, and a
    where of the value over the padding; x's own nan, inf and -0.0 stay."""
    helper, tp = onnx.helper, onnx.TensorProto
    node = helper.make_node("Pad", ["x", "pads", "value"], ["y"], name="pad")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", tp.FLOAT,
                                                                          ["n", 3, 5])],
                              [helper.make_tensor_value_info("y", tp.FLOAT, ["n", 5, 4])],
                              [helper.make_tensor("pads", tp.INT64, [6], [0, 1, -1, 0, 1, 0]),
                               helper.make_tensor("value", tp.FLOAT, [], [value])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]),
              tmp_path / "p.onnx")
    _, loaded = import_and_load(tmp_path / "p.onnx", tmp_path / "p.pha", signer)
    assert [n.op for n in loaded.graph.nodes][-1] == "where"
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    x[0, 1] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    check_on_both_backends(tmp_path / "p.onnx", loaded, [{"x": x}, {"x": x[:1]}])
