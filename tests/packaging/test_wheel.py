"""The wheel holds everything the package reads at run time, not only its Python modules.

The wheel is built once per session from a copy of the checkout (pyproject.toml, README.md, LICENSE and
hf_treegen/), through setuptools' PEP 517 hook in this environment (as ``pip wheel --no-build-isolation``
does: no network, about 15 s), and its file list is read with zipfile."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hf_treegen"
JUNK = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
BUILD = "from setuptools import build_meta; print(build_meta.build_wheel({out!r}))"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(PACKAGE, src / "hf_treegen", ignore=JUNK)
    result = subprocess.run([sys.executable, "-c", BUILD.format(out=str(out))], cwd=src, capture_output=True,
                            text=True, timeout=300)
    if result.returncode != 0:
        import setuptools

        pytest.fail(f"building the wheel failed (setuptools {setuptools.__version__}; the test extra asks for "
                    f"the version pyproject's build-system needs):\n{result.stderr[-3000:]}")
    name = result.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(out / name) as archive:
        yield archive


def _source_files() -> list[str]:
    """Every file of the package folder, as a wheel path (no bytecode)."""
    files = []
    for path in sorted(PACKAGE.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files.append(path.relative_to(ROOT).as_posix())
    return files


def test_the_wheel_holds_every_file_of_the_package(wheel):
    missing = sorted(set(_source_files()) - set(wheel.namelist()))
    assert not missing, f"missing from the wheel (see [tool.setuptools.package-data]): {missing}"


def test_no_bytecode_or_tests_in_the_wheel(wheel):
    stray = [n for n in wheel.namelist() if "__pycache__" in n or n.endswith(".pyc") or n.startswith("tests/")]
    assert not stray, stray


def test_the_shipped_drafter_with_its_config_weights_vocab_map_and_datastore(wheel):
    names = set(wheel.namelist())
    folder = "hf_treegen/assets/smollm2-135m-domino/"
    assert {folder + "config.json", folder + "model.safetensors", folder + "datastore.safetensors"} <= names
    config = json.loads(wheel.read(folder + "config.json"))
    with wheel.open(folder + "model.safetensors") as weights:  # read the safetensors header only
        header = json.loads(weights.read(struct.unpack("<Q", weights.read(8))[0]))
    assert header["draft_vocab"]["shape"] == [config["dflash_config"]["draft_vocab_size"]]  # the vocab map


def test_the_metric_modules_hub_folder_and_data_files(wheel):
    names = set(wheel.namelist())
    for metric in ("qasper", "all_evidence"):
        assert f"hf_treegen/metrics/{metric}/{metric}.py" in names  # evaluate.load(metric_path(name)) reads these
    assert {"hf_treegen/hub/README.md", "hf_treegen/hub/custom_generate/generate.py",
            "hf_treegen/hub/custom_generate/requirements.txt"} <= names
    assert {"hf_treegen/rag/data/pydocs_qasper.json", "hf_treegen/rag/data/SOURCES.md"} <= names
    data = [path for path in _source_files() if path.startswith("hf_treegen/data/")]
    assert set(data) <= names


def test_the_metadata_carries_the_licence_and_the_command(wheel):
    names = wheel.namelist()
    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    assert f"{dist_info}/licenses/LICENSE" in names
    assert wheel.read(f"{dist_info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    metadata = wheel.read(f"{dist_info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
    assert "hf-treegen = hf_treegen.cli:main" in entry_points
