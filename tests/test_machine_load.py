"""Other processes' share of the CPUs while a cost profile is measured, and the warning it earns."""

import warnings

import pytest
import torch

from hf_treegen.calibration import calibrate as real_calibrate  # imported before conftest pins it
from hf_treegen.machine_load import BUSY_SHARE, OtherProcesses, busy_warning
from tests.helpers import tiny_target


def write_proc(root, busy: int, idle: int, own: int) -> None:
    """A /proc with ``busy`` ticks split over user, system and steal, ``idle`` idle ticks, and this
    process (whose command name has a space and a parenthesis) at ``own`` ticks of user and system time."""
    (root / "self").mkdir(exist_ok=True)
    user, system, steal = busy - busy // 2 - busy // 4, busy // 2, busy // 4
    (root / "stat").write_text(f"cpu  {user} 0 {system} {idle} 0 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    fields = ["S"] + ["0"] * 10 + [str(own - own // 3), str(own // 3)] + ["0"] * 30
    (root / "self" / "stat").write_text(f"4242 (python (x)) {' '.join(fields)}\n")


def test_the_share_counts_every_other_process_and_the_hypervisor_but_not_this_one(tmp_path):
    write_proc(tmp_path, busy=1000, idle=5000, own=300)
    with OtherProcesses(tmp_path) as others:
        write_proc(tmp_path, busy=1000 + 700, idle=5000 + 300, own=300 + 400)  # 1000 ticks, 400 of them ours
    assert others.share == pytest.approx(0.3)
    with OtherProcesses(tmp_path / "nowhere") as unknown:
        pass
    assert unknown.share is None


def test_the_warning_names_the_share_and_what_to_run():
    assert busy_warning(None, "x") is None and busy_warning(BUSY_SHARE, "x") is None
    text = busy_warning(0.55, "the cost profile p.json")
    assert "55%" in text and "the cost profile p.json" in text and "hf-treegen calibrate" in text


def test_a_profile_measured_beside_other_work_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TREEGEN_CACHE", str(tmp_path))

    class Busy(OtherProcesses):
        def __exit__(self, *exc):
            self.share = 0.6

    model = tiny_target("llama", torch.float32)
    monkeypatch.setattr("hf_treegen.calibration.OtherProcesses", Busy)
    with pytest.warns(UserWarning, match="60% of the CPUs.*calibrate` again"):
        real_calibrate(model, max_rows=3, progress=False)
    monkeypatch.setattr("hf_treegen.calibration.OtherProcesses", OtherProcesses)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        real_calibrate(model, max_rows=3, progress=False)  # read from the cache: nothing measured, nothing said
