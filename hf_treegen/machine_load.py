"""How much of the CPUs other processes used while this one measured something.

A cost profile timed beside other work prices every forward too high, unevenly, and is cached for
later calls; :func:`~hf_treegen.calibration.calibrate` uses this to say so. Linux only: elsewhere the
share is unknown (None) and nothing is said.
"""

from __future__ import annotations

from pathlib import Path

BUSY_SHARE = 0.2  # other processes above this share of all CPU time make a measurement suspect


class OtherProcesses:
    """``with OtherProcesses() as others: ...`` then ``others.share``: the fraction (0-1) of all CPU time
    during the block that went to other processes (or to the hypervisor's other guests), None where
    ``proc`` has no /proc/stat."""

    def __init__(self, proc: Path | str = "/proc"):
        self.proc = Path(proc)
        self.share: float | None = None

    def __enter__(self) -> "OtherProcesses":
        self._start = self._ticks()
        return self

    def __exit__(self, *exc) -> None:
        end = self._ticks()
        if self._start is None or end is None:
            return
        total, busy, own = (b - a for a, b in zip(self._start, end))
        if total > 0:
            self.share = min(max((busy - own) / total, 0.0), 1.0)

    def _ticks(self) -> tuple[int, int, int] | None:
        """(all CPU ticks, busy ticks, this process's ticks) so far; None without /proc."""
        try:
            fields = [int(v) for v in (self.proc / "stat").read_text().splitlines()[0].split()[1:9]]
            own = (self.proc / "self" / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError, ValueError):
            return None
        user, nice, system, idle, iowait, irq, softirq, steal = fields
        # /proc/self/stat after the command name: state is field 3, utime and stime fields 14 and 15
        return sum(fields), user + nice + system + irq + softirq + steal, int(own[11]) + int(own[12])


def busy_warning(share: float | None, what: str) -> str | None:
    """What to tell the user when other processes took ``share`` of the CPUs while ``what`` was measured."""
    if share is None or share <= BUSY_SHARE:
        return None
    return (f"other processes used {share:.0%} of the CPUs while {what} was measured, so it prices forwards "
            f"too high; run `hf-treegen calibrate` again on a quiet machine.")
