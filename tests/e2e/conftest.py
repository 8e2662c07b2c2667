"""The running system of `make up`, started by the project's own script on free loopback ports:
Airflow's services with `dags/` and the example connections, and an MLflow tracking server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.services import free_port
from tests.slurm.conftest import slurm_cluster  # noqa: F401 - the pipeline runs on Slurm here
from tests.stack import AirflowStack

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def pipeline_stack(slurm_cluster, tmp_path_factory):  # noqa: F811
    home = tmp_path_factory.mktemp("e2e-airflow")
    stack = AirflowStack(
        home=home,
        dags_folder=REPO / "dags",
        env_extra={"MLFLOW_PORT": str(free_port()), "TORCHX_PIPELINE_OUTPUT": str(home / "pipeline")},
    )
    stack.up()
    try:
        yield stack
    finally:
        stack.down()
