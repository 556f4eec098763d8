"""Einsum (torch.einsum) imported as sum, transpose, reshape and matmul (or mul where nothing
is contracted), a label repeated within an operand as a gather of its diagonal, compared with
onnxruntime; what the decomposition cannot take is refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import ModelFileError, UnsupportedModelError
from plugin_host.onnx_import import import_onnx

from .conftest import (EXPORTERS, assert_refused, check_against_onnxruntime,
                       check_on_both_backends, export, import_and_load, onnx, torch)

helper, TP = onnx.helper, onnx.TensorProto
RNG = np.random.default_rng(11)
BIG = np.finfo(np.float32).max


class _Einsum(torch.nn.Module):
    def __init__(self, equation: str):
        super().__init__()
        self.equation = equation

    def forward(self, *operands):
        return torch.einsum(self.equation, *operands)


def _feeds(shapes: list, names: list) -> list[dict]:
    """Random inputs, then one input each with one float32 extreme (or inf, or -0.0) in the
    first operand: one per feed, so that no sum meets two of them in an order-dependent
    way."""
    def draw():
        return {n: np.asarray(RNG.standard_normal(s) * 2, np.float32)
                for n, s in zip(names, shapes)}

    feeds = [draw() for _ in range(2)]
    for v in [BIG, -BIG, 1e-45, -0.0, 1e30, np.inf]:
        feed = draw()
        feed[names[0]].reshape(-1)[RNG.integers(feed[names[0]].size)] = v
        feeds.append(feed)
    return feeds


#: (equation, operand shapes, glue ops the import gives): what torch's exporters write as
#: Einsum (both keep the node; neither lowers these to MatMul)
TORCH_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)], ["matmul"]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], ["matmul"]),
    ("i,j->ij", [(3,), (4,)], ["reshape", "mul"]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)], ["transpose", "matmul"]),
    ("ij->ji", [(3, 4)], ["transpose"]),
    ("ij->i", [(3, 4)], ["sum"]),
    ("bij,jk->bki", [(2, 3, 4), (4, 5)], ["matmul", "transpose"]),
    ("i,i->", [(7,)] * 2, ["reshape", "reshape", "matmul", "reshape"]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)], ["matmul"]),
    ("b...d,bd->b...", [(2, 3, 4, 5), (2, 5)], ["reshape", "reshape", "matmul", "reshape"]),
    ("ii->i", [(3, 3)], ["flatten", "gather"]),
    ("bii->bi", [(2, 4, 4)], ["flatten", "gather"]),
]


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
@pytest.mark.parametrize("equation, shapes, ops", TORCH_CASES,
                         ids=[c[0] for c in TORCH_CASES])
def test_torch_einsum_matches_onnxruntime(dynamo, fold, optimize, equation, shapes, ops,
                                          tmp_path, signer):
    names = [f"x{i}" for i in range(len(shapes))]
    model = export(_Einsum(equation), [torch.randn(*s) for s in shapes], tmp_path / "e.onnx",
                   dynamo=dynamo, fold=fold, optimize=optimize, input_names=names,
                   output_names=["y"])
    assert [n.op_type for n in onnx.load(model).graph.node] == ["Einsum"]
    _, loaded = import_and_load(model, tmp_path / "e.pha", signer)
    assert [n.op for n in loaded.graph.nodes] == ops
    want = np.einsum(equation, *[np.zeros(s) for s in shapes]).shape
    assert loaded.graph.outputs[0].shape == want
    check_against_onnxruntime(model, loaded, _feeds(shapes, names))


class _Weighted(torch.nn.Module):
    """An einsum against a constant weight, as in attention projections."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 6, 5))

    def forward(self, x):
        return torch.einsum("bsd,dhk->bshk", x, self.w)


@pytest.mark.parametrize("dynamo, fold, optimize", EXPORTERS)
def test_einsum_with_a_constant_weight_is_rearranged_at_import(dynamo, fold, optimize, tmp_path,
                                                                signer):
    model = export(_Weighted(), [torch.randn(2, 3, 4)], tmp_path / "w.onnx", dynamo=dynamo,
                   fold=fold, optimize=optimize, input_names=["x"], output_names=["y"])
    _, loaded = import_and_load(model, tmp_path / "w.pha", signer)
    # the weight is reshaped to (4, 30) at import; x (2, 3, 4) broadcasts over matmul as it is
    assert [n.op for n in loaded.graph.nodes] == ["matmul", "reshape"]
    assert loaded.graph.outputs[0].shape == (2, 3, 6, 5)
    check_against_onnxruntime(model, loaded, _feeds([(2, 3, 4)], ["x"]))


# --- ONNX models written with onnx.helper: implicit outputs, run-time dims, refusals -----------


def _model(tmp_path, equation: str, shapes: list, dtype=TP.FLOAT):
    """A one-node Einsum model named ``node`` over inputs x0, x1, ...; the output declares
    the dims its labels have (a symbolic dim by its name), as torch's exporters do."""
    names = [f"x{i}" for i in range(len(shapes))]
    terms, arrow, out = equation.partition("->")
    sizes = {c: d for t, s in zip(terms.split(","), shapes) for c, d in zip(t, s)}
    if not arrow:  # implicit: the labels used once, sorted
        out = "".join(sorted(c for c in sizes if terms.count(c) == 1))
    if "..." in equation:  # the output's shape as numpy gives it, under labels of its own
        try:
            want = np.einsum(equation, *[np.zeros(s) for s in shapes]).shape
        except ValueError:  # one numpy refuses: any shape will do
            want = ()
        out = "".join(chr(65 + i) for i in range(len(want)))
        sizes = dict(zip(out, want))
    node = helper.make_node("Einsum", names, ["y"], name="node", equation=equation)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, dtype, list(s))
                      for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", dtype, [sizes.get(c) for c in out])])
    path = tmp_path / "einsum.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    return path, names


HELPER_CASES = [
    ("ij,jk", [(3, 4), (4, 5)]),                    # implicit: ik
    ("ba,ca", [(3, 4), (5, 4)]),                    # implicit: bc
    ("ij", [(3, 4)]),                               # implicit: the identity
    ("ji", [(3, 4)]),                               # implicit: a transpose (ij)
    ("ij,ij->ij", [(3, 4), (3, 4)]),                # element-wise
    ("bi,bj->bij", [(2, 3), (2, 4)]),               # batched outer product
    ("bi,bj->bji", [(2, 3), (2, 4)]),
    ("bij,bkl->bikjl", [(2, 3, 4), (2, 5, 6)]),
    ("abcd,cdbe->ae", [(2, 3, 4, 5), (4, 5, 3, 6)]),  # two labels merged into one K
    ("ij,kj->", [(3, 4), (5, 4)]),                  # i and k summed first, then a dot
    ("xyz,zy->x", [(2, 3, 4), (4, 3)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("ijk->j", [(2, 3, 4)]),
    ("ij,->ij", [(3, 4), ()]),                      # a scalar operand
    ("...ij,jk", [(2, 3, 3, 4), (4, 5)]),           # implicit: the ellipsis first
    ("i...->...", [(3, 2, 4)]),
    ("...,...->...", [(2, 3), (2, 3)]),
    ("a...c,...c->...a", [(2, 3, 4, 5), (3, 4, 5)]),
    ("...ij->...", [(3, 4)]),                       # an ellipsis of no dims
]


@pytest.mark.parametrize("equation, shapes", HELPER_CASES, ids=[c[0] for c in HELPER_CASES])
def test_equations_torch_does_not_write_match_onnxruntime(equation, shapes, tmp_path, signer):
    model, names = _model(tmp_path, equation, shapes)
    _, loaded = import_and_load(model, tmp_path / "e.pha", signer)
    assert loaded.graph.outputs[0].shape == np.einsum(equation, *[np.zeros(s) for s in
                                                                  shapes]).shape
    assert {n.op for n in loaded.graph.nodes} <= {"sum", "transpose", "reshape", "matmul", "mul",
                                                  "identity"}
    check_against_onnxruntime(model, loaded, _feeds(shapes, names))


def test_an_implicit_output_sorts_upper_case_first_as_numpy(tmp_path):
    """onnxruntime 1.32 fails to run an implicit output with an upper-case label; the import
    gives numpy's order (ASCII: upper case first)."""
    model, _ = _model(tmp_path, "jB,ja", [(3, 4), (3, 5)])
    imported = import_onnx(model)
    assert imported.graph.outputs[0].shape == np.einsum("jB,ja", np.zeros((3, 4)),
                                                        np.zeros((3, 5))).shape == (4, 5)


def test_integer_einsum_matches_onnxruntime(tmp_path, signer):
    model, names = _model(tmp_path, "bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], dtype=TP.INT64)
    _, loaded = import_and_load(model, tmp_path / "e.pha", signer)
    check_against_onnxruntime(model, loaded, [
        {n: RNG.integers(-1000, 1000, s) for n, s in zip(names, [(2, 3, 4), (2, 4, 5)])}])


@pytest.mark.parametrize("equation, shapes", [
    ("bij,bjk->bik", [("n", 3, 4), ("n", 4, 5)]),
    ("bhqd,bhkd->bhqk", [("n", 2, 3, 4), ("n", 2, 5, 4)]),
    ("bsd,bsd->bs", [("n", 3, 4), ("n", 3, 4)]),
    ("bi,bj->bij", [("n", 3), ("n", 4)]),
    ("bij->bji", [("n", 3, 4)]),
    ("bsd,dk->bsk", [("n", "s", 4), (4, 5)]),
])
def test_a_symbolic_batch_label_stays_its_own_dim(equation, shapes, tmp_path, signer):
    model, names = _model(tmp_path, equation, shapes)
    _, loaded = import_and_load(model, tmp_path / "e.pha", signer)
    assert loaded.graph.outputs[0].shape[0] == "n"
    feeds = []
    for n in (1, 3):
        concrete = [tuple(d if type(d) is int else n for d in s) for s in shapes]
        feeds += _feeds(concrete, names)[:2]
    check_against_onnxruntime(model, loaded, feeds)


@pytest.mark.parametrize("equation, shapes", [
    ("ii", [(3, 3)]),                              # a trace
    ("...ii->...i", [(2, 3, 3)]),                  # onnx's batch diagonal
    ("iji->j", [(3, 4, 3)]),                       # apart, then summed over
    ("iii->i", [(3, 3, 3)]),                       # three times
    ("ijji,jk->ik", [(3, 4, 4, 3), (4, 5)]),       # two labels, then a matmul
    ("ab,cbb->ac", [(2, 3), (4, 3, 3)]),           # in the second operand
    ("nii->ni", [("n", 3, 3)]),                    # beside a run-time dim
])
def test_a_repeated_label_takes_the_diagonal_as_onnxruntime(equation, shapes, tmp_path,
                                                           signer):
    """Exact: a gather of the diagonal's entries, so -0.0, inf and nan off it stay off."""
    model, names = _model(tmp_path, equation, shapes)
    _, loaded = import_and_load(model, tmp_path / "e.pha", signer)
    assert "gather" in {n.op for n in loaded.graph.nodes}
    feeds = []
    for n in (1, 3):
        concrete = [tuple(d if type(d) is int else n for d in s) for s in shapes]
        feeds += _feeds(concrete, names)
    check_on_both_backends(model, loaded, feeds)


@pytest.mark.parametrize("equation, shapes, error, message", [
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)], UnsupportedModelError,
     "has 3 operands (only one or two are supported)"),
    ("ii->i", [("m", "m")], UnsupportedModelError,
     "label 'i' repeated within an operand over run-time dim 'm': its diagonal needs it "
     "static"),
    ("ii->i", [(3, 4)], ModelFileError, "label 'i' is bound to sizes 3 and 4"),
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 5)], UnsupportedModelError,
     "the ellipsis dims broadcast (1 against 2), which is not supported"),
    ("i.j->ij", [(3, 4)], ModelFileError, "'i.j' has a '.' outside one ellipsis"),
    ("ij...,j...->i", [(3, 4, 2), (4, 2)], UnsupportedModelError,
     "the output leaves out the ellipsis dims"),
    ("ij,jk->ik", [("m", 4), (4, "n")], None, None),  # one run-time dim per reshape: fine
    ("ijk,kl->ijl", [("m", "p", 4), (4, 5)], None, None),  # i and j lead: not merged
    ("ijk,jkl->il", [(3, "m", 4), ("m", 4, 5)], UnsupportedModelError,
     "labels 'jk' of dims ['m', 4] would be merged into one dim, which needs them static"),
    ("ai,bj->abij", [("m", 3), ("n", 4)], None, None),  # each reshape has one of them
    ("abi,abj->abij", [("m", "p", 3), ("m", "p", 4)], UnsupportedModelError,
     "needs a reshape to ['m', 'p', 3, 1], which has more than one run-time dim"),
    ("ij,jk->ik", [(3, "m"), (4, 5)], UnsupportedModelError,
     "label 'j' is bound to dims 'm' and 4, which cannot be checked equal at import"),
    ("ij,jk->ik", [(3, 4), (5, 6)], ModelFileError, "label 'j' is bound to sizes 4 and 5"),
    ("ij,jk->iz", [(3, 4), (4, 5)], ModelFileError, "output label(s) 'z' are in no operand"),
    ("ij,jk->ii", [(3, 4), (4, 5)], ModelFileError, "the output 'ii' repeats a label"),
    ("i1,jk->ik", [(3, 4), (4, 5)], ModelFileError, "'1' is not a label"),
    ("ij,jk->ik->i", [(3, 4), (4, 5)], ModelFileError, "has more than one '->'"),
    ("ij->ij", [(3, 4), (4, 5)], ModelFileError,
     "equation 'ij->ij' has 1 operand(s), the node 2 input(s)"),
    ("ijk->ij", [(3, 4)], ModelFileError,
     "operand 'x0' of shape (3, 4) has rank 2, its term 'ijk' 3 labels"),
])
def test_what_einsum_refuses_names_node_and_reason(equation, shapes, error, message,
                                                   tmp_path, signer):
    model, _ = _model(tmp_path, equation, shapes)
    if error is None:
        import_onnx(model)
        return
    assert_refused(model, error, "node 'node' (Einsum)", message)


@pytest.mark.parametrize("dynamo", [False, True], ids=["legacy", "dynamo"])
@pytest.mark.parametrize("equation, shapes, message", [
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)], "has 3 operands"),
])
def test_torch_einsums_the_decomposition_cannot_take_are_refused(dynamo, equation, shapes,
                                                                 message, tmp_path):
    model = export(_Einsum(equation), [torch.randn(*s) for s in shapes], tmp_path / "e.onnx",
                   dynamo=dynamo)
    with pytest.raises(UnsupportedModelError, match=r"\(Einsum\): equation .*" +
                       message.replace("(", r"\(")):
        import_onnx(model)
