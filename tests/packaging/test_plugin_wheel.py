"""The lineage plugin from the built wheels, not from the checkout: both distributions are built with
``pip wheel --no-deps`` from a copy of the source, installed with ``--no-deps`` into a fresh venv
that sees this venv's other packages (not its torchx-airflow ones), and there Airflow finds the plugin
through its entry point, ``airflow plugins`` lists it, and the API server app serves its assets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
OURS = ("torchx_airflow", "torchx_airflow_tracker", "__editable__")
SKIP_COPY = shutil.ignore_patterns(
    ".git", ".venv*", ".airflow", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"
)


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _shadow_site_packages(target: Path) -> Path:
    """This venv's site-packages without its own torchx-airflow packages (those come from the wheels)."""
    target.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(OURS) and not entry.name.endswith(".pth"):
            (target / entry.name).symlink_to(entry)
    return target


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheels")
    source = tmp / "src"
    shutil.copytree(
        REPO, source, ignore=SKIP_COPY, symlinks=True
    )  # builds write build/ dirs: not in the repo
    wheels = tmp / "dist"
    for project in (source, source / "tracker"):
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "-w",
                str(wheels),
                str(project),
            ]
        )
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    (site / "base-packages.pth").write_text(f"{_shadow_site_packages(tmp / 'base')}\n")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            *map(str, wheels.glob("*.whl")),
        ]
    )
    return venv


PROBE = textwrap.dedent(
    """
    import json, sys
    import torchx_airflow, torchx_airflow_tracker
    from airflow import plugins_manager
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    plugins = {p.name: p for p in plugins_manager._get_plugins()[0]}
    plugin = plugins["torchx_lineage"]
    client = TestClient(create_app())
    print(json.dumps({
        "files": [torchx_airflow.__file__, torchx_airflow_tracker.__file__],
        "source": str(plugin.source),
        "views": [v["destination"] for v in plugin.external_views],
        "css": client.get("/torchx/static/lineage.css").text,
        "compare_css_status": client.get("/torchx/static/compare.css").status_code,
        "js_status": client.get("/torchx/static/lineage.js").status_code,
        "page_status": client.get("/torchx/lineage/some_dag/some_run").status_code,
    }))
    """
)


def test_plugin_and_its_assets_work_from_the_built_wheels(wheel_venv, tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__API_AUTH__JWT_SECRET": "wheel-test-" + "x" * 54,
    }
    python = str(wheel_venv / "bin" / "python")
    _run([python, "-m", "airflow", "db", "migrate"], env=env, cwd=tmp_path)
    listed = json.loads(
        _run([python, "-m", "airflow", "plugins", "-o", "json"], env=env, cwd=tmp_path).stdout
    )
    (ours,) = [p for p in listed if p["name"] == "torchx_lineage"]
    assert {v["destination"] for v in ours["external_views"]} == {"dag_run", "task_instance"}
    assert ours["fastapi_apps"][0]["url_prefix"] == "/torchx"
    probe = json.loads(_run([python, "-c", PROBE], env=env, cwd=tmp_path).stdout.strip().splitlines()[-1])
    # imported from the fresh venv's own site-packages, not from the checkout
    assert all(str(wheel_venv) in path for path in probe["files"]), probe["files"]
    assert "torchx-airflow" in probe["source"] and "torchx_lineage" in probe["source"]
    assert probe["views"] == ["dag_run", "task_instance", "task_instance"]  # lineage twice, compare
    assert probe["css"] == (REPO / "torchx_airflow" / "plugins" / "static" / "lineage.css").read_text()
    assert probe["js_status"] == probe["compare_css_status"] == 200
    assert probe["page_status"] == 401  # the page itself needs a logged-in user
