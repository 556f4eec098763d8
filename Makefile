# Quick start: `make run` (the main job) and `make test` (the whole test suite).
# Each creates .venv from nothing but Python 3.11 and the package registries.

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: run test bench fuzz venv clean

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
	$(BIN)/plugin-host run --frames 20

test: $(STAMP_TEST)
	$(BIN)/python -m pytest -q

bench: $(STAMP_TEST)
	$(BIN)/python bench/bench_model.py

# The full hostile-input run: 10,000 mutants of a signed artifact, each refused with a typed
# error (the default test suite runs 300). FUZZ_SEED=N picks another sequence.
fuzz: $(STAMP_TEST)
	FUZZ_MUTANTS=10000 $(BIN)/python -m pytest tests/plugin_host/artifacts/test_fuzz.py -q -s

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
