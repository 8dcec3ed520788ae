import os

import pytest
import torch
from hypothesis import settings

# CI checks a fixed set of examples, so its verdict on a commit is reproducible; local runs keep exploring.
settings.register_profile("ci", derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def _pinned_costs(monkeypatch):
    """No test times the machine: calibrate() (and cached_profile()) return the fixed test profile, so the cost-aware
    strategies and choice-width plans are the same on an idle and a busy machine.
    (tests/generation/test_auto.py calls the real calibrate, imported before this patch applies,
    with its cache in a temporary folder.)"""
    from hf_treegen import calibration
    from tests.helpers import FLAT_COSTS

    monkeypatch.setattr(calibration, "calibrate", lambda model, drafter=None, **_: FLAT_COSTS)
    monkeypatch.setattr(calibration, "cached_profile", lambda model, drafter=None, **_: FLAT_COSTS)


@pytest.fixture(autouse=True)
def _pinned_draft_dtype(monkeypatch):
    """Loaded drafters keep the target's dtype on every CPU: default_draft_dtype would pick bf16 on one
    with native bf16 matmuls, so round-trip comparisons would pass on one machine and fail on another.
    tests/drafters/test_draft_dtype.py pins each answer of the rule itself."""
    from hf_treegen.drafters import loading

    monkeypatch.setattr(loading, "native_bf16_matmuls", lambda device="cpu": False)


@pytest.fixture(autouse=True)
def _threads():
    # OMP_NUM_THREADS=1 when a background job holds a core: oversubscribed OpenMP threads spin-wait
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", min(2, os.cpu_count() or 1))))
