"""Every Python block of the README runs as written, top to bottom in one namespace (as a reader
pasting them into one session would), on the embedded pair. A block preceded by a line
``<!-- not run by tests: why -->`` (needs a GPU or the Hub) is skipped, and only such blocks."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SKIP_MARK = "<!-- not run by tests:"


def python_blocks(text: str) -> list[tuple[int, str, bool]]:
    """(line number, code, skipped) of each ```python block."""
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        line = text.count("\n", 0, match.start()) + 1
        before = text[: match.start()].rstrip().splitlines()
        skipped = bool(before) and before[-1].startswith(SKIP_MARK)
        blocks.append((line, match.group(1), skipped))
    return blocks


def test_blocks_are_found():
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 3  # one per feature: tree generate(), compiled choice, QASPER RAG and metrics
    assert "load_default_pair()" in blocks[0][1]  # the first snippet starts from the shipped pair


@pytest.mark.real_model
def test_every_readme_python_block_runs(monkeypatch):
    import hf_treegen as htg
    from hf_treegen import calibration

    # the README calls htg.calibrate() itself: pin it as every test pins calibration (no timing, no cache)
    monkeypatch.setattr(htg, "calibrate", calibration.calibrate)
    namespace: dict = {"__name__": "readme"}
    printed = io.StringIO()
    for line, code, skipped in python_blocks(README.read_text()):
        if skipped:
            continue
        with contextlib.redirect_stdout(printed):
            try:
                exec(compile(code, f"README.md:{line}", "exec"), namespace)
            except Exception as error:  # name the block, not just the exec frame
                raise AssertionError(f"README.md block at line {line} failed: {error!r}") from error
    shown = printed.getvalue()
    assert "identical to stock generate(): True" in shown
    assert "compiled equals serial: True" in shown
    assert "False" not in shown, shown


@pytest.mark.parametrize("page, heading", [(README, "## Speed"),
                                           (README.parent / "model_cards" / "smollm2-135m-domino.md", "## Measured speed")],
                         ids=["README", "model card"])
def test_the_headline_table_quotes_its_results_file(page, heading):
    """Every number in the speed table appears in the file the benchmark named beside it wrote."""
    text = page.read_text()
    section = text[text.index(heading + "\n"):]
    section = section[: section.index("\n## ", 1)]
    results = README.parent / "docs" / "results" / "headline.txt"
    assert "benchmarks/headline.sh" in section and "docs/results/headline.txt" in section
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|--")]
    numbers = re.findall(r"(?<![\w.])(\d+\.\d+)x?(?![\w.])", "\n".join(rows[1:]))  # past the header row
    assert len(numbers) >= 10
    quoted = results.read_text()
    missing = [n for n in numbers if not re.search(rf"(?<![\d.]){re.escape(n)}(?![\d])", quoted)]
    assert not missing, f"{page.name}: numbers not in {results.name}: {missing}"
