# Quick start: `make run` (the main job) and `make test` (the whole test suite).
# Each creates .venv from nothing but Python 3.11 and the package registries.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: run test bench fuzz soak venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(STAMP_RUN)

venv: $(STAMP_TEST)

run: $(STAMP_RUN)
	$(BIN)/plugin-host run --policy policies/demo.toml --duration 10

test: $(STAMP_TEST)
	$(BIN)/python -m pytest -q

# Every benchmark under bench/, each printing its ratio to its target (DESIGN.md "Targets"):
# numpy backend vs torch eager, artifact hashing vs hashlib, RSS growth on load vs tensor
# bytes, sandbox worker vs in-process executor, a full-size camera frame handed to the worker
# vs a tiny one, the onnxruntime backend through the host vs bare onnxruntime, three cameras at
# 20 Hz through the daemon vs one camera, quantize_dynamic models and float32 recurrent ones on
# both backends vs bare onnxruntime, float32 conv nets with max pools, channel maxima or an
# argmax the same way, a camera frame's colour image input vs torch's resize.
BENCHES := bench_model bench_verify bench_load_rss bench_sandbox bench_frame_handoff bench_onnxruntime \
	bench_cameras bench_quantized bench_recurrent bench_extremes bench_norms bench_colour_images

bench: $(STAMP_TEST)
	@set -e; for b in $(BENCHES); do echo "== bench/$$b.py"; $(BIN)/python bench/$$b.py; done

# The full hostile-input runs: 10,000 mutants of a signed artifact, each refused with a typed
# error (the default test suite runs 300); then 5,000 byte-level mutants of twenty-five small
# ONNX models (opsets 8 to 27, one float16, several quantized; test_fuzz.py lists them) and every
# structure-aware one (about 91,000), each built into a loadable artifact or refused with a typed
# error by the ONNX importer (the suite runs 300 and 600); then 5,000 mutants of each shipped
# policy file.
# FUZZ_SEED=N picks another sequence.
fuzz: $(STAMP_TEST)
	FUZZ_MUTANTS=10000 $(BIN)/python -m pytest tests/plugin_host/artifacts/test_fuzz.py -q -s
	FUZZ_ONNX_MUTANTS=5000 FUZZ_ONNX_STRUCTURAL=all \
		$(BIN)/python -m pytest tests/plugin_host/onnx_import/test_fuzz.py -q -s
	FUZZ_POLICY_MUTANTS=5000 $(BIN)/python -m pytest tests/plugin_host/policy/test_fuzz.py -q

# The daemon's soak test for 10 minutes (the default suite runs it for 5 s), one camera and
# three matched cameras (full size here): host and worker RSS and the pools' leases must stay
# flat, frames must keep flowing. SOAK_SECONDS=N overrides.
SOAK_SECONDS ?= 600

soak: $(STAMP_TEST)
	SOAK_SECONDS=$(SOAK_SECONDS) SOAK_CAMERA_SIZE=1928x1208 $(BIN)/python -m pytest tests/plugin_host/daemon/test_soak.py -q -s

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
