"""Build an unsigned artifact from an ONNX file: read, import, reference outputs, assemble.

The golden outputs come from onnxruntime (:mod:`.reference`), the reference for ONNX semantics.
Before anything is written, the imported graph runs on the numpy backend on the same golden
inputs and must reproduce the reference within the declared tolerance of every output, so an
import that changes the numbers is refused at build time, not discovered at acceptance. With
no tolerance given, an output whose difference is the model's own float32 rounding (measured
as how far onnxruntime's runs with graph optimizations off and on are apart), or its rounding
to integer steps where those runs part one step apart at a quantization, gets a wider atol,
said in the build's summary (:mod:`.comparison`).
"""

from __future__ import annotations

import collections
import os
import re
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from abi.artifact import Manifest
from abi.errors import IndexRangeError, PluginHostError
from abi.ops import dims as dim_math

from ..artifacts.build import (_drawn_inputs, _drawn_size, build_artifact, describe_targets,
                               target_problems)
from ..errors import ModelImportError, UnsupportedModelError
from ..executor import Executor
from .convert import ImportedModel, onnx_to_graph
from .float_width import (DEFAULT_BFLOAT16_UPCAST_TOLERANCE, DEFAULT_DOWNCAST_TOLERANCE,
                          DEFAULT_UPCAST_TOLERANCE, compare_bfloat16, compare_float16,
                          compare_float64, find_bfloat16, find_float16, find_float64,
                          float64_computed, float64_in_abi)
from .float_width import downcast_float64 as downcast_float64_model
from .float_width import upcast_bfloat16 as upcast_bfloat16_model
from .float_width import upcast_float16 as upcast_float16_model
from .fixed_inputs import describe, fix_inputs, with_inputs_hint
from .free_dims import (check_golden_dims, check_golden_ranges, dim_aliases, fix_dims,
                        run_time_dims, with_dims_hint)
from .local_functions import inline_local_functions
from .reader import DEFAULT_READ_LIMITS, ReadLimits, parse_model, read_model
from .comparison import held_to_reference
from .float64_evaluation import evaluate_float64
from .quantized_rounding import TRACE_CASES, code_tensors
from .quantized_rounding import explain as explain_quantized_rounding
from .quantized_rounding import trace as trace_roundings
from .reference import REFERENCE, RewriteTooLarge, run_optimizer, run_reference
from .saturation import explain as explain_saturation
from .upgrade import upgrade_model

__all__ = ["import_onnx", "build_onnx_artifact", "DEFAULT_ONNX_TOLERANCE"]

#: (rtol, atol) per output unless given: numpy and onnxruntime sum in different orders, so
#: float32 results differ by about 1e-6 relative on the benchmark model; this leaves a margin.
DEFAULT_ONNX_TOLERANCE = (1e-4, 1e-5)

Tolerances = Mapping[str, tuple[float, float]] | tuple[float, float]


def import_onnx(path: str | os.PathLike, *, name: str | None = None,
                state: Mapping[str, str] | None = None,
                layouts: Mapping[str, str] | None = None, allow_external_data: bool = False,
                limits: ReadLimits = DEFAULT_READ_LIMITS,
                upcast_float16: bool = False, downcast_float64: bool = False,
                dims: Mapping[str, int] | None = None,
                input_values: Mapping[str, Any] | None = None,
                upcast_bfloat16: bool = False,
                onnxruntime_optimized: bool = False) -> ImportedModel:
    """Read and import ``path``: the Graph, its ABI names' ONNX names and the checked proto.

    ``state`` maps recurrent-state inputs to the outputs that feed them (``{"h": "h_next"}``);
    ``layouts`` overrides the layout guessed for an input or output (``{"img": "NCHW"}``);
    ``dims`` fixes named run-time dims of the inputs (``{"h": 128}``, :mod:`.free_dims`);
    ``input_values`` then fixes inputs to values (``{"sr": 16000}``, :mod:`.fixed_inputs`).
    A model with float16 anywhere is refused unless ``upcast_float16``; then it is rewritten
    to float32 (:mod:`.float_width`), checked again like a file, and imported with a float32 ABI
    (``float16_model`` of the result keeps the original). A model with bfloat16 likewise,
    unless ``upcast_bfloat16`` (after the float16 upcast when there is both;
    ``bfloat16_model`` keeps the model before it). Likewise a model with float64 is
    refused unless ``downcast_float64``: at once when a graph input or output is float64,
    else when float64 is left in the imported graph (float64 constants that fold into float32
    values, as torch's legacy exporter writes without constant folding, import as before).
    With ``downcast_float64`` it is rewritten to float32 (:mod:`.float_width`), values rounded
    (after the upcasts; ``float64_model`` keeps the model before the downcast). With
    ``onnxruntime_optimized`` the model (after those rewrites) is replaced by what
    onnxruntime's extended graph optimizations make of it (:func:`onnxruntime_optimized_model`),
    checked again like a file: the artifact and its reference then compute what an optimized
    onnxruntime session computes (a QDQ model's integer kernels). The model's own
    functions are then inlined (:mod:`.local_functions`), and a model of opset 1 to 12
    upgraded to 13 (:mod:`.upgrade`); ``.original`` is the model before both, which the
    reference runs.
    """
    model = fix_dims(read_model(path, allow_external_data=allow_external_data, limits=limits),
                     dims or {}, where=str(path))
    model = fix_inputs(model, input_values or {}, where=str(path))
    half, brain, double = find_float16(model), find_bfloat16(model), find_float64(model)
    for width, place, asked in (("float16", half, upcast_float16),
                                ("bfloat16", brain, upcast_bfloat16)):
        if place is not None and not asked:
            raise UnsupportedModelError(f"{path}: {width} in {place}: the backends compute in "
                                        f"float32; import with --upcast-{width} "
                                        f"(upcast_{width}=True) to rewrite the model to "
                                        f"float32")
    if double is not None and not downcast_float64 and float64_in_abi(model) is not None:
        raise _float64_refused(path, float64_in_abi(model))
    float16_model = bfloat16_model = float64_model = None
    if half is not None:
        float16_model, model = model, _rewritten(upcast_float16_model, model, path, "upcast",
                                                 limits)
    if brain is not None:
        bfloat16_model, model = model, _rewritten(upcast_bfloat16_model, model, path, "upcast",
                                                  limits)
    if double is not None and downcast_float64:
        float64_model, model = model, _rewritten(downcast_float64_model, model, path,
                                                 "downcast", limits)
    optimized_from = None
    if onnxruntime_optimized:
        optimized_from, model = model, onnxruntime_optimized_model(model, path, limits)
    inlined, calls = inline_local_functions(model, where=str(path), limits=limits)
    upgraded = upgrade_model(inlined, where=str(path), limits=limits)
    try:
        imported = onnx_to_graph(upgraded, name=name or _model_name(path), layouts=layouts,
                                 state=state, limits=limits)
    except UnsupportedModelError as exc:  # point at --dim and --input-value where they apply
        hinted = with_inputs_hint(with_dims_hint(exc, upgraded), upgraded)
        if hinted is exc:
            raise
        raise hinted from None
    imported.notes[:0] = describe(input_values or {}, model)
    if optimized_from is not None:
        imported.notes.insert(0, _optimized_note(optimized_from, model))
    if calls:
        imported.notes.append(f"{calls} call(s) of the model's own functions inlined; "
                              f"onnxruntime runs them as given")
    wide = next((n for n, t in imported.graph.types.items() if t.dtype == "float64"), None)
    if wide is not None and not downcast_float64:  # float64 that did not fold away
        place = float64_computed(model) or "the model"
        raise _float64_refused(path, f"{place} (the imported graph computes {wide!r} in "
                                     f"float64)")
    if upgraded is not model:
        imported.original = model
    imported.float16_model, imported.float64_model = float16_model, float64_model
    imported.bfloat16_model = bfloat16_model
    return imported


#: The optimized model may be at most this many times the model's size plus OPTIMIZED_SLACK:
#: onnxruntime's constant folding writes out whatever the model computes from constants (a
#: 40 KB file expanding a constant to 14 million rows answered 170 MB, which the build then
#: read, upgraded and folded again for seconds before refusing it)
OPTIMIZED_GROWTH = 8
OPTIMIZED_SLACK = 64 << 20


def onnxruntime_optimized_model(model, path, limits: ReadLimits):
    """``model`` as onnxruntime's graph optimizations at the extended level rewrite it (what a
    session saves to ``optimized_model_filepath``: constants folded, Conv and activations
    fused into com.microsoft's FusedConv, a QDQ model's DequantizeLinear, Conv or MatMul and
    QuantizeLinear groups into QLinearConv and QLinearMatMul, ...), made in the reference
    process and checked again like a file."""
    data = model.SerializeToString()
    cap = min(limits.max_file_bytes, OPTIMIZED_GROWTH * len(data) + OPTIMIZED_SLACK)
    try:
        rewritten = run_optimizer(data, max_bytes=cap)
    except RewriteTooLarge as exc:
        raise ModelImportError(f"{path}: onnxruntime's optimizer makes the model larger than "
                               f"{OPTIMIZED_GROWTH} times its size plus "
                               f"{OPTIMIZED_SLACK >> 20} MiB ({exc}): its constant folding "
                               f"writes out large tensors the model computes from constants; "
                               f"build without --onnxruntime-optimized") from None
    except ModelImportError as exc:
        raise ModelImportError(f"{path}: {exc}") from None
    return parse_model(rewritten, where=f"{path} as onnxruntime optimizes it", limits=limits)


def _optimized_note(before, after) -> str:
    """The summary's line on the optimized graph: nodes before and after, the op types it
    gained."""
    def ops(model) -> collections.Counter:
        return collections.Counter(n.op_type if n.domain in ("", "ai.onnx") else
                                   f"{n.domain}.{n.op_type}" for n in model.graph.node)

    old, new = ops(before), ops(after)
    gained = ", ".join(f"{op} x{count}" for op, count in sorted((new - old).items()))
    emulated = sorted(op for op in new - old if op in EMULATED_QLINEAR_OPS)
    warning = (f"; {', '.join(emulated)} import as exact emulations of several ops each "
               f"(lookup tables, integer arithmetic), which can run slower than a build "
               f"without --onnxruntime-optimized: compare the two builds' latency"
               if emulated else "")
    return (f"imported as onnxruntime's extended graph optimizations rewrite it: "
            f"{sum(old.values())} nodes to {sum(new.values())}"
            f"{'; new: ' + gained if gained else ''}; the reference runs the rewritten model"
            f"{warning}")


#: What onnxruntime's optimizer makes of a QDQ model's elementwise groups, which the import
#: writes as exact emulations (:mod:`.qoperator`), not as one kernel each (QLinearSigmoid,
#: QLinearLeakyRelu, QLinearMul, QLinearAdd, QLinearConcat, QLinearSoftmax,
#: QLinearGlobalAveragePool and QLinearAveragePool are one op each, which the onnxruntime
#: backend runs as onnxruntime's kernel)
EMULATED_QLINEAR_OPS = frozenset({"com.microsoft.QLinearWhere"})


def _rewritten(rewrite: Callable, model, path, how: str, limits: ReadLimits):
    """``model`` rewritten by one of :mod:`.float_width`'s rewrites, checked again like a
    file."""
    new, _ = rewrite(model, limits)
    return parse_model(new.SerializeToString(), where=f"{path} {how} to float32", limits=limits)


#: The oldest default-domain opset onnxruntime guarantees to run; below it, a model may use
#: an op of a version onnxruntime has no kernel for (Add and Mul of opset 6, PRelu of opset 6).
ORT_OPSET_FLOOR = 7


def _no_old_kernel(imported, message: str) -> bool:
    """Whether onnxruntime could not load a model upgraded from an opset below
    :data:`ORT_OPSET_FLOOR` for want of a kernel of the node's old version: then the golden
    vectors come from the upgraded model, as the build summary says."""
    return imported.original is not None and imported.original_opset < ORT_OPSET_FLOOR and \
        "cannot load the model" in message and "Could not find an implementation" in message


def _old_kernel(message: str) -> str:
    """The op and version onnxruntime's message says it has no kernel for ("Add(6)")."""
    found = re.search(r"implementation for (\w+\(\d+\))", message)
    return found.group(1) if found else "a node of the model as given"


def _float64_refused(path, place: str) -> UnsupportedModelError:
    return UnsupportedModelError(f"{path}: float64 in {place}: the backends compute in "
                                 f"float32; import with --downcast-float64 "
                                 f"(downcast_float64=True) to rewrite the model to float32 "
                                 f"(values rounded; the build measures the deviation)")


def build_onnx_artifact(path: str | os.PathLike, out: str | os.PathLike, *,
                        name: str | None = None, version: str = "0.1.0",
                        state: Mapping[str, str] | None = None,
                        layouts: Mapping[str, str] | None = None,
                        tolerances: Tolerances | None = None,
                        golden_cases: int = 2, seed: int = 0,
                        backends: Sequence[str] = ("numpy",), latency_ms: float | None = None,
                        expires=None, allow_external_data: bool = False,
                        limits: ReadLimits = DEFAULT_READ_LIMITS, reference_backend=None,
                        progress: Callable[[str], None] | None = None,
                        upcast_float16: bool = False,
                        upcast_tolerance: tuple[float, float] | None = None,
                        downcast_float64: bool = False,
                        downcast_tolerance: tuple[float, float] = DEFAULT_DOWNCAST_TOLERANCE,
                        dims: Mapping[str, int] | None = None,
                        input_values: Mapping[str, Any] | None = None,
                        golden_dims: Mapping[str, Sequence[int]] | None = None,
                        golden_ranges: Mapping[str, Sequence[float]] | None = None,
                        report: Callable[[str], None] | None = None,
                        upcast_bfloat16: bool = False,
                        onnxruntime_optimized: bool = False) -> Manifest:
    """Convert the ONNX model at ``path`` into an unsigned artifact at ``out``.

    Golden outputs are computed with onnxruntime on the model as given (also when its opset
    was upgraded for the import; after a float16 upcast or a float64 downcast, on its float32
    rewrite) and stored
    with ``"onnxruntime"`` as the reference; ``tolerances`` is one ``(rtol, atol)`` or one per
    output name. Left out, each output takes :data:`DEFAULT_ONNX_TOLERANCE`, except one
    that differs beyond it where the model's own float32 rounding is that coarse: when the
    comparison fails, onnxruntime runs the golden cases again with its graph optimizations on,
    and a float output whose two reference runs differ too, by no more than rounding does
    (:data:`.comparison.NOISE_MAX_RELATIVE`; for a quantized model both runs take
    :data:`.quantized_rounding.TRACE_CASES` inputs, the golden cases and more drawn alike,
    and a difference past that counts where they first part one step apart at a rounding to
    integers: :func:`.quantized_rounding.trace`), gets an atol of
    :data:`.comparison.NOISE_MARGIN` times that difference (rounded up to two digits;
    ``report`` names each output widened, and the manifest holds the tolerance it was built
    with). Given,
    the tolerances are kept, and a refusal says how far onnxruntime's two runs are apart.
    The other options are :func:`~plugin_host.artifacts.build_artifact`'s.
    Raises ModelFileError for a malformed file, UnsupportedModelError naming the node and op
    for what cannot be mapped, and ModelImportError when the imported graph does not
    reproduce onnxruntime's outputs.

    ``upcast_float16`` imports a float16 model as float32 (see :func:`import_onnx`): golden
    outputs are then the float32 model's, and the float16 original also runs on onnxruntime
    on the same inputs; its largest deviation per output goes to ``report`` (and progress),
    and one beyond ``upcast_tolerance`` (rtol, atol) is a ModelImportError naming the output.
    When onnxruntime cannot run the float16 model, ``report`` is told so instead.
    ``upcast_bfloat16`` does the same for a bfloat16 model; where onnxruntime cannot run it,
    its emulation runs (:func:`.bfloat16_runs.emulated`). ``upcast_tolerance`` None: each
    type's own,
    :data:`.float_width.DEFAULT_UPCAST_TOLERANCE` and
    :data:`.float_width.DEFAULT_BFLOAT16_UPCAST_TOLERANCE`.
    ``downcast_float64`` does the same for a float64 model (rewritten to float32, values
    rounded), measured against ``downcast_tolerance``; with both, the float16 original (which
    has the float64 too) is compared with the float32 model, and the float64 model that the
    upcast gives is compared with it again for the downcast alone.
    ``onnxruntime_optimized`` imports what onnxruntime's extended graph optimizations make
    of the model (see :func:`import_onnx`); the golden outputs are then the rewritten model's.
    ``report`` (and progress) is also told of each input ``input_values`` fixes (see
    :func:`import_onnx`), of a graph output declared with another shape than it computes,
    when the model's opset was upgraded, and of each input dim beyond the first that stays
    symbolic (``dims`` fixes them). ``golden_dims`` maps such a dim to the sizes the golden
    cases take (``{"h": (64, 128)}``: case k the k-th, cycling; 1 for a dim not named),
    keeping it symbolic in the ABI; the latency budget is measured on those cases.
    ``golden_ranges`` maps an input to the [low, high) its golden values are drawn from
    (``{"lengths": (1, 8)}``: integers 1 to 7), for a model that takes only some (integers
    are otherwise drawn from [0, 2), so ``lengths - 1`` as an index would be -1).
    """
    say = progress or (lambda message: None)

    def tell(line: str) -> None:  # a line for the summary, shown as progress too
        say(line)
        if report is not None:
            report(line)

    say(f"reading {path}")
    imported = import_onnx(path, name=name, state=state, layouts=layouts,
                           allow_external_data=allow_external_data, limits=limits,
                           upcast_float16=upcast_float16, downcast_float64=downcast_float64,
                           dims=dims, input_values=input_values,
                           upcast_bfloat16=upcast_bfloat16,
                           onnxruntime_optimized=onnxruntime_optimized)
    graph = imported.graph
    if reference_backend is None:
        from ..plugins import get_backend, get_plugin_manager

        reference_backend = get_backend(get_plugin_manager(), "numpy")
    problems = target_problems(graph, backends, reference_backend)
    if problems:  # before the reference runs: the model is fine, the target is not
        hint = "" if reference_backend.name in problems else \
            " (choose the targets with --backend)"
        raise UnsupportedModelError(f"{path}: {describe_targets(problems)}{hint}")
    aliases = dim_aliases(imported.model)
    golden = check_golden_dims(golden_dims or {}, graph.inputs, dims or {}, aliases)
    golden.update(_read_lengths(imported.reads, golden, golden_cases, tell))
    for where in run_time_dims(graph.inputs, golden, aliases):
        tell(f"{where} known only at run time: golden cases and the latency budget take "
             f"those sizes (--golden-dim NAME=SIZE,... sets them); --dim NAME=SIZE fixes a "
             f"dim to the size the device feeds")
    for note in imported.notes:
        tell(note)
    executor = Executor(graph, reference_backend)
    ranges = check_golden_ranges(golden_ranges or {}, graph.inputs, executor.index_inputs)
    cases = _drawn_inputs(graph, executor.index_inputs, golden_cases, seed, sizes=golden,
                          max_elements=limits.max_tensor_elements, ranges=ranges)
    _draw_columns(cases, imported, seed)
    say(f"computing {len(cases)} golden case(s) with {REFERENCE}")
    given = imported.original if imported.original is not None else imported.model
    hint = _golden_sizes_hint(graph, golden)
    runs = "as given"  # which model the reference runs, for the summary of an upgrade
    started = time.monotonic()
    try:
        reference = run_reference(given, imported.onnx_inputs, imported.onnx_outputs, cases)
    except ModelImportError as exc:
        if _no_old_kernel(imported, str(exc)):
            runs = (f"upgraded: onnxruntime, which guarantees opsets from {ORT_OPSET_FLOOR}, "
                    f"has no kernel for {_old_kernel(str(exc))}")
            given = imported.model
            started = time.monotonic()
            reference = run_reference(given, imported.onnx_inputs, imported.onnx_outputs,
                                      cases)
        elif not hint or "cannot run the model" not in str(exc):
            raise
        else:
            raise ModelImportError(f"{exc}{hint}") from None
    reference_s = time.monotonic() - started
    if imported.original_opset not in (0, imported.opset):
        tell(f"opset {imported.original_opset} upgraded to {imported.opset} with the ONNX "
             f"version converter; the reference runs the model {runs}")
    given_table = tolerances if isinstance(tolerances, Mapping) else {
        s.name: tuple(DEFAULT_ONNX_TOLERANCE if tolerances is None else tolerances)
        for s in graph.outputs}
    table = {s.name: tuple(given_table.get(s.name, DEFAULT_ONNX_TOLERANCE))
             for s in graph.outputs}

    def traced(timeout: float):  # the golden cases and more drawn alike, timed in proportion
        # input k takes golden case k % len(cases)'s sizes: ones the model was seen to take
        seen = {dim: [_drawn_size(sizes, k) for k in range(len(cases))]
                for dim, sizes in golden.items()}
        drawn = _drawn_inputs(graph, executor.index_inputs, max(TRACE_CASES, len(cases)), seed,
                              sizes=seen, max_elements=limits.max_tensor_elements,
                              ranges=ranges)
        _draw_columns(drawn, imported, seed)
        inputs = [*cases, *drawn[len(cases):]]
        return trace_roundings(given, imported.onnx_inputs, imported.onnx_outputs, inputs,
                               timeout=timeout * len(inputs) / len(cases))

    try:
        got = [_golden_run(executor, inputs, i) for i, inputs in enumerate(cases)]
        table = held_to_reference(
            graph.outputs, got, reference, table, given_tolerance=tolerances is not None,
            rerun=lambda timeout: run_reference(given, imported.onnx_inputs,
                                                imported.onnx_outputs, cases, optimized=True,
                                                timeout=timeout),
            reference_s=reference_s,
            explain_saturation=lambda message: explain_saturation(given, message),
            explain_refusal=lambda integer: explain_quantized_rounding(given, integer),
            say=say, tell=tell,
            trace=traced if code_tensors(given) else None,
            evaluate=lambda timeout: evaluate_float64(given, imported.onnx_inputs,
                                                      imported.onnx_outputs, cases,
                                                      timeout=timeout))
    except ModelImportError as exc:
        if not hint:
            raise
        raise ModelImportError(f"{exc}{hint}") from None
    lines: list[str] = []
    for original, asked, compare, tolerance, width, how in (
            (imported.float16_model, upcast_float16, compare_float16,
             upcast_tolerance or DEFAULT_UPCAST_TOLERANCE, "float16", "upcast"),
            (imported.bfloat16_model, upcast_bfloat16, compare_bfloat16,
             upcast_tolerance or DEFAULT_BFLOAT16_UPCAST_TOLERANCE, "bfloat16", "upcast"),
            (imported.float64_model, downcast_float64, compare_float64, downcast_tolerance,
             "float64", "downcast")):
        if original is not None:
            lines += [f"{how} from {width}: the artifact's ABI is float32"] + compare(
                original, imported.onnx_inputs, imported.onnx_outputs, cases, reference,
                tolerance, say)
        elif asked:
            lines.append(f"no {width} in the model: nothing {how}")
    for line in lines:
        tell(line)
    return build_artifact(graph, out, name=name or graph.name, version=version,
                          backends=backends, reference_backend=reference_backend,
                          tolerances=table, latency_ms=latency_ms, golden_inputs=cases,
                          golden_outputs=reference, reference=REFERENCE, seed=seed,
                          expires=expires, progress=progress)


def _draw_columns(cases: Sequence[dict], imported, seed: int) -> None:
    """In each golden case, redraw the columns of inputs that hold indices read as floats
    (:attr:`.ImportedModel.index_columns`) as whole numbers in [0, count), and put pairs of
    columns that hold a box's corners in order (:attr:`.ImportedModel.ordered_columns`)."""
    rng = np.random.default_rng([seed, 1])
    for inputs in cases:
        sizes = {d: inputs[spec.name].shape[axis] for spec in imported.graph.inputs
                 for axis, d in enumerate(spec.shape) if type(d) is not int}
        for name, (column, count) in sorted(imported.index_columns.items()):
            bound = sizes.get(count, count)
            if type(bound) is int and bound > 0 and name in inputs:  # else drawn as any float
                inputs[name][..., column] = rng.integers(0, bound, inputs[name].shape[:-1])
        for name, pairs in sorted(imported.ordered_columns.items()):
            value = inputs[name]
            for low, high in pairs:
                value[..., low], value[..., high] = (np.minimum(value[..., low], value[..., high]),
                                                     np.maximum(value[..., low], value[..., high]))


def _read_lengths(reads: Mapping[str, Any], golden: Mapping[str, Sequence[int]], cases: int,
                  tell: Callable[[str], None]) -> dict[str, tuple[int, ...]]:
    """Golden sizes for each input dim the graph reads over a sum of others (``total`` over
    ``past+seq``, :attr:`.ImportedModel.reads`) that ``golden`` leaves out: that sum in each
    case, so that the golden inputs are ones the model takes."""
    out = {}
    for name, length in reads.items():
        const, terms = dim_math.as_sum(length)
        if name in golden or not all(type(t) is str and t.isidentifier() for _, t in terms):
            continue
        drawn = [(sign, golden.get(t, (1,))) for sign, t in terms]
        sizes = tuple(const + sum(sign * d[case % len(d)] for sign, d in drawn)
                      for case in range(max(cases, 1)))
        if min(sizes) >= 0:
            out[name] = sizes
            tell(f"golden sizes of {name!r}: {'/'.join(map(str, sizes))}, as {length!r}, "
                 f"the entries of it the model reads (--golden-dim {name}=SIZE,... sets "
                 f"others)")
    return out


def _golden_sizes_hint(graph, golden: Mapping[str, Sequence[int]]) -> str:
    """For a refusal on the golden cases of a graph whose inputs have run-time dims: the
    sizes they were drawn at there (1 unless ``golden`` gives others), which a model may not
    take (``x[:, 2]``; a 4x4 convolution of a 1x1 image; a pooling window longer than the
    input, which onnxruntime and the ABI size differently). Else ""."""
    free = sorted({d for s in graph.inputs for d in s.shape if type(d) is not int})
    if not free:
        return ""
    drawn = ", ".join(f"{d!r} {'/'.join(map(str, golden.get(d, (1,))))}" for d in free)
    return (f"; the golden cases give the inputs' run-time dims the sizes {drawn}, where a "
            f"model may need others: --golden-dim NAME=SIZE,... (golden_dims= in the Python "
            f"API) draws them at other sizes and keeps them run-time, --dim NAME=SIZE (dims=) "
            f"fixes one to the size the device feeds")


def _golden_run(executor: Executor, inputs: Mapping[str, np.ndarray], case: int) -> dict:
    """The imported graph on golden case ``case``; a refusal of a value the model computed
    (an Embedding's id onnxruntime took, counting a negative one from the end) is the build's
    ModelImportError, as any other disagreement with the reference is."""
    try:
        return executor.run(dict(inputs))
    except PluginHostError as exc:
        rule = (" (the ABI refuses an index there that onnxruntime takes: an Embedding's "
                "outside [0, vocab), a negative one of which onnxruntime counts from the end)"
                ) if isinstance(exc, IndexRangeError) else ""
        node = exc.context.get("node")
        at = f" at node {node!r}" if node and repr(node) not in str(exc) else ""
        raise ModelImportError(f"golden case {case}: onnxruntime runs the model, the imported "
                               f"graph refuses it{at}: {exc}{rule}") from None


def _model_name(path: str | os.PathLike) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(path).stem).lstrip("_.-")
    return stem[:128] or "model"
