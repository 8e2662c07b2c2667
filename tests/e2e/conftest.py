"""The running system of `make up`, started by the project's own script on free loopback ports:
Airflow's services with `dags/` and the example connections, and an MLflow tracking server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.scheduling import require_heavy
from tests.services import free_port
from tests.slurm.conftest import slurm_cluster  # noqa: F401 - the pipeline runs on Slurm here
from tests.stack import AirflowStack

REPO = Path(__file__).resolve().parents[2]
MLFLOW_PASSWORD = "e2e-Mlflow-Secret-0099"


CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--renderer-process-limit=1",  # the tests open one page at a time: one renderer, not one per page
]  # fmt: skip


def dags_stack(home: Path, mlflow_password: str, **env_extra: str) -> AirflowStack:
    """A stack of ``dags/`` with the example MLflow connection, whose server listens on a free port.

    The connection carries a password (the server ignores it): it must reach the jobs and appear in
    no task log file.
    """
    mlflow_port = free_port()
    mlflow_conn = {
        "conn_type": "mlflow",
        "host": f"http://127.0.0.1:{mlflow_port}",
        "login": "airflow",
        "password": mlflow_password,
        "extra": {"experiment": "torchx"},
    }
    return AirflowStack(
        home=home,
        dags_folder=REPO / "dags",
        env_extra={
            "MLFLOW_PORT": str(mlflow_port),
            "TORCHX_PIPELINE_OUTPUT": str(home / "pipeline"),
            "AIRFLOW_CONN_MLFLOW_DEFAULT": json.dumps(mlflow_conn),
            **env_extra,
        },
    )


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless (installed by scripts/install-chromium.sh when missing, as root)."""
    require_heavy("Chromium")
    if not os.path.exists(CHROMIUM):
        if os.geteuid() != 0:
            pytest.skip("Debian's chromium is not installed and installing it needs root")
        subprocess.run(["bash", str(REPO / "scripts" / "install-chromium.sh")], check=True, timeout=900)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()
