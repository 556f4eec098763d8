"""One onnxruntime CPU session for a converted model, and the call that runs it.

Session options (:func:`session_options`):

* ``intra_op_num_threads`` = the cores this process may run on (``sched_getaffinity``; in the
  sandbox worker, the worker's), ``inter_op_num_threads`` = 1, sequential execution: the graph
  is a chain, so parallelism is inside each op;
* every graph optimization on (constant folding, Conv+BatchNorm+ReLU and MatMul+Add fusion,
  weight pre-packing), done once at load, but two (:data:`DISABLED`; the NHWC transformer
  only where the model needs it off: :func:`disabled_optimizers`);
* the intra-op threads do not spin-wait between calls (``session.intra_op.allow_spinning`` 0):
  a spinning pool keeps the worker's threads busy after each call and steals the core the
  host needs for cameras and IPC (README, "The onnxruntime backend", has the measurement);
* onnxruntime's own log at errors only (warnings would go to the worker's stderr).

onnxruntime is imported on first use, not with this module: its C extension starts a thread
as it loads, and the sandbox worker must still be single-threaded when it applies Landlock
(after it imported the backend plugins). :func:`preload` loads, before confinement and
without starting anything, the shared libraries that import needs from outside the Python
prefix, which the confined worker can no longer open; the import itself then only reads the
package under the Python prefix (allowed read-only) and starts its thread under the sandbox.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import re
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import onnx

from abi import check_indices
from abi.errors import BackendError, PluginHostError

from .emitter import Checks

#: Graph optimizations left off. The NHWC transformer moves a chain of QLinearConvs (the
#: ``qlinear_conv`` op) and the quantized ops between them to channels-last and pushes the
#: transposes through the ops around it; through a Resize with ``axes`` (the ``resize``
#: converter writes one for sizes that are not whole multiples of the input's) onnxruntime 1.32
#: permutes its two scales with the four-entry permutation, and the session is refused: it is
#: left off only for a model that holds one (:func:`disabled_optimizers`). Without it the
#: QLinearConvs transpose each their own input (some 15 % of a conv tower's time). The no-op
#: elimination drops an Add of a constant 0 between two nodes, which turns -0.0 into 0 (the
#: ABI's add, numpy's), so a -0.0 stayed where the numpy backend gives 0. And the QDQ
#: fusions (``session.disable_quant_qdq``, set by :func:`create_session`): onnxruntime makes a
#: QuantizeLinear, DequantizeLinear and Conv (or MatMul) of a float32 weight, which is what
#: ``fusion.py`` writes for a QDQ model's pairs, one integer kernel (the weight quantized by
#: onnxruntime), whose numbers differ from the float32 conv's by a rounding step.
DISABLED = ["NhwcTransformer", "NoopElimination"]

#: Libraries the onnxruntime extension links that live outside the Python prefix.
_SYSTEM_LIBRARIES = ("libdl.so.2", "librt.so.1")
_preloaded: list[ctypes.CDLL] = []


def available() -> bool:
    """Whether onnxruntime is installed (found without importing it)."""
    try:
        return importlib.util.find_spec("onnxruntime") is not None
    except (ImportError, ValueError):
        return False


def preload() -> None:
    """Load onnxruntime's non-Python dependencies without importing it (no thread starts)."""
    if _preloaded or not available():
        return
    for name in _SYSTEM_LIBRARIES:
        try:
            _preloaded.append(ctypes.CDLL(name))
        except OSError:  # not on this system: the extension does not need it either
            pass
    spec = importlib.util.find_spec("onnxruntime")
    for folder in spec.submodule_search_locations or ():
        shared = os.path.join(folder, "capi", "libonnxruntime_providers_shared.so")
        if os.path.exists(shared):
            _preloaded.append(ctypes.CDLL(shared, mode=ctypes.RTLD_GLOBAL))


def load() -> Any:
    """The onnxruntime module, imported on first use."""
    import onnxruntime

    return onnxruntime


_ort = load


#: spin-wait in the intra-op pool between calls (see the module docstring)
ALLOW_SPINNING = os.environ.get("PLUGIN_HOST_ORT_SPIN", "0") == "1"


def threads() -> int:
    """The cores this process may run on (``PLUGIN_HOST_ORT_THREADS`` overrides)."""
    override = os.environ.get("PLUGIN_HOST_ORT_THREADS", "")
    if override.isdigit() and int(override) > 0:
        return int(override)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except OSError:
        return 1


def session_options(*, spinning: bool | None = None):
    """The options of every session (see the module docstring)."""
    ort = _ort()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads()
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    spin = ALLOW_SPINNING if spinning is None else spinning
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    return so


def _our_node(model: onnx.ModelProto, message: str) -> str | None:
    """The node of ours that an onnxruntime message is about (ONNX names are ours + /k)."""
    for node in model.graph.node:
        if re.search(re.escape(node.name) + r"(?!\d)", message):
            return node.name.rsplit("/", 1)[0]
    return None


def disabled_optimizers(model: onnx.ModelProto) -> list[str]:
    """:data:`DISABLED`, less the NHWC transformer where no Resize of ``model`` (its subgraphs
    too) has ``axes``."""
    def resize_with_axes(graph) -> bool:
        for node in graph.node:
            if node.op_type == "Resize" and any(a.name == "axes" for a in node.attribute):
                return True
            for a in node.attribute:
                if any(resize_with_axes(g) for g in (*([a.g] if a.HasField("g") else []),
                                                     *a.graphs)):
                    return True
        return False

    if resize_with_axes(model.graph):
        return list(DISABLED)
    return [name for name in DISABLED if name != "NhwcTransformer"]


def create_session(model: onnx.ModelProto, *, where: str,
                   spinning: bool | None = None):
    """A CPU InferenceSession for ``model``; a BackendError naming the node if refused."""
    ort = _ort()
    options = session_options(spinning=spinning)
    options.add_session_config_entry("session.disable_quant_qdq", "1")  # see DISABLED
    try:
        return ort.InferenceSession(model.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"],
                                    disabled_optimizers=disabled_optimizers(model))
    except Exception as exc:  # onnxruntime's own exception types (Fail, InvalidGraph, ...)
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        node = _our_node(model, str(exc))
        at = f"node {node!r}" if node else where
        raise BackendError(f"onnxruntime backend: {at}: onnxruntime refused the model: "
                           f"{message}", backend="onnxruntime", node=node) from None


def _nan_through(nodes: list, initializers: list, shape: list[int],
                 fill: float = np.nan) -> bool:
    """Whether a session of ``nodes`` (x to y, float32 of ``shape``, the initializers given)
    made as every session is gives nan at every position of y for an x of nans only (of
    ``fill`` only)."""
    helper = onnx.helper
    graph = helper.make_graph(
        nodes, "nan_probe", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shape)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    run = create_session(model, where="a nan probe", spinning=False)
    [out] = run.run(None, {"x": np.full(shape, fill, np.float32)})
    return bool(np.isnan(out).all())


@functools.cache
def hard_sigmoid_keeps_nan() -> bool:
    """Whether this onnxruntime's HardSigmoid (``max(0, min(1, 0.2 x + 0.5))``) gives nan for
    nan at every position of a vector, whole SIMD blocks and a tail: a max or min instruction
    may give the bound for a nan (the x86 build on an AVX-512 machine gives the nan: probed,
    and under the tests). ``glue``'s nan-checked max pool relies on it, and asks once per
    process."""
    return _nan_through([onnx.helper.make_node("HardSigmoid", ["x"], ["y"], alpha=0.2,
                                               beta=0.5)], [], [67])


@functools.cache
def fused_clip_keeps_nan() -> bool:
    """Whether a depthwise Conv followed by a Clip to [1, 1], which onnxruntime fuses into
    the Conv as its activation (in the blocked-channel layout over 16 channels, in its plain
    one over 9), gives nan where the Conv's sum is nan, at every channel and position; as
    :func:`hard_sigmoid_keeps_nan` for ``glue``'s max pool of an x without -inf (a ReLU's or a
    SiLU's output)."""
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    for channels in (16, 9):
        weight = numpy_helper.from_array(np.ones((channels, 1, 1, 1), np.float32), "w")
        if not _nan_through([helper.make_node("Conv", ["x", "w"], ["s"], group=channels),
                             helper.make_node("Clip", ["s", "one", "one"], ["y"])],
                            [one, weight], [1, channels, 3, 7]):
            return False
    return True


@functools.cache
def silu_of_minus_inf_is_nan() -> bool:
    """Whether this onnxruntime's SiLU, ``x * sigmoid(x)`` (which it fuses into one kernel),
    gives nan for -inf at every position of a vector, whole SIMD blocks and a tail: -inf
    times a sigmoid of exactly 0, as this build gives (probed, and under the tests), where a
    sigmoid approximated to a tiny positive value would give -inf. ``glue``'s max pool of a
    SiLU's output relies on it, and asks once per process."""
    helper = onnx.helper
    return _nan_through([helper.make_node("Sigmoid", ["x"], ["s"]),
                         helper.make_node("Mul", ["x", "s"], ["y"])], [], [67], fill=-np.inf)


class GraphSession:
    """Run a converted model: ``{input name: array}`` -> ``{output name: array}``.

    ``checks`` are those of :func:`convert.to_onnx`: the index guards' indices come back as
    extra outputs and are checked here, after the run and before anything is returned (a
    symbolic dim's size, which the run reads from its tensor, comes back after them), then
    the shapes a node's shape rule is asked of again.

    ``sizes_checked(feed)``, when given, is asked after onnxruntime refused a call: it raises
    the ABI's error for the call's sizes where a shape rule refuses them (naming the node, as
    the numpy backend refuses them), else returns and the refusal is onnxruntime's.
    """

    def __init__(self, model: onnx.ModelProto, input_names: Sequence[str],
                 output_names: Sequence[str], checks: Checks, *, where: str,
                 sizes_checked: Callable[[Mapping[str, np.ndarray]], None] | None = None
                 ) -> None:
        self.session = create_session(model, where=where)
        self.where = where
        self._sizes_checked = sizes_checked
        self._inputs = list(input_names)
        self._outputs = list(output_names)
        guards = checks.guards
        self._fetch = self._outputs + [t for t, *_ in guards]
        sizes = [vocab for _, vocab, *_ in guards if type(vocab) is str]
        at = len(self._fetch)  # where the sizes of symbolic dims come back
        #: (position of the indices, the dim or the position of its size, description, kind,
        #: whether the dim is fixed)
        self._guards = [(len(self._outputs) + k, at + sizes.index(vocab) if type(vocab) is str
                         else vocab, desc, kind, type(vocab) is int)
                        for k, (_, vocab, desc, kind) in enumerate(guards)]
        self._fetch += sizes
        #: (position of the shape, its rule, the node)
        self._shapes = [(len(self._fetch) + k, rule, node)
                        for k, (_, rule, node) in enumerate(checks.shapes)]
        self._fetch += [t for t, *_ in checks.shapes]

    def __call__(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        feed = {n: feed[n] for n in self._inputs}
        try:
            values = self.session.run(self._fetch, feed)
        except Exception as exc:  # the ABI checks ran before; this is onnxruntime's refusal
            text = str(exc).strip()
            refused = BackendError(f"onnxruntime backend: {self.where}: the run failed: "
                                   f"{text.splitlines()[0] if text else repr(exc)}",
                                   backend="onnxruntime")
        else:
            refused = None
        if refused is not None:
            if self._sizes_checked is not None:
                self._sizes_checked(feed)  # the ABI's refusal of these sizes, if it has one
            raise refused
        for position, vocab, desc, kind, fixed in self._guards:
            check_indices(values[position], vocab if fixed else int(values[vocab][0]), desc,
                          kind)
        for position, rule, node in self._shapes:
            try:
                rule(tuple(values[position].tolist()))
            except PluginHostError as exc:
                exc.context.setdefault("node", node)
                raise
        return dict(zip(self._outputs, values))
