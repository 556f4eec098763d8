"""ONNX's own node tests through the import and both backends.

The onnx package carries a test case for each operator and its variants (``onnx.backend.test
.case.node``): a one-node model (or its expansion into a function's body), inputs, and the
outputs ONNX's reference implementation gives. Every case here is imported as a device would
build it, and what the import takes must reproduce those outputs on the numpy and the
onnxruntime backend within the case's own tolerance; what it does not take must be refused
with a typed error. ``conformance_refused.txt`` lists every case that is not simply right,
with its outcome: the class of the import's refusal; ``built,backend:Class`` where a backend
refuses the model or a call; or ``onnxruntime`` where onnxruntime, the build's reference,
gives other numbers than ONNX's reference, and the backends give onnxruntime's or come at
least as close to the reference. A case whose outcome is not the listed one (absent: right)
fails: the list is what the import does, kept exact, for the onnx version it names; with
another onnx (its cases may differ) every case need only be right or refused with a typed
error.

How a case is built: the model's inputs that the import takes only as constants (Reshape's
shape, a reduction's axes, Resize's scales) are fixed at build to the case's values, as
``--input-value`` fixes an input the device always feeds (where the refusal names a value
computed from inputs, the inputs the build's hint lists); a float16, bfloat16 or float64
case is rewritten to float32 (``--upcast-float16``, ``--upcast-bfloat16``,
``--downcast-float64``) and compared within the build's tolerance for that rewrite.

Run ``python -m tests.plugin_host.onnx_import.test_conformance`` to write the list anew (it
prints what changed).
"""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from abi.errors import PluginHostError
from plugin_host.executor import Executor
from plugin_host.onnx_import import import_onnx
from plugin_host.onnx_import.fixed_inputs import fixable_inputs
from plugin_host.onnx_import.float_width import (DEFAULT_BFLOAT16_UPCAST_TOLERANCE,
                                                 DEFAULT_DOWNCAST_TOLERANCE,
                                                 DEFAULT_UPCAST_TOLERANCE)
from plugins.numpy_backend import NumpyBackend

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

LIST = Path(__file__).with_name("conformance_refused.txt")
#: The outcome of a case whose numbers are onnxruntime's, not ONNX's reference's.
ONNXRUNTIME = "onnxruntime"


def _cases() -> dict:
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return {case.name: case for case in collect_testcases()}


def _listed() -> tuple[str, dict[str, str]]:
    """The onnx version the list was made with, and case name -> outcome."""
    version, outcomes = "", {}
    for line in LIST.read_text().splitlines():
        if line.startswith("# onnx "):
            version = line.split()[2]  # the first line: "# onnx 1.23.2"
        elif line and not line.startswith("#"):
            name, outcome = line.split()
            outcomes[name] = outcome
    return version, outcomes


def _array(value) -> np.ndarray:
    """A case's value as numpy holds it; bfloat16 (ml_dtypes') as float32, exactly, as the
    build's upcast makes it."""
    if isinstance(value, onnx.TensorProto):
        value = onnx.numpy_helper.to_array(value)
    value = np.asarray(value)
    return value.astype(np.float32) if value.dtype.name == "bfloat16" else value


class Imported:
    """A case's model imported as a device would build it (see the module's docstring)."""

    def __init__(self, case, folder: Path) -> None:
        self.case, self.path = case, folder / f"{case.name}.onnx"
        onnx.save(case.model, self.path)
        weights = {t.name for t in case.model.graph.initializer}
        self.inputs = [vi.name for vi in case.model.graph.input if vi.name not in weights]
        self.fixed: dict[str, np.ndarray] = {}
        self.widths: dict[str, bool] = {}
        self.model = self._import()

    def _import(self):
        """Import; where the refusal asks for a constant input or a float width rewrite
        (by name), grant it and import again. The last refusal is raised."""
        while True:
            try:
                return import_onnx(self.path, input_values=self.fixed, **self.widths)
            except PluginHostError as error:
                if not self._granted(str(error)):
                    raise

    def _granted(self, message: str) -> bool:
        for width, option in (("bfloat16", "upcast_bfloat16"), ("float16", "upcast_float16"),
                              ("float64", "downcast_float64")):
            if re.search(rf"\b{width} in ", message) and option not in self.widths:
                self.widths[option] = True
                return True
        if "run time" not in message and "constant" not in message:
            return False
        named = [n for n in re.findall(r"'([^']*)'", message)
                 if n in self.inputs and n not in self.fixed]
        if not named:  # computed from inputs: those the build's hint lists
            named = [n for n in fixable_inputs(onnx.load(self.path),
                                               re.findall(r"'([^']*)'", message))
                     if n not in self.fixed]
        for name in named:
            self.fixed[name] = _array(self.case.data_sets[0][0][self.inputs.index(name)])
        return bool(named)

    @property
    def tolerance(self) -> tuple[float, float]:
        if "upcast_bfloat16" in self.widths:  # the coarser, where there is both
            return DEFAULT_BFLOAT16_UPCAST_TOLERANCE
        if "upcast_float16" in self.widths:
            return DEFAULT_UPCAST_TOLERANCE
        if "downcast_float64" in self.widths:
            return DEFAULT_DOWNCAST_TOLERANCE
        return self.case.rtol, self.case.atol

    def feeds(self):
        """Per data set: the feed by ABI name (the fixed inputs left out, float widths as the
        rewrite made them) and the expected outputs by ABI name."""
        abi_of = {onnx_name: abi for abi, onnx_name in self.model.onnx_inputs.items()}
        for inputs, outputs in self.case.data_sets:
            feed = {}
            for name, value in zip(self.inputs, inputs):
                if name in abi_of:
                    value = _array(value)
                    feed[abi_of[name]] = (value.astype(np.float32) if self.widths
                                          and value.dtype.kind == "f" else value)
            yield feed, dict(zip(self.model.onnx_outputs, map(_array, outputs)))


def _differences(got: dict, want: dict, tolerance: tuple[float, float],
                 exact_dtype: bool) -> dict[str, float]:
    """Output name -> how far ``got`` is from ``want`` (inf for another shape, dtype or
    integer value), for each output not within ``tolerance``."""
    rtol, atol = tolerance
    far = {}
    for name, expected in want.items():
        value = got[name]
        if value.shape != expected.shape or (exact_dtype and value.dtype != expected.dtype):
            far[name] = np.inf
        elif expected.dtype.kind in "fc":
            ours, theirs = value.astype(np.float64), expected.astype(np.float64)
            if not np.allclose(ours, theirs, rtol=rtol, atol=atol, equal_nan=True):
                far[name] = float(np.nanmax(np.abs(ours - theirs)))
        elif not np.array_equal(value, expected):
            far[name] = np.inf
    return far


def _onnxruntime(imported: Imported, feed: dict) -> dict:
    """onnxruntime on the case's model as given (the fixed inputs fed), by ABI name."""
    session = ort.InferenceSession(str(imported.path), providers=["CPUExecutionProvider"])
    onnx_feed = {imported.model.onnx_inputs[abi]: value for abi, value in feed.items()}
    onnx_feed.update(imported.fixed)
    outputs = dict(zip((o.name for o in session.get_outputs()),
                       session.run(None, onnx_feed)))
    return {abi: outputs[name] for abi, name in imported.model.onnx_outputs.items()}


def outcome(case, folder: Path) -> tuple[str, list[str]]:
    """What the import and both backends make of ``case``, and what went wrong.

    The outcome: the error's class when the import refuses it; else "built", or
    :data:`ONNXRUNTIME` where onnxruntime's numbers differ from ONNX's reference (the backends
    are then right when they give onnxruntime's, or come at least as close to the reference),
    followed by ``,backend:ErrorClass`` for each backend that refuses the model or a call
    with a typed error. What went wrong: outputs that are not right."""
    from plugins.onnxruntime_backend import OnnxruntimeBackend

    try:
        imported = Imported(case, folder)
    except PluginHostError as error:
        return type(error).__name__, []
    problems, reference, refused = [], "built", []
    tolerance, exact = imported.tolerance, not imported.widths
    for backend in (NumpyBackend(), OnnxruntimeBackend()):
        try:
            executor = Executor(imported.model.graph, backend)
            for feed, want in imported.feeds():
                got = executor.run(dict(feed))
                far = _differences(got, want, tolerance, exact)
                if not far:
                    continue
                theirs = _onnxruntime(imported, feed)
                off = _differences(theirs, want, tolerance, exact)
                if off:
                    reference = ONNXRUNTIME
                    far = {name: distance for name, distance in
                           _differences(got, theirs, tolerance, exact).items()
                           if far.get(name, 0.0) > off.get(name, 0.0)}
                problems += [f"{backend.name}: {name} off by {distance:.3g}"
                             for name, distance in far.items()]
        except PluginHostError as error:
            refused.append(f"{backend.name}:{type(error).__name__}")
    return ",".join([reference, *refused]), problems


CASES = _cases()
VERSION, LISTED = _listed()


@pytest.mark.parametrize("name", sorted(CASES))
def test_case(name, tmp_path):
    case = CASES[name]
    got, problems = outcome(case, tmp_path)
    assert not problems, problems
    if onnx.__version__ != VERSION:  # its cases may differ: right or refused, typed
        return
    want = LISTED.get(name, "built")
    assert got == want, f"{name}: {got}, listed as {want}: update the list"


def test_the_list_names_only_cases_of_its_onnx():
    if onnx.__version__ == VERSION:
        assert set(LISTED) <= set(CASES), sorted(set(LISTED) - set(CASES))[:10]


def main() -> None:
    import tempfile

    listed, lines = LISTED, [f"# onnx {onnx.__version__}",
                             "# onnx's node test cases the import refuses (the error's class), "
                             "or where a backend refuses the model or a call (built,backend:"
                             "ErrorClass), or where onnxruntime's numbers are not ONNX's "
                             f"reference's ({ONNXRUNTIME}); written by test_conformance.py"]
    with tempfile.TemporaryDirectory() as folder:
        for name in sorted(CASES):
            got, problems = outcome(CASES[name], Path(folder))
            if problems:
                print(f"{name}: {problems}", file=sys.stderr)
            if got != "built":
                lines.append(f"{name} {got}")
            if got != listed.get(name, "built"):
                print(f"{name}: {listed.get(name, 'built')} -> {got}")
    LIST.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
