"""The prompt tables live in hf_treegen/data/prompts/*.json, come back as tuples, and stay out of the code."""

import ast
import json
from pathlib import Path

import pytest

from hf_treegen.bench import prompts as bench_prompts
from hf_treegen.prompt_data import all_eval_texts, eval_prompt_sets, prompt_table
from hf_treegen.train import prompts as train_prompts

PACKAGE = Path(__file__).resolve().parents[2] / "hf_treegen"
TABLES = sorted(path.stem for path in (PACKAGE / "data" / "prompts").glob("*.json"))


def _lists(value, path=""):
    """(path, tuple) for every sequence in a loaded table, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _lists(item, f"{path}/{key}")
    elif isinstance(value, tuple):
        yield path, value
        for index, item in enumerate(value):
            yield from _lists(item, f"{path}[{index}]")
    else:
        assert value is None or isinstance(value, str), f"{path}: {type(value).__name__}"  # no list survives


def _no_duplicate_keys(pairs):
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), f"repeated key in {keys}"
    return dict(pairs)


def test_the_data_files_are_the_expected_ones():
    assert TABLES == ["chat", "eval", "exercises", "families", "hub", "questions", "train", "workloads"]


@pytest.mark.parametrize("name", TABLES)
def test_each_table_loads_as_tuples_without_repeats(name):
    # json.loads keeps the last of two equal keys silently; the hook makes that an error
    json.loads((PACKAGE / "data" / "prompts" / f"{name}.json").read_text(encoding="utf-8"),
               object_pairs_hook=_no_duplicate_keys)
    table = prompt_table(name)
    assert prompt_table(name) is table  # cached
    assert isinstance(table.get("description", ""), str)
    for path, items in _lists(table):
        assert items, f"{name}{path} is empty"
        repeated = {item for item in items if items.count(item) > 1}
        assert not repeated, f"{name}{path} repeats {repeated}"


def test_one_list_of_evaluation_prompts_for_bench_and_train():
    sets = eval_prompt_sets()
    assert bench_prompts.BUILTIN_PROMPTS is sets
    assert list(sets) == ["code", "explain", "chat", "python-qa"]
    assert set(sets["python-qa"]) <= set(sets["code"] + sets["explain"] + sets["chat"])
    assert all_eval_texts() == frozenset(sets["code"] + sets["explain"] + sets["chat"])
    assert all(train_prompts.is_eval_prompt(text) for text in all_eval_texts())


def test_train_prompt_template_groups_have_distinct_names():
    groups = prompt_table("train")["templates"]
    assert len(train_prompts.TEMPLATES) == sum(len(group) for group in groups.values())


def test_train_reads_the_evaluation_prompts_without_importing_bench_prompts():
    for path in sorted((PACKAGE / "train").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").endswith("bench.prompts"), f"{path.name}:{node.lineno}"


def _string_count(node: ast.AST) -> int:
    return sum(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in ast.walk(node))


def _is_table_literal(node: ast.AST) -> bool:
    """A tuple/list literal, or a dict literal whose values are all tuple/list literals."""
    if isinstance(node, (ast.Tuple, ast.List)):
        return True
    return isinstance(node, ast.Dict) and bool(node.values) and all(
        isinstance(v, (ast.Tuple, ast.List)) for v in node.values)


def test_no_prompt_table_written_as_a_python_literal():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                continue
            if _is_table_literal(value) and _string_count(value) > 20:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not found, f"module-level string tables belong in hf_treegen/data/prompts/*.json: {found}"
