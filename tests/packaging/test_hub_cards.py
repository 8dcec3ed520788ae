"""The Hub-facing files carry the metadata the Hub reads, and their usage snippets run.

Model cards (``model_cards/*.md`` and a README.md next to any shipped asset) and the README of the
``custom_generate`` repo folder start with YAML front matter; ``custom_generate/generate.py`` defines
``generate(model, ...)``; ``custom_generate/requirements.txt`` holds lines both ``packaging`` and
transformers' own requirement check understand."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from hf_treegen.hub import CUSTOM_GENERATE_DIR

ROOT = Path(__file__).resolve().parents[2]
HUB_DIR = Path(CUSTOM_GENERATE_DIR)
HUB_README = HUB_DIR / "README.md"
GENERATE_PY = HUB_DIR / "custom_generate" / "generate.py"
REQUIREMENTS = HUB_DIR / "custom_generate" / "requirements.txt"
MODEL_CARDS = sorted((ROOT / "model_cards").glob("*.md")) + sorted((ROOT / "hf_treegen" / "assets").glob("*/README.md"))
CARD_KEYS = ("license", "base_model", "library_name", "tags")
# the comparison operators transformers.dynamic_module_utils.check_python_requirements understands
TRANSFORMERS_OPERATORS = {"==", "!=", ">", "<", ">=", "<="}


def front_matter(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    match = re.match(r"---\n(.*?\n)---\n", text, flags=re.S)
    assert match, f"{path} does not start with a '---' YAML front matter block"
    data = yaml.safe_load(match.group(1))
    assert isinstance(data, dict), f"{path}: the front matter is not a mapping"
    return data


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), flags=re.S | re.M)


def _strings(value) -> list:
    return [value] if isinstance(value, str) else value


def test_there_is_a_model_card():
    assert MODEL_CARDS, "no model card under model_cards/"


@pytest.mark.parametrize("card", MODEL_CARDS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_model_card_front_matter(card):
    meta = front_matter(card)
    missing = [key for key in CARD_KEYS if not meta.get(key)]
    assert not missing, f"{card.name}: front matter lacks {missing}"
    assert meta["license"] == "apache-2.0"
    base_models = _strings(meta["base_model"])
    assert base_models and all(isinstance(b, str) and b.count("/") == 1 for b in base_models), base_models
    assert isinstance(meta["library_name"], str)
    assert isinstance(meta["tags"], list) and all(isinstance(t, str) and t for t in meta["tags"])
    assert "pipeline_tag" not in meta  # a drafter generates nothing on its own; the Hub would offer a widget
    if "language" in meta:
        assert all(isinstance(code, str) for code in _strings(meta["language"]))
    if "datasets" in meta:
        assert all(isinstance(d, str) and "/" in d for d in _strings(meta["datasets"])), meta["datasets"]


def test_custom_generate_readme_front_matter():
    meta = front_matter(HUB_README)
    assert meta.get("library_name") == "transformers"
    assert "custom_generate" in (meta.get("tags") or [])
    assert meta.get("license") == "apache-2.0"


def test_generate_py_defines_generate_taking_the_model_by_keyword():
    tree = ast.parse(GENERATE_PY.read_text(encoding="utf-8"))
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert "generate" in functions, "custom_generate/generate.py defines no top-level generate()"
    args = functions["generate"].args
    # transformers calls generate(model=..., ...) or partial(generate, model=...)(prompt, ...): the model
    # is keyword-only, and the one positional parameter is the prompt
    assert [a.arg for a in args.kwonlyargs] == ["model"]
    assert [a.arg for a in args.posonlyargs + args.args] == ["inputs"]
    assert args.kwarg is not None, "generate() must take **kwargs: transformers passes every generate() argument"


def _requirement_lines() -> list[str]:
    lines = [line.strip() for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_requirements_parse_and_fit_transformers_check():
    lines = _requirement_lines()
    assert lines, "requirements.txt lists nothing"
    for line in lines:
        req = Requirement(line)  # raises InvalidRequirement on a malformed line
        # transformers looks each line up by name with importlib.metadata and compares one version:
        # extras, markers, URLs or several specifiers would be misread there
        assert not req.extras and req.marker is None and req.url is None, line
        specifiers = list(req.specifier)
        assert len(specifiers) <= 1 and all(s.operator in TRANSFORMERS_OPERATORS for s in specifiers), line


def test_requirements_ask_for_this_package_at_a_version_it_has():
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    ours = [Requirement(line) for line in _requirement_lines() if Requirement(line).name == project["name"]]
    assert ours, f"requirements.txt does not ask for {project['name']}"
    assert ours[0].specifier.contains(project["version"]), (ours[0], project["version"])


def test_transformers_accepts_the_requirements_in_this_environment():
    from transformers.dynamic_module_utils import check_python_requirements

    check_python_requirements(CUSTOM_GENERATE_DIR, requirements_file="custom_generate/requirements.txt")


# ------------------------------------------------------------------------------- snippets, on the real model
def _run(code: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<snippet>", "exec"), {})
    return out.getvalue()


@pytest.mark.real_model
def test_drafter_card_usage_snippet_runs():
    card = ROOT / "model_cards" / "smollm2-135m-domino.md"
    printed = _run(python_blocks(card)[0])
    assert "identical to stock greedy generate(): True" in printed, printed


@pytest.mark.real_model
def test_custom_generate_readme_usage_runs_from_the_local_folder():
    from hf_treegen.models import smollm2_dir

    code = python_blocks(HUB_README)[0]
    hub_names = {'"HuggingFaceTB/SmolLM2-135M-Instruct"': repr(str(smollm2_dir())),  # no Hub access in tests
                 '"your-name/hf-treegen-tree-decoding"': repr(CUSTOM_GENERATE_DIR)}
    for name, local in hub_names.items():
        assert name in code, name
        code = code.replace(name, local)
    printed = _run(code)
    assert "same tokens as stock greedy generate(): True" in printed, printed


def test_drafter_card_publishes_every_file_the_drafter_folder_holds():
    from hf_treegen.models import DEFAULT_DRAFTER_DIR

    card = ROOT / "model_cards" / "smollm2-135m-domino.md"
    publishing = next(code for code in python_blocks(card) if "upload_folder" in code)
    if "allow_patterns" in publishing:  # a filtered upload must still name every file
        missing = [f.name for f in DEFAULT_DRAFTER_DIR.iterdir() if f.name not in publishing]
        assert not missing, f"the publishing snippet leaves out {missing}"
    assert "datastore.safetensors" in card.read_text()
