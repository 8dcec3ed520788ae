import os
import tempfile
from pathlib import Path

import pytest
import torch


def _subdir(root: str, *parts: str) -> Path:
    path = Path(root).joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(autouse=True, scope="session")
def _isolated_cost_cache():
    """Cost curves measured for tiny models go to a throwaway dir; the converted real model stays shared."""
    from hf_treegen.builders import cost_model

    with tempfile.TemporaryDirectory() as tmp:
        original = cost_model.cache_dir
        cost_model.cache_dir = lambda *parts: _subdir(tmp, *parts)
        yield
        cost_model.cache_dir = original


@pytest.fixture(autouse=True)
def _pinned_costs(monkeypatch):
    """``auto`` never times the machine inside a test: calibrate() returns the flat test profile.
    (tests/generation/test_auto.py calls the real calibrate, imported before this patch applies.)"""
    from hf_treegen import calibration
    from tests.helpers import FLAT_COSTS

    monkeypatch.setattr(calibration, "calibrate", lambda model, drafter=None, **_: FLAT_COSTS)


@pytest.fixture(autouse=True)
def _threads():
    # OMP_NUM_THREADS=1 when a background job holds a core: oversubscribed OpenMP threads spin-wait
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", min(2, os.cpu_count() or 1))))
