"""Every notebook in examples/notebooks runs headless from top to bottom (offline, the embedded pair) without a
cell error, and carries its Colab badge, an install cell for the repository that pyproject's [project.urls]
names, the cells build_notebooks.py writes, and stored outputs (the quickstart's on the README's setting).
nbclient/nbformat/ipykernel are in the test extra: if one is missing this module fails to import, it does not
skip."""

from __future__ import annotations

import importlib.util
import re
import sys

import nbformat
import pytest
from nbclient import NotebookClient

import ipykernel  # noqa: F401  (the kernel the notebooks run in)
from tests.examples.conftest import EXAMPLES, ROOT, example_env

NOTEBOOKS = ("tree_decoding_quickstart", "compiled_choice", "qasper_rag")
DIR = EXAMPLES / "notebooks"


def _load_builder():
    spec = importlib.util.spec_from_file_location("build_notebooks", DIR / "build_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BUILDER = _load_builder()


def test_the_repository_url_comes_from_pyproject(tmp_path):
    """build_notebooks reads [project.urls] Repository (tomllib, or its own reader on a Python without one:
    both give the same), and refuses a pyproject without a GitHub address."""
    text = (ROOT / "pyproject.toml").read_text()
    url = BUILDER.repo_url()
    assert url.startswith("https://github.com/") and not url.endswith(("/", ".git"))
    assert BUILDER._table_value(text, "project.urls", "Repository") == url
    if sys.version_info >= (3, 11):
        import tomllib

        assert tomllib.loads(text)["project"]["urls"]["Repository"].rstrip("/") == url
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "x"\n\n[project.urls]\nRepository = "https://github.com/someone/fork"\n')
    assert BUILDER.repo_url(other) == "https://github.com/someone/fork"
    assert BUILDER.colab_url("n", BUILDER.repo_url(other)) == (
        "https://colab.research.google.com/github/someone/fork/blob/main/examples/notebooks/n.ipynb")
    other.write_text('[project]\nname = "x"\n')
    with pytest.raises(ValueError, match="Repository"):
        BUILDER.repo_url(other)


def test_the_notebooks_are_the_expected_ones():
    assert sorted(p.stem for p in DIR.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_badge_and_stored_outputs(name):
    nb = nbformat.read(DIR / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    first = nb.cells[0]
    assert first.cell_type == "markdown"
    url = BUILDER.repo_url()
    assert f"({BUILDER.colab_url(name, url)})" in first.source
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert any(f' @ git+{url}"' in c.source for c in code), "the install cell installs from pyproject's Repository"
    built = BUILDER.build(name)
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in built.cells], (
        "the committed notebook's cells are build_notebooks.py's: edit the builder and rebuild")
    assert all(c.execution_count for c in code), "store the notebook executed (build_notebooks.py)"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), "a plot is stored"


def test_the_quickstart_stores_the_readme_setting():
    """The quickstart's stored outputs are on the README's setting (the embedded pair, 2 CPU threads, 128 new
    tokens, greedy) and show what it claims: output identical to stock, and auto faster than stock."""
    nb = nbformat.read(DIR / "tree_decoding_quickstart.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "embedded SmolLM2-135M-Instruct" in text and "2 CPU threads" in text
    assert "identical to stock generate(): True" in text
    assert "3 prompts x 128 new tokens, greedy, 2 CPU threads" in text
    auto = re.search(r"^auto +([\d.]+) +([\d.]+)x .* (\d+)/(\d+) ", text, re.MULTILINE)
    assert auto, text
    assert float(auto.group(2)) > 1.0 and auto.group(3) == auto.group(4), auto.group(0)


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
