"""The documentation site builds in strict mode: a broken link, a missing page or snippet, or an API
name mkdocstrings cannot find fails the build (mkdocs.yml sets ``strict`` and the link checks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build(site_dir: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site_dir)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_site_builds_strict(tmp_path):
    done = build(tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp_path / "site"
    index = (site / "index.html").read_text()
    assert "Tree speculative decoding" in index
    reference = (site / "reference" / "choice.html").read_text()
    assert "CompiledChoiceProcessor" in reference and "select" in reference  # mkdocstrings rendered the class
    assert (site / "results" / "speed_t0.png").is_file()  # the benchmark plots are part of the site
    assert "--8&lt;--" not in (site / "benchmarks.html").read_text()  # every snippet was included


def test_a_broken_link_fails_the_build(tmp_path):
    """The check above means something: a strict build with one dead link fails (the site's own
    mkdocs.yml sets the same link validation)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Broken\n\nSee [nowhere](no-such-page.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"site_name: broken\ndocs_dir: {docs}\nstrict: true\nvalidation:\n  links:\n    not_found: warn\n")
    done = build(tmp_path / "site", config)
    assert done.returncode != 0
    assert "no-such-page.md" in done.stdout + done.stderr
