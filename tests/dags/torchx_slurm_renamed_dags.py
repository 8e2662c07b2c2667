"""A DAG for tests/slurm/test_slurm_renamed_jobs.py: a Slurm job that renames itself
(``scontrol update JobId=$SLURM_JOB_ID JobName=...``) to a name claiming another state, then fails.
The task must fail, and, though it may resubmit a job the infrastructure ended, submit nothing more.

Connection (the test defines it): ``torchx_slurm``. ``tag`` and ``claim`` come from the run's conf.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from torchx_airflow.operators.torchx import TorchXOperator

RENAME_SELF = str(Path(__file__).resolve().parent / "jobs" / "rename_self.sh")

with DAG(
    dag_id="slurm_renamed_job",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "slurm-tests"],
):
    TorchXOperator(
        task_id="run",
        component="utils.sh",
        component_args=["bash", RENAME_SELF, "{{ dag_run.conf['tag'] }}", "{{ dag_run.conf['claim'] }}"],
        torchx_conn_id="torchx_slurm",
        infrastructure_retries=2,
        poll_interval=1,
        retries=0,
    )
