"""The running system of `make up`, started by the project's own script on free loopback ports:
Airflow's services with `dags/` and the example connections, and an MLflow tracking server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.services import free_port
from tests.slurm.conftest import slurm_cluster  # noqa: F401 - the pipeline runs on Slurm here
from tests.stack import AirflowStack

REPO = Path(__file__).resolve().parents[2]
MLFLOW_PASSWORD = "e2e-Mlflow-Secret-0099"


@pytest.fixture(scope="session")
def pipeline_stack(slurm_cluster, tmp_path_factory):  # noqa: F811
    home = tmp_path_factory.mktemp("e2e-airflow")
    mlflow_port = free_port()
    # The MLflow connection carries a password (the server ignores it): it must reach the jobs and
    # appear in no task log file.
    mlflow_conn = {
        "conn_type": "mlflow",
        "host": f"http://127.0.0.1:{mlflow_port}",
        "login": "airflow",
        "password": MLFLOW_PASSWORD,
        "extra": {"experiment": "torchx"},
    }
    stack = AirflowStack(
        home=home,
        dags_folder=REPO / "dags",
        env_extra={
            "MLFLOW_PORT": str(mlflow_port),
            "TORCHX_PIPELINE_OUTPUT": str(home / "pipeline"),
            "AIRFLOW_CONN_MLFLOW_DEFAULT": json.dumps(mlflow_conn),
        },
    )
    stack.up()
    try:
        yield stack
    finally:
        stack.down()
