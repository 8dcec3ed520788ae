"""The package's import graph: no cycles, and no module imports from a layer above its own
(the layers of docs/design.md). Lazy imports inside functions count too."""

import ast
from pathlib import Path

import hf_treegen

ROOT = Path(hf_treegen.__file__).parent

# lowest first; a module belongs to the longest prefix listed
LAYERS = [
    ("data", ["hf_treegen.defaults", "hf_treegen.tree", "hf_treegen.costs", "hf_treegen.acceptance", "hf_treegen.ops", "hf_treegen.cache_dir",
              "hf_treegen.files", "hf_treegen.machine_load",
              "hf_treegen.extras", "hf_treegen.datastore", "hf_treegen.learning_datastore"]),
    ("target", ["hf_treegen.target"]),
    ("proposers", ["hf_treegen.speculation", "hf_treegen.drafters", "hf_treegen.builders", "hf_treegen.lookup",
                   "hf_treegen.choice.grammar",
                   "hf_treegen.choice.probe", "hf_treegen.choice.width", "hf_treegen.choice.serial"]),
    ("measurement", ["hf_treegen.calibration"]),
    ("decoding", ["hf_treegen.generation", "hf_treegen.choice", "hf_treegen.integrations", "hf_treegen"]),
    ("project", ["hf_treegen.corpora", "hf_treegen.prompt_data", "hf_treegen.train", "hf_treegen.bench",
                 "hf_treegen.rag", "hf_treegen.metrics", "hf_treegen.models", "hf_treegen.hub", "hf_treegen.cli",
                 "hf_treegen.cli_types"]),
]
# evaluate's loader runs these as standalone scripts; they are not part of the import graph
STANDALONE = ("hf_treegen.metrics.qasper.", "hf_treegen.metrics.all_evidence.", "hf_treegen.hub.custom_generate.")


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if not name.startswith(STANDALONE):
            out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict) -> set[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" for a in node.names]
            targets = [t if t in modules else base for t in targets]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rsplit(".", 1)[0] if "." in target else ""
            if target.startswith("hf_treegen") and target != name:
                found.add(target)
    return found


def _layer(name: str) -> int:
    best, level = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            inside = name == prefix or (name.startswith(prefix + ".") and prefix != "hf_treegen")  # root: itself only
            if inside and len(prefix) > best:
                best, level = len(prefix), i
    assert level is not None, f"{name} belongs to no layer; add it to LAYERS and docs/design.md"
    return level


def _graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_no_module_imports_from_a_higher_layer():
    upward = [f"{a} ({LAYERS[_layer(a)][0]}) -> {b} ({LAYERS[_layer(b)][0]})"
              for a, deps in _graph().items() for b in deps if _layer(b) > _layer(a)]
    assert not upward, "\n".join(sorted(upward))


def test_the_import_graph_has_no_cycles():
    graph = _graph()
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    cycles = []

    def visit(node, stack):
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(cycles)
