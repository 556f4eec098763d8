"""com.microsoft's fused float ops, which onnxruntime's graph optimizer writes (extended level)
and so a model saved from an onnxruntime session (``SessionOptions.optimized_model_filepath``)
holds: FusedConv (Conv, the Add of a residual, an activation), FusedGemm (Gemm and an
activation), FusedMatMul (MatMul of transposed operands, scaled), SkipLayerNormalization (a
residual Add and LayerNormalization), SkipSimplifiedLayerNormalization (the same with RMSNorm,
T5's and LLaMA's) and, in models of an opset before Gelu's (20), Gelu,
FastGelu, BiasGelu and QuickGelu. Registered in :data:`.ops.MAPPERS` under
``com.microsoft.<op>`` on import.

Each is written back as the ONNX nodes it fused, named after it (``<node>/conv``, ...), and
those are mapped as the model's own (:meth:`.convert.Importer.inline`), with their checks and
their refusals: so the artifact is the one the unoptimized model builds, compared with
onnxruntime running the optimized one within the declared tolerance (the fused kernels round
differently, MLAS's activations are its own approximations, as for the plain ops).

- FusedConv: ``activation(Conv(X, W, B) + Z)``; the activation one of MLAS's: Relu, LeakyRelu
  (``activation_params`` [alpha]), Tanh, Sigmoid, Clip ([min, max]), HardSigmoid ([alpha,
  beta]).
- FusedGemm: ``activation(Gemm(A, B, C))``; Relu, LeakyRelu, Tanh, Sigmoid, HardSigmoid, Elu,
  Selu, ThresholdedRelu, Softplus, Softsign (``activation_alpha``, ``activation_beta``,
  ``activation_gamma`` their parameters, as onnxruntime reads them).
- FusedMatMul: ``alpha * (A' @ B')`` where ``A'`` is A with its first axis moved to just
  before the last when ``transBatchA`` (``perm = [1, ..., rank - 2, 0, rank - 1]``), then
  its last two axes swapped when ``transA`` (B likewise), as onnxruntime's kernel reads them.
- SkipLayerNormalization: ``LayerNormalization(input + skip + bias)`` over the last axis with
  gamma and beta, its mean and inverse standard deviation also outputs 1 and 2 (the
  LayerNormalization's), the sum output 3, where the node has them.
  SkipSimplifiedLayerNormalization: ``SimplifiedLayerNormalization(input + skip + bias)`` with
  gamma, its inverse root mean square output 2 and the sum output 3 likewise; its mean output
  (1), which onnxruntime leaves unset, is refused.
- Gelu: ``gelu`` (erf); BiasGelu: ``gelu(A + B)``; FastGelu: ``gelu(X + bias)`` with the tanh
  approximation; QuickGelu: ``X * sigmoid(alpha * X)``.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelFileError
from .ops import MAPPERS, _only, _opt, maps

_MS = "com.microsoft."
#: FusedConv's activations: ONNX attribute names of its activation_params, in order
_CONV_ACTIVATIONS = {"Relu": (), "LeakyRelu": ("alpha",), "Tanh": (), "Sigmoid": (),
                     "Clip": ("min", "max"), "HardSigmoid": ("alpha", "beta")}
#: FusedGemm's activations: ONNX attribute names of activation_alpha, _beta, _gamma
_GEMM_ACTIVATIONS = {"Relu": (), "LeakyRelu": ("alpha",), "Tanh": (), "Sigmoid": (),
                     "HardSigmoid": ("alpha", "beta"), "Elu": ("alpha",),
                     "Selu": ("alpha", "gamma"), "ThresholdedRelu": ("alpha",),
                     "Softplus": (), "Softsign": ()}


def _helper():
    import onnx

    return onnx.helper


def _inline(imp, nodes) -> None:
    imp.inline(nodes, MAPPERS, -1, depth=0)


def _activation(imp, node, kind: str, x: str, params: dict) -> list:
    """The ONNX node applying activation ``kind`` to ``x`` into the node's output (Clip's
    bounds as constants, or attributes before opset 11); none: an Identity."""
    helper, out, name = _helper(), node.output[0], node.name or node.output[0]
    if not kind:
        return [helper.make_node("Identity", [x], [out], name=f"{name}/identity")]
    if kind == "Clip" and imp.opset < 11:
        return [helper.make_node("Clip", [x], [out], name=f"{name}/clip", **params)]
    if kind == "Clip":
        bounds = []
        for which in ("min", "max"):
            const = f"{out}.{which}"
            imp.set_const(const, np.array(params[which], np.float32))
            bounds.append(const)
        return [helper.make_node("Clip", [x, *bounds], [out], name=f"{name}/clip")]
    return [helper.make_node(kind, [x], [out], name=f"{name}/{kind.lower()}", **params)]


def _kind(imp, attrs: dict, known) -> str:
    """The activation attribute ("" where absent: none), refused when not in ``known``."""
    kind = attrs.get("activation", "")
    if kind and kind not in known:
        raise imp.unsupported(f"attribute activation={kind!r} is not supported (only "
                              f"{', '.join(known)})")
    return kind


@maps(_MS + "FusedConv")
def _fused_conv(imp, node, attrs):
    """``activation(Conv(X, W, B) + Z)`` as those ONNX nodes (module doc)."""
    kind = _kind(imp, attrs, _CONV_ACTIVATIONS)
    params = [float(p) for p in attrs.get("activation_params", [])]
    named = _CONV_ACTIVATIONS.get(kind, ())
    if len(params) != len(named):
        raise ModelFileError(f"activation_params {params}: {kind or 'no activation'} takes "
                             f"{len(named)}", node=imp.node_name, op=node.op_type)
    helper, name, out = _helper(), node.name or node.output[0], node.output[0]
    conv = {k: v for k, v in attrs.items() if k not in ("activation", "activation_params")}
    z = _opt(node, 3)
    nodes = [helper.make_node("Conv", list(node.input)[:3], [f"{out}/conv"], name=f"{name}/conv",
                              **conv)]
    x = f"{out}/conv"
    if z:
        nodes.append(helper.make_node("Add", [x, z], [f"{out}/sum"], name=f"{name}/sum"))
        x = f"{out}/sum"
    _inline(imp, nodes + _activation(imp, node, kind, x, dict(zip(named, params))))


@maps(_MS + "FusedGemm")
def _fused_gemm(imp, node, attrs):
    """``activation(Gemm(A, B, C))`` as those ONNX nodes (module doc)."""
    kind = _kind(imp, attrs, _GEMM_ACTIVATIONS)
    values = (attrs.get("activation_alpha"), attrs.get("activation_beta"),
              attrs.get("activation_gamma"))
    given = {k: v for k, v in zip(("alpha", "beta", "gamma"), values) if v is not None}
    params = {k: given[k] for k in _GEMM_ACTIVATIONS.get(kind, ()) if k in given}
    helper, name, out = _helper(), node.name or node.output[0], node.output[0]
    gemm = {k: v for k, v in attrs.items() if not k.startswith("activation")}
    nodes = [helper.make_node("Gemm", list(node.input), [f"{out}/gemm"], name=f"{name}/gemm",
                              **gemm)]
    _inline(imp, nodes + _activation(imp, node, kind, f"{out}/gemm", params))


@maps(_MS + "FusedMatMul")
def _fused_matmul(imp, node, attrs):
    """``alpha * (A' @ B')`` as Transpose, MatMul and Mul (module doc)."""
    _only(imp, attrs, {"alpha": ..., "transA": ..., "transB": ..., "transBatchA": ...,
                       "transBatchB": ...})
    helper, name, out = _helper(), node.name or node.output[0], node.output[0]
    nodes, operands = [], []
    for i, side in ((0, "A"), (1, "B")):
        x, batch, swap = node.input[i], attrs.get(f"transBatch{side}", 0), attrs.get(
            f"trans{side}", 0)
        if batch or swap:
            rank = len(imp.type_of(x).shape)
            if rank < (3 if batch else 2):
                raise imp.unsupported(f"{'transBatch' if batch else 'trans'}{side}=1 on {side} "
                                      f"of rank {rank}")
            perm = list(range(1, rank - 1)) + [0, rank - 1] if batch else list(range(rank))
            if swap:
                perm[-2:] = perm[-1], perm[-2]
            nodes.append(helper.make_node("Transpose", [x], [f"{out}/trans{side}"], perm=perm,
                                          name=f"{name}/trans{side}"))
            x = f"{out}/trans{side}"
        operands.append(x)
    alpha = float(attrs.get("alpha", 1.0))
    product = out if alpha == 1.0 else f"{out}/matmul"
    nodes.append(helper.make_node("MatMul", operands, [product], name=f"{name}/matmul"))
    if alpha != 1.0:
        imp.set_const(f"{out}.alpha", np.array(alpha, np.float32))
        nodes.append(helper.make_node("Mul", [product, f"{out}.alpha"], [out],
                                      name=f"{name}/alpha"))
    _inline(imp, nodes)


@maps(_MS + "SkipLayerNormalization", _MS + "SkipSimplifiedLayerNormalization")
def _skip_layer_norm(imp, node, attrs):
    """LayerNormalization (SimplifiedLayerNormalization: RMSNorm) of ``input + skip + bias``
    (module doc)."""
    _only(imp, attrs, {"epsilon": ...})
    outs = list(node.output) + [""] * 4
    simplified = node.op_type == "SkipSimplifiedLayerNormalization"
    if simplified and outs[1]:
        raise imp.unsupported("the mean output (1) is not supported: an RMSNorm has no mean "
                              "(onnxruntime leaves it unset)")
    helper, name, out = _helper(), node.name or node.output[0], node.output[0]
    total = outs[3] or f"{out}/skip_sum"
    bias = _opt(node, 3 if simplified else 4)
    first = f"{out}/skip" if bias else total
    nodes = [helper.make_node("Add", [node.input[0], node.input[1]], [first],
                              name=f"{name}/skip")]
    if bias:
        nodes.append(helper.make_node("Add", [first, bias], [total], name=f"{name}/bias"))
    if simplified:
        nodes.append(helper.make_node("SimplifiedLayerNormalization", [total, node.input[2]],
                                      [out, outs[2]], name=f"{name}/norm", axis=-1,
                                      epsilon=float(attrs.get("epsilon", 1e-12))))
    else:
        norm = [total, node.input[2]] + ([_opt(node, 3)] if _opt(node, 3) else [])
        nodes.append(helper.make_node("LayerNormalization", norm, [out, outs[1], outs[2]],
                                      name=f"{name}/norm", axis=-1,
                                      epsilon=float(attrs.get("epsilon", 1e-12))))
    _inline(imp, nodes)


@maps(_MS + "Gelu", _MS + "BiasGelu", _MS + "FastGelu")
def _gelu(imp, node, attrs):
    """``gelu`` of X (plus the bias B or ``bias``): erf, or tanh for FastGelu."""
    _only(imp, attrs, {})
    x = imp.tensor(node.input[0])
    bias = _opt(node, 1)
    if bias:
        x = imp.emit("add", [x, imp.tensor(bias)], [None], suffix="/bias")[0]
    imp.emit("gelu", [x], [node.output[0]],
             {"approximate": "tanh" if node.op_type == "FastGelu" else "none"})


@maps(_MS + "QuickGelu")
def _quick_gelu(imp, node, attrs):
    """``X * sigmoid(alpha * X)``."""
    _only(imp, attrs, {"alpha": ...})
    x = imp.tensor(node.input[0])
    alpha = imp.add_constant(np.array(attrs.get("alpha", 1.702), np.float32),
                             f"{node.output[0]}.alpha")
    scaled = imp.emit("mul", [x, alpha], [None], suffix="/alpha")[0]
    gate = imp.emit("sigmoid", [scaled], [None], suffix="/sigmoid")[0]
    imp.emit("mul", [x, gate], [node.output[0]], suffix="/gate")
