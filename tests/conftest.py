import os
import tempfile

import pytest
import torch



@pytest.fixture(autouse=True, scope="session")
def _isolated_cost_cache():
    """Cost curves measured for tiny models go to a throwaway dir; converted real models stay shared."""
    from hf_treegen.builders import cost_model

    with tempfile.TemporaryDirectory() as tmp:
        original = cost_model.cache_dir
        cost_model.cache_dir = lambda *parts: _mk(tmp, *parts)
        yield
        cost_model.cache_dir = original


def _mk(root, *parts):
    from pathlib import Path

    path = Path(root).joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", min(2, os.cpu_count() or 1))))
