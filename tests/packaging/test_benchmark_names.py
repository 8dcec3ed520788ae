"""Scripts in benchmarks/ run as ``python benchmarks/NAME.py``, which puts benchmarks/ first on sys.path:
a script named like an installed module would shadow it for every import in that process (a
``kernels.py`` once broke transformers' own ``import kernels`` in every benchmark script)."""

import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_no_benchmark_script_shadows_an_installed_module():
    shadowing = [p.name for p in sorted(BENCHMARKS.glob("*.py")) if importlib.util.find_spec(p.stem) is not None]
    assert not shadowing, f"rename these benchmarks/ scripts, they shadow installed modules: {shadowing}"
