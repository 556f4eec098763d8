"""Helpers of the ONNX import tests: export a torch module with either exporter, import it,
load the artifact with the project's loader and compare it with onnxruntime run here."""

from __future__ import annotations

import io
import logging
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from plugin_host.artifacts import (TrustStore, generate_key, load_verified,  # noqa: E402
                                   sign_artifact)
from plugin_host.executor import Executor  # noqa: E402
from plugin_host.onnx_import import build_onnx_artifact  # noqa: E402
from plugins.numpy_backend import NumpyBackend  # noqa: E402

#: (id, dynamo, do_constant_folding, optimize): both exporters; the unfolded/unoptimized
#: variants keep BatchNormalization as its own node.
EXPORTERS = [
    pytest.param(False, True, True, id="legacy"),
    pytest.param(False, False, True, id="legacy-nofold"),
    pytest.param(True, True, True, id="dynamo"),
    pytest.param(True, False, False, id="dynamo-noopt"),
]


def export(module, args, path: Path, *, dynamo: bool, fold: bool = True, optimize: bool = True,
           input_names=None, output_names=None, opset: int | None = None) -> Path:
    """``module`` (eval mode) exported to ``path`` with torch's legacy or dynamo exporter
    (``opset``: the exporter's opset_version, else its default)."""
    module.eval()
    names = {"input_names": input_names, "output_names": output_names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        if dynamo:
            program = torch.onnx.export(module, tuple(args), dynamo=True, optimize=optimize,
                                        do_constant_folding=fold, verbose=False, **names,
                                        **({"opset_version": opset} if opset else {}))
            onnx.save(program.model_proto, path)
        else:
            buffer = io.BytesIO()
            torch.onnx.export(module, tuple(args), buffer, dynamo=False,
                              do_constant_folding=fold, **names,
                              **({"opset_version": opset} if opset else {}))
            path.write_bytes(buffer.getvalue())
    return path


def export_dynamic(module, args, path: Path, *, dynamo: bool, names: list[str], dims: list,
                   outputs=("y",), bounds: dict | None = None) -> Path:
    """``module`` (eval mode) of inputs ``names`` exported to ``path`` with run-time dims:
    per input an ``{axis: name}`` (empty: none); a name shared by inputs is one dim. The
    dynamo exporter's ``Dim`` of a name takes ``bounds[name]`` ((min, max)) when given."""
    module.eval()
    made: dict = {}

    def dim(name):
        if name not in made:
            low, high = (bounds or {}).get(name, (None, None))
            made[name] = torch.export.Dim(name, **{k: v for k, v in (("min", low), ("max", high))
                                                   if v is not None})
        return made[name]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        if dynamo:
            shapes = tuple({axis: dim(n) for axis, n in d.items()} or None for d in dims)
            torch.onnx.export(module, tuple(args), dynamo=True, verbose=False, input_names=names,
                              output_names=list(outputs), dynamic_shapes=shapes).save(str(path))
        else:
            torch.onnx.export(module, tuple(args), str(path), dynamo=False, input_names=names,
                              output_names=list(outputs),
                              dynamic_axes={n: d for n, d in zip(names, dims) if d})
    return path


class Fn(torch.nn.Module):
    """A module of one function of one input (``Fn(lambda x: x[:, -1])``)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.fixture(scope="session")
def signer():
    key = generate_key()
    trust = TrustStore()
    trust.add_key(key.public_key())
    return key, trust


def import_and_load(model: Path, out: Path, signer, **options):
    """Build the artifact from ``model``, sign it and load it with ``load_verified``."""
    key, trust = signer
    manifest = build_onnx_artifact(model, out, latency_ms=options.pop("latency_ms", 100.0),
                                   **options)
    sign_artifact(out, key)
    return manifest, load_verified(out, trust=trust, rollback=None, backends={"numpy"})


def onnxruntime_outputs(model: Path, feed: dict[str, np.ndarray], *, optimized: bool = True
                        ) -> dict[str, np.ndarray]:
    """The reference: onnxruntime's CPU provider with its default options (``optimized=False``:
    graph optimizations off and one thread, as the build's golden reference runs; a few
    kernels' numbers depend on the thread count, DynamicQuantizeLSTM's for one)."""
    options = ort.SessionOptions()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feed)))


def onnxruntime_optimized(source: Path, path: Path) -> Path:
    """``source`` as an onnxruntime session optimizes it (extended level) and saves it to
    ``path``: what a model saved with ``optimized_model_filepath`` holds (com.microsoft's fused
    ops)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(path)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    return path


class BertLayer(torch.nn.Module):
    """A BERT layer as transformers writes it: word, position and segment embeddings and their
    LayerNorm; self-attention with a padding mask as a -10000 bias; the output projection and
    a residual LayerNorm; the feed-forward block with GELU and its residual LayerNorm."""

    def __init__(self, hidden: int, heads: int, vocab: int):
        super().__init__()
        self.hidden, self.heads = hidden, heads
        self.word, self.position = torch.nn.Embedding(vocab, hidden), torch.nn.Embedding(
            16, hidden)
        self.segment = torch.nn.Embedding(2, hidden)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(hidden, hidden) for _ in range(4))
        self.up, self.down = torch.nn.Linear(hidden, 2 * hidden), torch.nn.Linear(2 * hidden,
                                                                                  hidden)
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(hidden, eps=1e-12)
                                         for _ in range(3))
        with torch.no_grad():  # norms of their own, not the identity
            for norm in self.norms:
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.5, 0.5)

    def forward(self, ids, segments, mask):
        batch, seq = ids.shape
        positions = torch.arange(seq).unsqueeze(0).expand_as(ids)
        x = self.norms[0](self.word(ids) + self.position(positions) + self.segment(segments))

        def split(t):
            return t.view(batch, seq, self.heads, self.hidden // self.heads).permute(0, 2, 1, 3)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / (self.hidden // self.heads) ** 0.5
        scores = scores + (1.0 - mask[:, None, None, :].float()) * -10000.0
        context = torch.matmul(torch.softmax(scores, -1), v).permute(0, 2, 1, 3)
        x = self.norms[1](self.o(context.reshape(batch, seq, self.hidden)) + x)
        return self.norms[2](self.down(torch.nn.functional.gelu(self.up(x))) + x)


def bert_optimized(folder: Path, *, hidden: int, heads: int, vocab: int, seq: int,
                   dynamic: bool = False, **fusion) -> Path:
    """A :class:`BertLayer` (inputs ids, segments, mask of (2, ``seq``), output y) exported at
    opset 14 and optimized by onnxruntime.transformers' optimizer (``model_type="bert"``),
    which writes com.microsoft's EmbedLayerNormalization, Attention (MultiHeadAttention with
    ``use_multi_head_attention=True`` in ``fusion``, its FusionOptions),
    SkipLayerNormalization and BiasGelu; saved to ``folder / "bert.onnx"``. ``dynamic``: the
    batch and the sequence are run-time dims (``batch``, ``seq``), as transformers exports
    them."""
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    ids = torch.randint(0, vocab, (2, seq))
    layer, args = BertLayer(hidden, heads, vocab).eval(), [ids, torch.zeros_like(ids),
                                                          torch.ones_like(ids)]
    names, path = ["ids", "segments", "mask"], folder / "bert_float.onnx"
    if dynamic:
        float_model = export_dynamic(layer, args, path, dynamo=False, names=names,
                                     dims=[{0: "batch", 1: "seq"}] * 3)
    else:
        float_model = export(layer, args, path, dynamo=False, opset=14, input_names=names,
                             output_names=["y"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        options = FusionOptions("bert")
        for name, value in fusion.items():
            setattr(options, name, value)
        model = optimizer.optimize_model(str(float_model), model_type="bert", num_heads=heads,
                                         hidden_size=hidden, opt_level=0,
                                         optimization_options=options)
    path = folder / "bert.onnx"
    model.save_model_to_file(str(path))
    return path


class _Mlp(torch.nn.Module):
    """Two Linears on (batch, tokens, 64), which torch exports as MatMuls by constants."""

    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(64, 96), torch.nn.Linear(96, 40)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


class _Embedded(torch.nn.Module):
    """An Embedding of 50 by 64, then a Linear to 40."""

    def __init__(self):
        super().__init__()
        self.table, self.down = torch.nn.Embedding(50, 64), torch.nn.Linear(64, 40)

    def forward(self, ids):
        return self.down(self.table(ids))


def weight_only_quantized(folder: Path, fmt: str, bits: int, symmetric: bool, *,
                          gather: bool = False) -> Path:
    """A two-layer MLP (input x of (2, 3, 64), output y) exported at opset 21 and quantized
    by onnxruntime's MatMulNBitsQuantizer in blocks of 32: ``fmt`` "QOperator" writes
    com.microsoft's MatMulNBits, "QDQ" a blocked DequantizeLinear of 4-bit weights; saved to
    ``folder / "quantized.onnx"``. ``gather``: an Embedding then a Linear instead (input ids
    of (2, 5)), its Gather quantized too (QOperator: com.microsoft's GatherBlockQuantized)."""
    from onnxruntime.quantization import QuantFormat
    from onnxruntime.quantization import matmul_nbits_quantizer as nbits

    torch.manual_seed(5)
    module, args, name = (_Embedded(), [torch.randint(0, 50, (2, 5))], "ids") if gather else (
        _Mlp(), [torch.randn(2, 3, 64)], "x")
    float_model = export(module, args, folder / "float.onnx", dynamo=False, opset=21,
                         input_names=[name], output_names=["y"])
    extra = {"op_types_to_quantize": ("MatMul", "Gather"),
             "quant_axes": (("MatMul", 0), ("Gather", 1))} if gather else {}
    config = nbits.DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=symmetric,
                                                quant_format=QuantFormat[fmt], bits=bits,
                                                **extra)
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantizer = nbits.MatMulNBitsQuantizer(onnx.load(str(float_model)),
                                                   algo_config=config)
            quantizer.process()
    finally:
        logging.disable(logging.NOTSET)
    path = folder / "quantized.onnx"
    quantizer.model.save_model_to_file(str(path))
    return path


def assert_close(loaded, name: str, got: np.ndarray, want: np.ndarray) -> None:
    """``got`` equals ``want`` within the tolerance the artifact declares for output ``name``."""
    tol = loaded.manifest.tolerances[name]
    assert got.shape == want.shape and got.dtype == want.dtype, (name, got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=tol.rtol, atol=tol.atol, err_msg=name)


def check_against_onnxruntime(model: Path, loaded, feeds: list[dict[str, np.ndarray]], *,
                              backend=None, optimized: bool = True) -> list[tuple[dict, dict]]:
    """Run fresh inputs through the loaded artifact (numpy backend unless ``backend``,
    in-process executor) and through onnxruntime (see :func:`onnxruntime_outputs`); every
    output must agree within the artifact's tolerance. Returns (got, want) per feed."""
    executor = Executor(loaded.graph, backend or NumpyBackend())
    runs = []
    for feed in feeds:
        got = executor.run(dict(feed))
        want = onnxruntime_outputs(model, feed, optimized=optimized)
        assert set(want) == {s.name for s in loaded.graph.outputs}
        for name, value in want.items():
            assert_close(loaded, name, got[name], value)
        runs.append((got, want))
    return runs


def check_on_both_backends(model: Path, loaded, feeds: list[dict[str, np.ndarray]]) -> None:
    """:func:`check_against_onnxruntime` on the numpy backend, then on the onnxruntime one."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    for backend in (None, OnnxruntimeBackend()):
        check_against_onnxruntime(model, loaded, feeds, backend=backend)


def check_against_onnxruntime_and_torch(model: Path, loaded, feeds: list[dict[str, np.ndarray]],
                                        module, tolerance: float | tuple[float, float]) -> None:
    """:func:`check_against_onnxruntime` on both backends, and each output "y" against the
    torch ``module`` run on the feed's "x", within ``tolerance`` (relative and absolute, or a
    pair of them; 0: exactly)."""
    rtol, atol = tolerance if isinstance(tolerance, tuple) else (tolerance, tolerance)
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    for backend in (None, OnnxruntimeBackend()):
        runs = check_against_onnxruntime(model, loaded, feeds, backend=backend)
        for feed, (got, _) in zip(feeds, runs):
            with torch.no_grad():
                want = module(torch.from_numpy(feed["x"])).numpy()
            np.testing.assert_allclose(got["y"], want, rtol=rtol, atol=atol)


def index_refused_on_both_backends(graph, feed: dict[str, np.ndarray], match: str) -> None:
    """A call the graph refuses when it runs, as onnxruntime refuses it, with an
    IndexRangeError matching ``match`` (naming the node) on the numpy and onnxruntime
    backends: an index past a tensor, or a guard's (a gather of one entry at 1)."""
    from abi.errors import IndexRangeError
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        with pytest.raises(IndexRangeError, match=match):
            Executor(graph, backend).run(dict(feed))


def refused_on_every_side(model: Path, graph, feed: dict[str, np.ndarray], *,
                          onnxruntime_says: str, numpy_says: str, backend_says: str,
                          rule_refuses: bool = True) -> None:
    """A call that the model cannot take (a size it does not divide, shapes that do not
    broadcast) is refused by onnxruntime (its message naming ``onnxruntime_says``), by the
    numpy backend's kernel with a ShapeError naming the node (``numpy_says``), and on the
    onnxruntime backend, whose run onnxruntime refuses, by the op's shape rule asked of the
    call's sizes, a ShapeError naming the node (``backend_says``: the rule's words); where
    ``rule_refuses`` is False, no rule can tell from the sizes (the sizes a value decides) and
    the refusal is onnxruntime's, a BackendError (``backend_says``: its words)."""
    from abi.errors import BackendError, ShapeError
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    with pytest.raises(Exception, match=onnxruntime_says):
        onnxruntime_outputs(model, feed)
    with pytest.raises(ShapeError, match=numpy_says) as info:
        Executor(graph, NumpyBackend()).run(dict(feed))
    assert info.value.context.get("node")
    with pytest.raises(ShapeError if rule_refuses else BackendError, match=backend_says) as info:
        Executor(graph, OnnxruntimeBackend()).run(dict(feed))
    assert info.value.context.get("node") or not rule_refuses


def assert_refused(model: Path, error: type, where: str, message: str) -> None:
    """Importing ``model`` raises exactly ``error``: one line naming ``where`` (``node 'n'
    (Op)``) and containing ``message``."""
    from plugin_host.onnx_import import import_onnx

    with pytest.raises(error) as info:
        import_onnx(model)
    assert type(info.value) is error
    text = str(info.value)
    assert where in text and message in text, text
    assert "\n" not in text


def float64_inside(model: Path) -> Path:
    """``model`` rewritten in place with float32 graph inputs and outputs where it had float64:
    each input cast to float64 under its old name, each output cast from it, so the nodes still
    see float64 (a float64 input or output is refused before any node is imported)."""
    proto = onnx.load(model)
    g, helper, DOUBLE = proto.graph, onnx.helper, onnx.TensorProto.DOUBLE
    casts, tails = [], []
    for vi in [*g.input, *g.output]:
        if vi.type.tensor_type.elem_type != DOUBLE:
            continue
        vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        old, new = vi.name, f"{vi.name}_f32"
        vi.name = new
        if any(vi is i for i in g.input):
            casts.append(helper.make_node("Cast", [new], [old], to=DOUBLE, name=f"{old}_wide"))
        else:
            tails.append(helper.make_node("Cast", [old], [new], to=onnx.TensorProto.FLOAT,
                                          name=f"{old}_narrow"))
    nodes = [*casts, *g.node, *tails]
    del g.node[:]
    g.node.extend(nodes)
    onnx.save(proto, model)
    return model
