"""DAGs for the lineage tests: fan-in, task groups, a tracked @task, a skipped TorchX task."""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, TaskGroup, task

from torchx_airflow.operators.torchx import TorchXDryRunOperator, TorchXOperator
from torchx_airflow.tracking import task_app_run

JOB = str(Path(__file__).resolve().parents[1] / "jobs" / "lineage_job.py")


def job(task_id: str, **kwargs) -> TorchXOperator:
    return TorchXOperator(
        task_id=task_id,
        component="utils.python",
        component_args=["--script", JOB, "--", task_id],
        poll_interval=0.5,
        **kwargs,
    )


with DAG("tx_lineage", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    plan = TorchXDryRunOperator(
        task_id="plan", component="utils.python", component_args=["--script", JOB, "--", "plan"]
    )
    a = job("a")
    with TaskGroup("grp") as grp:
        b = job("b")

    @task
    def feat():
        """A plain Python task that takes part in lineage through task_app_run."""
        with task_app_run() as run:
            run.add_metadata(rows=3)
            run.add_artifact("features", "/data/features.parquet")
        return run.id

    @task
    def plain():
        """A plain Python task without tracking: lineage passes through it."""
        return "untracked"

    @task.branch
    def choose():
        return ["c"]

    c = job("c")
    skipme = job("skipme")
    join = job(
        "join",
        # the job adds the edge join <- c itself too: it must stay one edge
        env={"TORCHX_PARENT_RUN_ID": "{{ ti.xcom_pull(task_ids='c', key='app_handle') }}"},
        trigger_rule="none_failed_min_one_success",
    )
    plan >> a
    a >> feat() >> join
    a >> grp >> plain() >> join
    choose() >> [c, skipme]
    [c, skipme] >> join
