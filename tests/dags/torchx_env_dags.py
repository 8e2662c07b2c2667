"""DAGs for the job-environment tests: a job that reports the variables it got, on local_cwd and
Slurm, with an MLflow tracker connection and a secret in the task's ``env``.

The connections ``torchx_env_local``, ``torchx_env_slurm`` and ``env_mlflow`` are defined by the tests.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from torchx_airflow.operators.torchx import TorchXOperator

ENV_DUMP = str(Path(__file__).resolve().parent / "jobs" / "env_dump.py")
JOB_SECRET = "job-api-token-Secret-7781"
START = pendulum.datetime(2026, 1, 1, tz="UTC")

for scheduler in ("local", "slurm"):
    with DAG(dag_id=f"env_dump_{scheduler}", schedule=None, start_date=START, catchup=False):
        TorchXOperator(
            task_id="run",
            component="utils.python",
            component_args=["--script", ENV_DUMP],
            torchx_conn_id=f"torchx_env_{scheduler}",
            tracker_conn_ids=["env_mlflow"],
            env={"API_TOKEN": JOB_SECRET, "PLAIN_SETTING": "visible"},
            poll_interval=1,
        )
