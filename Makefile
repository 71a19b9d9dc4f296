# Two commands on a fresh machine: `make demo` and `make test`. Both set up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Every package but torch and triton comes at the version in the lock, which CI tests. torch
# and triton come from TORCH_SPEC (the CPU build lies on disk) only when the venv has no torch
# yet, so a GPU user who installed their CUDA torch into the venv first keeps it.
LOCK ?= requirements-lock-cpu.txt
TORCH_SPEC ?= torch==2.13.0 triton==3.9.0
EXTRAS ?= dev,eval,notebooks
PYTEST_ARGS ?= -n 2
comma := ,
# `make lock` resolves the ranges in pyproject.toml anew (uv), against the CPU torch wheel.
UV_SPEC ?= uv==0.13.9
TORCH_CPU_WHEELS ?= /opt/wheels
LOCK_PYTHON ?= 3.11
# `make test-latest`: a separate venv with the newest releases the ranges allow (torch stays at
# TORCH_SPEC); LATEST_OVERRIDES installs releases beyond the ranges on top, e.g. transformers==5.26.0.
LATEST_VENV ?= .venv-latest
LATEST_OVERRIDES ?=
LATEST_TESTS ?= tests/test_model.py tests/test_hf_remote_code.py tests/test_convert.py tests/test_evaluate.py \
	tests/test_stats_lm_eval_io.py tests/test_cpt.py tests/test_cpt_attention.py tests/test_capture.py \
	tests/test_compiled_sublayers.py

.PHONY: setup test test-gpu test-slow test-latest lock demo lab bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -c $(LOCK) -e ".[$(EXTRAS)]"
	touch $@

test: setup
	$(PY) -m pytest $(PYTEST_ARGS) -m "not gpu and not slow"

test-slow: setup
	$(PY) -m pytest $(PYTEST_ARGS) -m "slow"

test-gpu: setup
	$(PY) -m pytest -m gpu
	$(PY) -m pytest tests/test_cross_entropy_kernel.py tests/test_loss.py  # unmarked: on the GPU when there is one

test-latest:
	rm -rf $(LATEST_VENV)
	$(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q $(TORCH_SPEC)
	$(LATEST_VENV)/bin/python -m pip install -q --upgrade --upgrade-strategy eager -e ".[dev,eval]"
	$(if $(LATEST_OVERRIDES),$(LATEST_VENV)/bin/python -m pip install -q --upgrade $(LATEST_OVERRIDES))
	$(LATEST_VENV)/bin/python tests/stack_report.py $(LOCK) $(PYTEST_ARGS) -m "not gpu and not slow" $(LATEST_TESTS)

lock: setup
	$(PY) -m pip install -q "$(UV_SPEC)"
	$(VENV)/bin/uv pip compile pyproject.toml $(addprefix --extra ,$(subst $(comma), ,$(EXTRAS))) \
		--python-version $(LOCK_PYTHON) --find-links $(TORCH_CPU_WHEELS) -c <(echo "$(word 1,$(TORCH_SPEC))+cpu") \
		--no-emit-package torch --no-emit-package triton --custom-compile-command "make lock" -o $(LOCK)

demo: setup
	$(VENV)/bin/mhar demo --out demo_out

lab: setup
	$(VENV)/bin/jupyter lab notebooks/

bench: setup
	$(VENV)/bin/mhar bench routing --out benchmarks/kernels/results_local.json

clean:
	rm -rf $(VENV) $(LATEST_VENV) demo_out .pytest_cache
