# Two commands on a fresh machine: `make demo` and `make test`. Both set up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU machine gets the CPU build of torch from the local wheel cache; a GPU user who
# already has CUDA torch in the venv keeps it (the check below skips the install).
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?= -n 2

.PHONY: setup test test-gpu test-slow demo lab bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev,eval,notebooks]"
	touch $@

test: setup
	$(PY) -m pytest $(PYTEST_ARGS) -m "not gpu and not slow"

test-slow: setup
	$(PY) -m pytest $(PYTEST_ARGS) -m "slow"

test-gpu: setup
	$(PY) -m pytest -m gpu

demo: setup
	$(VENV)/bin/mhar demo --out demo_out

lab: setup
	$(VENV)/bin/jupyter lab notebooks/

bench: setup
	$(VENV)/bin/mhar bench routing --out benchmarks/kernels/results_local.json

clean:
	rm -rf $(VENV) demo_out .pytest_cache
