"""``hf_treegen.calibrate``: :func:`hf_treegen.calibration.calibrate` with the decode loop's timer of a
draft round's and a plain step's fixed costs (the measurement layer cannot import the loop)."""

from __future__ import annotations

from .. import calibration
from ..costs import CostProfile
from .loop import measure_fixed_costs


def calibrate(model, drafter=None, **kwargs) -> CostProfile:
    """:func:`hf_treegen.calibration.calibrate` (same arguments), with a drafter also timing a draft
    round's and a plain step's fixed costs (``CostProfile.round_s``, ``step_s``) by decoding a few rounds."""
    return calibration.calibrate(model, drafter, fixed_costs=measure_fixed_costs, **kwargs)
