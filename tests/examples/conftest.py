"""Helpers for tests/examples: run an example (or a notebook kernel) as a user would, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PINNED = Path(__file__).resolve().parent / "pinned_costs"


def example_env(pinned_costs: bool = True) -> dict:
    """This checkout first on the path (it wins over an installed hf_treegen), offline, one thread unless the
    caller set OMP_NUM_THREADS; with ``pinned_costs`` the fixed test cost profile (pinned_costs/sitecustomize.py)."""
    env = dict(os.environ)
    paths = ([str(PINNED)] if pinned_costs else []) + [str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if pinned_costs:
        env["HF_TREEGEN_TEST_PINNED_COSTS"] = "1"
    return env


def run_example(script: str, *args: str, timeout: int = 600, pinned_costs: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLES / script), *args], cwd=ROOT, env=example_env(pinned_costs),
                          capture_output=True, text=True, timeout=timeout)
