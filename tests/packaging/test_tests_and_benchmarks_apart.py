"""benchmarks/ and tests/ never import each other: what both need lives in the package (hf_treegen.bench:
the graft replay, the training curve, the vLLM engine runner, the tiny random models).

A benchmark runs as ``python benchmarks/NAME.py`` against the installed package, so it may not import
``tests`` (nor put the checkout on sys.path to reach it, nor run ``python -m tests.…`` or name a class
under ``tests.`` for another process to import). A test tests the package, so it may not import a
script from benchmarks/ (``import benchmarks``, or loading the file through importlib or runpy); running
one as a command, or reading its name, is fine."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS, TESTS = ROOT / "benchmarks", ROOT / "tests"

# a dotted name under tests (a module to run with -m, a class for vLLM's custom_class)
TESTS_DOTTED = re.compile(r"^tests(\.[A-Za-z_]\w*)+$")
# shell: `python -m tests.x`, `python -c "import tests..."` / "from tests... import"
SHELL_USES_TESTS = re.compile(r"-m\s+tests\.|\bimport\s+tests\b|\bfrom\s+tests[\s.]")
# what loads a Python file or module by name
LOADERS = {"spec_from_file_location", "SourceFileLoader", "SourcelessFileLoader", "run_path", "run_module",
           "import_module", "__import__", "exec", "load_source"}
# a string naming benchmarks/ or a script in it (as a path or as a module)
BENCHMARK_NAME = re.compile(r"^(\.?/)?benchmarks(/[\w.-]+\.py|\.\w+(\.\w+)*)?/?$")


def _top(module: str | None) -> str:
    return (module or "").split(".")[0]


def _called(node: ast.Call) -> str:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def _changes_sys_path(node: ast.AST) -> bool:
    """``sys.path.insert/append/extend(...)``, ``sys.path[...] = ...`` or ``sys.path += ...``."""
    def is_sys_path(n):
        return (isinstance(n, ast.Attribute) and n.attr == "path" and isinstance(n.value, ast.Name)
                and n.value.id == "sys")

    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in {"insert", "append", "extend"} and is_sys_path(node.func.value)
    if isinstance(node, (ast.Assign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(is_sys_path(t) or (isinstance(t, ast.Subscript) and is_sys_path(t.value)) for t in targets)
    return False


def uses_of_tests(path: Path) -> list[str]:
    """Where the benchmark file ``path`` reaches into tests/ ("line: what")."""
    text = path.read_text()
    if path.suffix != ".py":
        return [f"{text.count(chr(10), 0, m.start()) + 1}: runs {m.group().strip()!r}"
                for m in SHELL_USES_TESTS.finditer(text)]
    found = []
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import) and any(_top(a.name) == "tests" for a in node.names):
            found.append(f"{node.lineno}: import tests")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _top(node.module) == "tests":
            found.append(f"{node.lineno}: from {node.module} import")
        elif _changes_sys_path(node):
            found.append(f"{node.lineno}: changes sys.path (the package is installed; tests are not for benchmarks)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and TESTS_DOTTED.match(node.value):
            found.append(f"{node.lineno}: names {node.value!r}")
    return sorted(found, key=lambda line: int(line.split(":")[0]))


def uses_of_benchmarks(path: Path) -> list[str]:
    """Where the test file ``path`` imports or loads a script from benchmarks/ ("line: what")."""
    tree = ast.parse(path.read_text(), str(path))
    found, loads, names = [], [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(_top(a.name) == "benchmarks" for a in node.names):
            found.append(f"{node.lineno}: import benchmarks")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _top(node.module) == "benchmarks":
            found.append(f"{node.lineno}: from {node.module} import")
        elif isinstance(node, ast.Call) and _called(node) in LOADERS:
            loads.append(f"{node.lineno}: {_called(node)}()")
        elif _changes_sys_path(node):
            loads.append(f"{node.lineno}: changes sys.path")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and BENCHMARK_NAME.match(node.value):
            names.append(node.value)
    if loads and names:  # a file that names benchmarks/ and loads code by path or name: it loads a script
        found += [f"{load} in a file that names {names[0]!r}" for load in loads]
    return sorted(found, key=lambda line: int(line.split(":")[0]))


def test_no_benchmark_imports_tests():
    files = sorted(p for p in BENCHMARKS.rglob("*") if p.is_file() and p.suffix in {".py", ".sh"})
    assert files
    uses = {str(p.relative_to(ROOT)): uses_of_tests(p) for p in files}
    uses = {name: found for name, found in uses.items() if found}
    assert not uses, f"benchmarks reach into tests/ (move what they need into hf_treegen/bench/): {uses}"


def test_no_test_imports_a_benchmark_script():
    files = sorted(TESTS.rglob("*.py"))
    assert files
    uses = {str(p.relative_to(ROOT)): uses_of_benchmarks(p) for p in files}
    uses = {name: found for name, found in uses.items() if found}
    assert not uses, f"tests load benchmarks/ scripts (test the package module behind them instead): {uses}"


def test_the_checks_catch_what_they_forbid(tmp_path):
    """Each way in which a benchmark reached tests/, or a test a benchmark, before they were parted."""
    bench = tmp_path / "bench.py"
    bench.write_text('import subprocess, sys\nsys.path.insert(0, "/repo")\nfrom tests.helpers import tiny_target\n'
                     'subprocess.run([sys.executable, "-m", "tests.vllm.engine_run"])\n'
                     'PROPOSER = "tests.vllm.fixed_proposer.FixedProposer"\nimport tests\n')
    assert [line.split(":")[0] for line in uses_of_tests(bench)] == ["2", "3", "4", "5", "6"]
    script = tmp_path / "run.sh"
    script.write_text("$PY -m pytest -q tests/test_gpu.py\n$PY -m tests.vllm.engine_run < spec.json\n")
    assert [line.split(":")[0] for line in uses_of_tests(script)] == ["2"]
    fine = tmp_path / "fine.py"
    fine.write_text('import subprocess, sys\nfrom hf_treegen.bench.tiny_models import tiny_target\n'
                    'subprocess.run([sys.executable, "-m", "pytest", "tests/test_gpu.py"])\n')
    assert uses_of_tests(fine) == []

    loads = tmp_path / "test_loads.py"
    loads.write_text('import importlib.util\nfrom pathlib import Path\n'
                     'SCRIPT = Path(__file__).parents[2] / "benchmarks" / "graft_replay.py"\n'
                     'spec = importlib.util.spec_from_file_location("graft_replay", SCRIPT)\n')
    assert uses_of_benchmarks(loads) == ["4: spec_from_file_location() in a file that names 'benchmarks'"]
    imports = tmp_path / "test_imports.py"
    imports.write_text("import runpy\nfrom benchmarks.training_curve import main\n"
                       "runpy.run_path('benchmarks/training_curve.py')\n")
    assert len(uses_of_benchmarks(imports)) == 2
    reads = tmp_path / "test_reads.py"  # reading benchmarks/ names, or running a script, is fine
    reads.write_text('import subprocess, sys\nfrom pathlib import Path\nBENCH = Path("benchmarks")\n'
                     'names = [p.stem for p in BENCH.glob("*.py")]\n'
                     'subprocess.run([sys.executable, "benchmarks/graft_replay.py", "--help"])\n')
    assert uses_of_benchmarks(reads) == []
