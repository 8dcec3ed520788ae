"""No function in the package is longer than 80 lines: past that, split it into functions whose names
say what each part does (or a small class holding the state its parts share)."""

import ast
from pathlib import Path

import hf_treegen

ROOT = Path(hf_treegen.__file__).parent
MAX_LINES = 80
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def function_lengths(root: Path = ROOT) -> list[tuple[int, str, str]]:
    """(lines from ``def`` to its last line, decorators excluded; path relative to ``root``'s parent;
    qualified name such as ``Class.method`` or ``outer.inner``) of every function under ``root``."""
    rows: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, prefix: str, path: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (*DEFS, ast.ClassDef)):
                if isinstance(child, DEFS):
                    rows.append((child.end_lineno - child.lineno + 1, path, prefix + child.name))
                visit(child, f"{prefix}{child.name}.", path)
            else:
                visit(child, prefix, path)

    for file in sorted(root.rglob("*.py")):
        visit(ast.parse(file.read_text(encoding="utf-8"), filename=str(file)), "", file.relative_to(root.parent).as_posix())
    return rows


def test_the_check_counts_from_def_to_the_last_line_and_names_methods(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    body = "".join(f"        x{i} = {i}\n" for i in range(79))
    (package / "mod.py").write_text(f"class A:\n    @staticmethod\n    def long():\n{body}        return 0\n\n"
                                    f"    def short(self):\n        return 1\n")
    assert sorted(function_lengths(package)) == [(2, "pkg/mod.py", "A.short"), (81, "pkg/mod.py", "A.long")]


def test_no_function_is_longer_than_80_lines():
    too_long = sorted((row for row in function_lengths() if row[0] > MAX_LINES), reverse=True)
    listing = "\n".join(f"  {path}: {name} ({lines} lines)" for lines, path, name in too_long)
    assert not too_long, f"{len(too_long)} functions are longer than {MAX_LINES} lines; split them:\n{listing}"
