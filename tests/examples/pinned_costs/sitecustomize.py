"""Put on PYTHONPATH by tests/examples for the example scripts and notebook kernels they start: calibrate()
returns the fixed test profile (tests/helpers.FLAT_COSTS), as tests/conftest.py does in-process, so no test
times the machine: the runs take the same time on an idle and a busy machine and never write a profile to
the calibration cache. Outputs do not depend on the profile (it only shapes trees and probe widths)."""

import os

if os.environ.get("HF_TREEGEN_TEST_PINNED_COSTS") == "1":
    import hf_treegen as htg
    from hf_treegen import calibration

    FLAT_COSTS = htg.CostProfile.from_verify_seconds({1: 0.010, 65: 0.010, 1024: 0.100}, draft_s=0.001)
    calibration.calibrate = lambda model, drafter=None, **_: FLAT_COSTS
