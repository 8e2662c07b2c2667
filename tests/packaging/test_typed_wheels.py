"""Both wheels ship ``py.typed`` (PEP 561): without it a user's type checker ignores the provider's and
the tracker's hints and treats every name from them as ``Any``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging
REPO = Path(__file__).resolve().parents[2]
SKIP_COPY = shutil.ignore_patterns(
    ".git", ".venv*", ".airflow", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"
)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """Both distributions built with ``pip wheel --no-deps`` from a copy of the source (a build writes
    build/ and egg-info directories beside the sources: never into the repo)."""
    tmp = tmp_path_factory.mktemp("typed-wheels")
    source = tmp / "src"
    shutil.copytree(REPO, source, ignore=SKIP_COPY, symlinks=True)
    dist = tmp / "dist"
    for project in (source, source / "tracker"):
        cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(project)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return dist


@pytest.mark.parametrize(
    ("distribution", "package"),
    [("torchx_airflow", "torchx_airflow"), ("torchx_airflow_tracker", "torchx_airflow_tracker")],
)
def test_wheel_ships_py_typed(wheels: Path, distribution: str, package: str) -> None:
    (wheel,) = wheels.glob(f"{distribution}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert f"{package}/py.typed" in names, f"{wheel.name} lacks {package}/py.typed: {sorted(names)[:20]}"
