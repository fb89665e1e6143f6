# Two commands for a fresh machine; each builds the virtual environment it needs.
#   make run    the main job: `pods train`, the embedded default
#   make test   lint + the test suite (what CI runs)
# The venv is made once in .venv/ and rebuilt when pyproject.toml changes.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Which torch to install if the venv has none. Without an NVIDIA driver we pin the CPU
# release 2.13.0 (a CPU wheel where one is cached); with one, pip's newest build is used.
# Override: make test TORCH_SPEC='torch==2.9.1'
TORCH_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo torch || echo torch==2.13.0)

.PHONY: run test bench lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[train,dev,trl]"
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/pods train

bench: $(VENV)/.installed
	$(PY) benchmarks/downsample_speed.py

lint: $(VENV)/.installed
	$(PY) -m ruff check src tests benchmarks

test: lint
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV)
