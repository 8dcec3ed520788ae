import os

import pytest
import torch


@pytest.fixture(autouse=True)
def _pinned_costs(monkeypatch):
    """No test times the machine: calibrate() returns the fixed test profile, so the cost-aware
    strategies and choice-width plans are the same on an idle and a busy machine.
    (tests/generation/test_auto.py calls the real calibrate, imported before this patch applies,
    with its cache in a temporary folder.)"""
    from hf_treegen import calibration
    from tests.helpers import FLAT_COSTS

    monkeypatch.setattr(calibration, "calibrate", lambda model, drafter=None, **_: FLAT_COSTS)


@pytest.fixture(autouse=True)
def _threads():
    # OMP_NUM_THREADS=1 when a background job holds a core: oversubscribed OpenMP threads spin-wait
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", min(2, os.cpu_count() or 1))))
