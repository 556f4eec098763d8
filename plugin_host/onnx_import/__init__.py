"""Import ONNX models as unsigned artifacts: ``plugin-host build --onnx MODEL.onnx --out FILE``.

Seams, one module each: :mod:`.reader` (size caps, parsing, structure checks, external data),
:mod:`.fold` (constant folding with numpy), :mod:`.ops` (the op mapping table: its registry,
shared helpers and the element-wise ops), by kind :mod:`.layers` (Conv, ConvTranspose,
BatchNormalization, Gemm, MatMul), :mod:`.gather` (Gather, GatherND, GatherElements),
:mod:`.shapes` (Concat, Reshape, Slice, Split, ...), :mod:`.pads` (Pad, CenterCropPad),
:mod:`.reduce` (reductions, ArgMax, CumSum, TopK), :mod:`.pool` (pooling),
:mod:`.patterns` (ONNX chains with no glue op, recognized during the walk: RMSNorm),
:mod:`.fusion` (glue chains recognized as a layer after the walk: LSTMCell, GroupNorm),
:mod:`.recurrent` (LSTM, GRU and RNN unrolled over a static sequence length), :mod:`.resize`
(Resize, antialiased too, and as gathers and weights per axis where ``resize`` cannot say it),
:mod:`.spatial` (DepthToSpace, SpaceToDepth, GridSample, AffineGrid, Col2Im),
:mod:`.functions` (ops ONNX defines as functions, through their bodies),
:mod:`.local_functions` (a model's own functions, inlined before the import),
:mod:`.masks` (Trilu and OneHot as ``where`` over a mask, EyeLike as a constant),
:mod:`.scatter` (ScatterND, ScatterElements, Scatter and MaxUnpool as ``scatter_elements``),
:mod:`.norms` (the layer set's
normalizations; LRN, LpNormalization, MeanVarianceNormalization), :mod:`.activations`
(Softsign, ThresholdedRelu, Shrink, Hardmax),
:mod:`.quantize` (QDQ models as float32 fake quantization), :mod:`.dynamic` (quantize_dynamic's
integer ops), :mod:`.qlinear` (QLinearConv, QLinearMatMul), :mod:`.qoperator` (com.microsoft's
QLinearAdd, QGemm and the other QOperator-format ops, with :mod:`abi.mlas`: onnxruntime's
arithmetic for their constants), :mod:`.qsoftmax` (com.microsoft's QLinearSoftmax),
:mod:`.matmul_to_float` (com.microsoft's DynamicQuantizeMatMul and MatMulIntegerToFloat,
which onnxruntime's optimizer writes for quantize_dynamic's MatMuls), :mod:`.quantized_lstm`
(com.microsoft's DynamicQuantizeLSTM, quantize_dynamic's LSTM, unrolled), :mod:`.fused` (its
fused float ops: FusedConv, FusedGemm, FusedMatMul, SkipLayerNormalization, as the nodes
they fused), :mod:`.einsum` (Einsum as transpose, reshape and matmul),
:mod:`.signal` (Compress of a constant condition, the window functions as constants, DFT and
STFT as matmul by constant cos and sin matrices), :mod:`.tfidf` (TfIdfVectorizer of integer
tokens as gathers of every window and equals against the pool), :mod:`.bitwise`
(BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot and BitShift as the bitwise glue ops, the
logical Xor as ``not(equal)``),
:mod:`.symbolic` (shape arithmetic over run-time dims), :mod:`.run_time_sizes` (run-time dims
read back from the graph's tensors when the call runs: masks, counts, aranges),
:mod:`.upgrade` (models of opsets 1 to 12 upgraded to 13 by onnx's version converter, in the
reference process), :mod:`.float_width` (float16, bfloat16 and float64 models rewritten to
float32), :mod:`.bfloat16_runs` (a bfloat16 model made runnable on onnxruntime, or emulated,
for that comparison),
:mod:`.free_dims` (run-time dims fixed at build),
:mod:`.convert` (the walk that builds the Graph and its ABI, If of a known condition inlined),
:mod:`.loop` (Loop of a trip count and condition known at import, unrolled),
:mod:`.sequence` (sequences known at import, as lists of tensor names),
:mod:`.value_shaped` (NonZero and Unique, whose output's shape depends on values: folded),
:mod:`.reference` (golden outputs from onnxruntime), :mod:`.build` (the artifact),
:mod:`.comparison` (the imported graph held to the reference; a tolerance widened to a
model's own float32 rounding), :mod:`.saturation` and :mod:`.quantized_rounding` (what a
refusal of a quantized model can be; where onnxruntime's runs of it part at a rounding to
integer steps) and :mod:`.command` (the ``--onnx`` option).
"""

import importlib

from .build import DEFAULT_ONNX_TOLERANCE, build_onnx_artifact, import_onnx
from .convert import ImportedModel, onnx_to_graph
from .reader import DEFAULT_READ_LIMITS, ReadLimits, parse_model, read_model

# The op table first: each mapping module imports it, and it imports them all, so a mapping
# module imported on its own (``from plugin_host.onnx_import.dynamic import ...``) would
# otherwise start that cycle from the wrong end and find its neighbours half made.
importlib.import_module(".ops", __name__)

__all__ = ["DEFAULT_ONNX_TOLERANCE", "DEFAULT_READ_LIMITS", "ImportedModel", "ReadLimits",
           "build_onnx_artifact", "import_onnx", "onnx_to_graph", "parse_model", "read_model"]
