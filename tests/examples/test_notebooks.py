"""Every notebook in examples/notebooks runs headless from top to bottom (offline, the embedded pair) without a
cell error, and carries its Colab badge and stored outputs. nbclient/nbformat/ipykernel are in the test extra:
if one is missing this module fails to import, it does not skip."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

import ipykernel  # noqa: F401  (the kernel the notebooks run in)
from tests.examples.conftest import EXAMPLES, example_env

NOTEBOOKS = ("tree_decoding_quickstart", "compiled_choice", "qasper_rag")
DIR = EXAMPLES / "notebooks"


def test_the_notebooks_are_the_expected_ones():
    assert sorted(p.stem for p in DIR.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_badge_and_stored_outputs(name):
    nb = nbformat.read(DIR / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    first = nb.cells[0]
    assert first.cell_type == "markdown"
    assert (f"https://colab.research.google.com/github/hf-treegen/hf_treegen/blob/main/examples/notebooks/{name}.ipynb"
            in first.source)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "store the notebook executed (build_notebooks.py)"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), "a plot is stored"


@pytest.mark.real_model
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_headless(name, monkeypatch):
    for key, value in example_env().items():  # the kernel inherits this environment
        monkeypatch.setenv(key, value)
    nb = nbformat.read(DIR / f"{name}.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(DIR)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs)
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    if name == "tree_decoding_quickstart":
        assert "embedded SmolLM2-135M-Instruct" in text and "identical to stock generate(): True" in text
    elif name == "compiled_choice":
        assert "same token ids as serial constrained decoding: True" in text
    else:
        assert "serial chose the same: True" in text and "Answer F1" in text
