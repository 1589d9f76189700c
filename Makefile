# Quick start: `make demo` (the Gradio app) and `make test` (the whole suite). Both create .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SHARED_MNIST := $(abspath ../shared/data/mnist)
export TPO_DATA_DIR ?= $(if $(wildcard $(SHARED_MNIST)),$(SHARED_MNIST),)
SHARED_REFERENCE := $(abspath ../shared/reference/token_reversal_sparse_reward_results.npz)
export TPO_REFERENCE_NPZ ?= $(if $(wildcard $(SHARED_REFERENCE)),$(SHARED_REFERENCE),)
export GRADIO_ANALYTICS_ENABLED := False
export PYTHONPATH := $(CURDIR)

.PHONY: venv demo train test test-fast book bench clean space

$(BIN)/python: requirements.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(BIN)/python

venv: $(BIN)/python

demo: venv  ## the Gradio app on http://127.0.0.1:7860
	$(BIN)/python -m demos.app

train: venv  ## a short live training run from the CLI
	$(BIN)/python -m tpo_core train --task reversal --reward terminal --method tpo --H 6 --episodes 200 --seeds 2

# pytest-xdist: two worker processes on 2 cores (up to four on more), one unit of work per test file, queued in
# collection order, which puts the longest files first (tests/schedule.py says why and how).
PYTEST_SUITE := $(BIN)/python -m pytest -n auto --dist loadfile --no-loadscope-reorder -p no:cacheprovider \
	--timeout 1800 --durations 25 -q -rs

test: venv  ## the whole test suite
	$(PYTEST_SUITE)

test-fast: venv
	$(PYTEST_SUITE) -m "not slow and not browser"

# Every Colab notebook end to end in a simulated Colab (tests/test_colab.py says what it simulates; `make test` runs
# chapter 01 end to end and every notebook's install, setup and imports). Also the colab GitHub workflow.
.PHONY: test-colab
test-colab: venv  ## every chapter's Colab notebook, end to end, in a simulated Colab
	TPO_COLAB_ALL=1 $(BIN)/python -m pytest tests/test_colab.py -p no:cacheprovider --timeout 7200 -q -rs -s --durations 0

book: venv  ## build the Jupyter Book (quick mode on CPU)
	TPO_QUICK=$${TPO_QUICK:-1} $(BIN)/python -m book.build

# The Hugging Face Space of the demo (space/assemble.py): `make space OUT=/tmp/tpo-space` (OUT must not exist or be
# empty); SPACE_ARGS="--tpo-core ." installs tpo_core from this clone instead of the repository at HEAD.
OUT ?= _build/space
space:  ## assemble the demo's Hugging Face Space into $(OUT)
	$(PY) -m space.assemble --out $(OUT) $(SPACE_ARGS)

bench: venv  ## the training benchmark: writes benchmarks/results/bench_train.json and renders benchmarks/results/README.md
	$(BIN)/python -m benchmarks.bench_train
	$(BIN)/python -m benchmarks.report

# The sdist and the wheel in dist/, checked as PyPI will (tests/test_wheel.py also runs the wheel in a fresh venv;
# a v* tag publishes them: .github/workflows/release.yml).
.PHONY: dist
dist: venv  ## build the sdist and the wheel, then twine check them
	rm -rf dist
	$(BIN)/python -m build
	$(BIN)/python -m twine check --strict dist/*
	rm -rf build tpo_core.egg-info

clean:
	rm -rf _build .pytest_cache
