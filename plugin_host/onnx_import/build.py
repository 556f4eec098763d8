"""Build an unsigned artifact from an ONNX file: read, import, reference outputs, assemble.

The golden outputs come from onnxruntime (:mod:`.reference`), the reference for ONNX semantics.
Before anything is written, the imported graph runs on the numpy backend on the same golden
inputs and must reproduce the reference within the declared tolerance of every output, so an
import that changes the numbers is refused at build time, not discovered at acceptance.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from abi.artifact import Manifest, Tolerance

from ..artifacts.build import _drawn_inputs, build_artifact, describe_targets, target_problems
from ..errors import ModelImportError, UnsupportedModelError
from ..executor import Executor
from .convert import ImportedModel, onnx_to_graph
from .float16 import DEFAULT_UPCAST_TOLERANCE, compare_float16, find_float16
from .float16 import upcast_float16 as upcast_float16_model
from .free_dims import fix_dims, run_time_dims
from .reader import DEFAULT_READ_LIMITS, ReadLimits, parse_model, read_model
from .reference import REFERENCE, run_reference
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
                upcast_float16: bool = False,
                dims: Mapping[str, int] | None = None) -> ImportedModel:
    """Read and import ``path``: the Graph, its ABI names' ONNX names and the checked proto.

    ``state`` maps recurrent-state inputs to the outputs that feed them (``{"h": "h_next"}``);
    ``layouts`` overrides the layout guessed for an input or output (``{"img": "NCHW"}``);
    ``dims`` fixes named run-time dims of the inputs (``{"h": 128}``, :mod:`.free_dims`).
    A model with float16 anywhere is refused unless ``upcast_float16``; then it is rewritten
    to float32 (:mod:`.float16`), checked again like a file, and imported with a float32 ABI
    (``float16_model`` of the result keeps the original). A model of opset 7 to 12 is then
    upgraded to 13 (:mod:`.upgrade`); ``.original`` is the model before the upgrade.
    """
    model = fix_dims(read_model(path, allow_external_data=allow_external_data, limits=limits),
                     dims or {}, where=str(path))
    float16_model, place = None, find_float16(model)
    if place is not None and not upcast_float16:
        raise UnsupportedModelError(f"{path}: float16 in {place}: the backends compute in "
                                    f"float32; import with --upcast-float16 "
                                    f"(upcast_float16=True) to rewrite the model to float32")
    if place is not None:
        float16_model, (upcast, _) = model, upcast_float16_model(model, limits)
        model = parse_model(upcast.SerializeToString(), where=f"{path} upcast to float32",
                            limits=limits)
    upgraded = upgrade_model(model, where=str(path), limits=limits)
    imported = onnx_to_graph(upgraded, name=name or _model_name(path), layouts=layouts,
                             state=state, limits=limits)
    if upgraded is not model:
        imported.original = model
    imported.float16_model = float16_model
    return imported


def build_onnx_artifact(path: str | os.PathLike, out: str | os.PathLike, *,
                        name: str | None = None, version: str = "0.1.0",
                        state: Mapping[str, str] | None = None,
                        layouts: Mapping[str, str] | None = None,
                        tolerances: Tolerances = DEFAULT_ONNX_TOLERANCE,
                        golden_cases: int = 2, seed: int = 0,
                        backends: Sequence[str] = ("numpy",), latency_ms: float | None = None,
                        expires=None, allow_external_data: bool = False,
                        limits: ReadLimits = DEFAULT_READ_LIMITS, reference_backend=None,
                        progress: Callable[[str], None] | None = None,
                        upcast_float16: bool = False,
                        upcast_tolerance: tuple[float, float] = DEFAULT_UPCAST_TOLERANCE,
                        dims: Mapping[str, int] | None = None,
                        report: Callable[[str], None] | None = None) -> Manifest:
    """Convert the ONNX model at ``path`` into an unsigned artifact at ``out``.

    Golden outputs are computed with onnxruntime on the model as given (also when its opset
    was upgraded for the import; after a float16 upcast, on its float32 rewrite) and stored
    with ``"onnxruntime"`` as the reference; ``tolerances`` is one ``(rtol, atol)`` or one per
    output name. The other options are :func:`~plugin_host.artifacts.build_artifact`'s.
    Raises ModelFileError for a malformed file, UnsupportedModelError naming the node and op
    for what cannot be mapped, and ModelImportError when the imported graph does not
    reproduce onnxruntime's outputs.

    ``upcast_float16`` imports a float16 model as float32 (see :func:`import_onnx`): golden
    outputs are then the float32 model's, and the float16 original also runs on onnxruntime
    on the same inputs; its largest deviation per output goes to ``report`` (and progress),
    and one beyond ``upcast_tolerance`` (rtol, atol) is a ModelImportError naming the output.
    When onnxruntime cannot run the float16 model, ``report`` is told so instead.
    ``report`` (and progress) is also told when the model's opset was upgraded, and of each
    input dim beyond the first that stays symbolic (``dims`` fixes them, see
    :func:`import_onnx`).
    """
    say = progress or (lambda message: None)

    def tell(line: str) -> None:  # a line for the summary, shown as progress too
        say(line)
        if report is not None:
            report(line)

    say(f"reading {path}")
    imported = import_onnx(path, name=name, state=state, layouts=layouts,
                           allow_external_data=allow_external_data, limits=limits,
                           upcast_float16=upcast_float16, dims=dims)
    graph = imported.graph
    if reference_backend is None:
        from ..plugins import get_backend, get_plugin_manager

        reference_backend = get_backend(get_plugin_manager(), "numpy")
    problems = target_problems(graph, backends, reference_backend)
    if problems:  # before the reference runs: the model is fine, the target is not
        hint = "" if reference_backend.name in problems else \
            " (choose the targets with --backend)"
        raise UnsupportedModelError(f"{path}: {describe_targets(problems)}{hint}")
    for where in run_time_dims(graph.inputs):
        tell(f"{where} known only at run time: golden cases and the latency budget use size "
             f"1 there; --dim NAME=SIZE fixes a dim to the size the device feeds")
    if imported.original is not None:
        tell(f"opset {imported.original_opset} upgraded to {imported.opset} with the ONNX "
             f"version converter; the reference runs the model as given")
    executor = Executor(graph, reference_backend)
    cases = _drawn_inputs(graph, executor.index_inputs, golden_cases, seed)
    say(f"computing {len(cases)} golden case(s) with {REFERENCE}")
    given = imported.original if imported.original is not None else imported.model
    reference = run_reference(given, imported.onnx_inputs, imported.onnx_outputs, cases)
    table = tolerances if isinstance(tolerances, Mapping) else {
        s.name: tuple(tolerances) for s in graph.outputs}
    for i, (inputs, want) in enumerate(zip(cases, reference)):
        got = executor.run(dict(inputs))
        for spec in graph.outputs:
            _compare(i, spec.name, got[spec.name], want[spec.name],
                     *table.get(spec.name, DEFAULT_ONNX_TOLERANCE))
    if imported.float16_model is not None:
        lines = ["upcast from float16: the artifact's ABI is float32"] + compare_float16(
            imported.float16_model, imported.onnx_inputs, imported.onnx_outputs, cases,
            reference, upcast_tolerance, say)
    else:
        lines = ["no float16 in the model: nothing upcast"] if upcast_float16 else []
    for line in lines:
        tell(line)
    return build_artifact(graph, out, name=name or graph.name, version=version,
                          backends=backends, reference_backend=reference_backend,
                          tolerances=tolerances, latency_ms=latency_ms, golden_inputs=cases,
                          golden_outputs=reference, reference=REFERENCE, seed=seed,
                          expires=expires, progress=progress)


def _compare(case: int, name: str, got: np.ndarray, want: np.ndarray, rtol: float,
             atol: float) -> None:
    if got.shape != want.shape or got.dtype != want.dtype:
        raise ModelImportError(f"output {name!r}: the imported graph gives {got.dtype} "
                               f"{got.shape}, onnxruntime {want.dtype} {want.shape}")
    diff, bad = Tolerance(rtol, atol).mismatches(got, want)
    if bad.any():
        raise ModelImportError(f"golden case {case}: output {name!r} of the imported graph "
                               f"differs from onnxruntime in {int(bad.sum())} of {bad.size} "
                               f"element(s) (max |diff| {float(diff.max(initial=0.0)):.3g}; rtol "
                               f"{rtol:g}, atol {atol:g}); widen --rtol/--atol if that is "
                               f"expected, else this is an import bug")


def _model_name(path: str | os.PathLike) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(path).stem).lstrip("_.-")
    return stem[:128] or "model"
