"""Installing beside an existing Airflow 3.3 deployment, checked with the resolvers (pip and uv).

The deployment is what Airflow's constraints describe: Airflow 3.3 with the current cncf-kubernetes and
amazon providers, every package pinned. The pins are made here the way Airflow makes its constraint files
(`uv pip install --resolution highest` of Airflow and its providers, see the header of any
constraints-3.x.txt): the highest versions pip resolves for Airflow 3.3 and those providers alone. Then
the provider's and tracker's wheels, built from this checkout, must resolve under those pins: nothing a
deployment runs is downgraded. With TorchX's 0.7 release (urllib3<1.27) they must not resolve at all.

Every resolution prints its time (pytest -s shows them). These tests ask PyPI (and the configured index).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

pytestmark = pytest.mark.packaging
REPO = Path(__file__).resolve().parents[2]
DEPLOYMENT = [
    "apache-airflow>=3.3,<3.4",
    "apache-airflow-providers-cncf-kubernetes",
    "apache-airflow-providers-amazon[s3fs]",
]
# What the install section documents: TorchX from torchx-nightly, the tracker's s3 store. Not its
# `mlflow` extra: mlflow-skinny needs importlib-metadata<10, and Airflow 3.3 on Python < 3.12 resolves
# (and its deployments pin) importlib-metadata 10; the MLflow client goes in the training image.
OURS = {"torchx-airflow": "torchx-nightly", "torchx-airflow-tracker": "s3,torchx-nightly"}
SKIP_COPY = shutil.ignore_patterns(
    ".git", ".venv*", ".airflow", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"
)


def _run(cmd: list[str], check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kwargs)
    print(f"{time.monotonic() - started:6.1f} s  {' '.join(cmd[:6])} ...")
    if check:
        assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """Both distributions' wheels, built from a copy of the checkout (builds write into their source)."""
    tmp = tmp_path_factory.mktemp("wheels")
    source = tmp / "src"
    shutil.copytree(REPO, source, ignore=SKIP_COPY, symlinks=True)
    dist = tmp / "dist"
    for project in (source, source / "tracker"):
        _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(project)])
    built = {canonicalize_name(w.name.split("-")[0]): w for w in dist.glob("*.whl")}
    assert set(built) == set(OURS), built
    return built


def _requirements(wheels: dict[str, Path], extras: dict[str, str]) -> list[str]:
    return [f"{name}[{extras[name]}] @ {wheels[name].as_uri()}" for name in sorted(wheels)]


def _pip_resolve(requirements: list[str], report: Path, *options: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    return _run([*cmd, "--report", str(report), *options, *requirements], check=False)


def _resolved(report: Path) -> dict[str, str]:
    items = json.loads(report.read_text())["install"]
    return {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in items}


@pytest.fixture(scope="module")
def constraints(tmp_path_factory) -> dict[str, str]:
    """Airflow 3.3's deployment pins, resolved as Airflow's constraint files are: highest versions."""
    tmp = tmp_path_factory.mktemp("constraints")
    proc = _pip_resolve(DEPLOYMENT, tmp / "report.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    pins = _resolved(tmp / "report.json")
    # what makes the question real: a deployment runs urllib3 2 (TorchX 0.7 pins urllib3<1.27)
    assert Version(pins["urllib3"]).major >= 2, pins["urllib3"]
    print("deployment:", {k: pins[k] for k in ("apache-airflow", "urllib3", "cryptography", "requests")})
    print("providers:", {k: v for k, v in pins.items() if k.startswith("apache-airflow-providers")})
    return pins


def _constraints_file(pins: dict[str, str], path: Path) -> Path:
    path.write_text("".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
    return path


def _downgrades(pins: dict[str, str], resolved: dict[str, str]) -> dict[str, str]:
    return {
        name: f"{pins[name]} -> {version}"
        for name, version in resolved.items()
        if name in pins and Version(version) != Version(pins[name])
    }


def test_pip_installs_both_beside_airflow_constraints_and_providers(wheels, constraints, tmp_path):
    pinned = _constraints_file(constraints, tmp_path / "constraints.txt")
    proc = _pip_resolve(
        [*DEPLOYMENT, *_requirements(wheels, OURS)], tmp_path / "report.json", "--constraint", str(pinned)
    )
    assert proc.returncode == 0, f"does not resolve under Airflow's pins:\n{proc.stderr[-3000:]}"
    resolved = _resolved(tmp_path / "report.json")
    assert not _downgrades(constraints, resolved)
    assert {"torchx-airflow", "torchx-airflow-tracker", "torchx-nightly", "s3fs"} <= set(resolved)
    assert "torchx" not in resolved
    assert all(resolved[name] == version for name, version in constraints.items())


def test_pip_refuses_the_torchx_release_under_airflow_constraints(wheels, constraints, tmp_path):
    """The `torchx` extra (the 0.7 release) cannot install beside urllib3 2: why it is not the default."""
    pinned = _constraints_file(constraints, tmp_path / "constraints.txt")
    extras = {"torchx-airflow": "torchx", "torchx-airflow-tracker": "s3,torchx"}
    proc = _pip_resolve(
        [*DEPLOYMENT, *_requirements(wheels, extras)], tmp_path / "report.json", "--constraint", str(pinned)
    )
    assert proc.returncode != 0
    assert "urllib3" in proc.stderr and "torchx" in proc.stderr, proc.stderr[-3000:]


def test_uv_installs_both_beside_airflow_constraints_and_providers(wheels, constraints, tmp_path):
    uv = shutil.which("uv", path=str(Path(sys.executable).parent))
    assert uv, "uv is in the test extra: pip install -e '.[test]'"
    # an empty environment of this interpreter: the dry run then lists everything it would install
    _run([uv, "venv", "--quiet", "--python", sys.executable, str(tmp_path / "venv")])
    pinned = _constraints_file(constraints, tmp_path / "constraints.txt")
    proc = _run(
        [uv, "pip", "install", "--dry-run", "--python", str(tmp_path / "venv" / "bin" / "python"),
         "--constraint", str(pinned), *DEPLOYMENT, *_requirements(wheels, OURS)],
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"does not resolve under Airflow's pins:\n{proc.stderr[-3000:]}"
    # ` + name==version`, and ` + name @ file:///...whl` for the wheels
    lines = re.finditer(
        r"^ \+ (?P<name>[A-Za-z0-9._-]+)(==(?P<version>\S+)| @ (?P<url>\S+))", proc.stderr, re.M
    )
    resolved = {canonicalize_name(m["name"]): m["version"] or m["url"] for m in lines}
    assert resolved["torchx-airflow"] == wheels["torchx-airflow"].as_uri(), proc.stderr
    assert resolved["torchx-airflow-tracker"] == wheels["torchx-airflow-tracker"].as_uri()
    assert "torchx-nightly" in resolved and "torchx" not in resolved
    assert not _downgrades(constraints, resolved)
    assert all(resolved[name] == version for name, version in constraints.items())


def _shadow_site_packages(target: Path) -> Path:
    """This venv's site-packages without TorchX and without the checkout's own packages."""
    target.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        hidden = entry.name.startswith(("torchx", "__editable__")) or entry.name.endswith(".pth")
        if not hidden:
            (target / entry.name).symlink_to(entry)
    return target


PROVIDER_WITHOUT_TORCHX = textwrap.dedent(
    """
    import json
    from airflow.providers_manager import ProvidersManager

    # Airflow's provider discovery imports the package: it keeps working without TorchX
    version = ProvidersManager().providers["torchx-airflow"].version
    import torchx_airflow.hooks.torchx  # imports no TorchX (parse time)
    try:
        import torchx.specs  # as the hook does when it first uses TorchX
    except ImportError as e:
        print(json.dumps({"version": version, "error": str(e)}))
    """
)
TRACKER_WITHOUT_TORCHX = textwrap.dedent(
    """
    import json
    try:
        import torchx_airflow_tracker.fsspec_store
    except ImportError as e:
        print(json.dumps({"error": str(e)}))
    """
)


def test_without_torchx_the_first_import_of_it_names_both_installs(wheels, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python")
    site = Path(
        _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    (site / "base-packages.pth").write_text(f"{_shadow_site_packages(tmp_path / 'base')}\n")
    wheel_files = [str(w) for w in wheels.values()]
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", *wheel_files])
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "home")}
    provider = json.loads(_run([python, "-c", PROVIDER_WITHOUT_TORCHX], env=env, cwd=tmp_path).stdout)
    tracker = json.loads(_run([python, "-c", TRACKER_WITHOUT_TORCHX], env=env, cwd=tmp_path).stdout)
    assert provider["version"] == _version_of("torchx_airflow")
    for dist, error in (("torchx-airflow", provider["error"]), ("torchx-airflow-tracker", tracker["error"])):
        assert f"pip install '{dist}[torchx-nightly]'" in error
        assert f"pip install '{dist}[torchx]'" in error


def _version_of(package: str) -> str:
    init = (REPO / package / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', init, re.M).group(1)
