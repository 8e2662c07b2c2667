"""DAG for the hostile sweep test (tests/integration/test_hostile_sweep_dags.py): a three-point sweep,
then a hostile job tracking to the same store (``jobs/hostile_job.py``), then the promotion of the
sweep's best run by loss to an asset."""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, Param

from torchx_airflow.operators.promote import TorchXPromoteOperator
from torchx_airflow.operators.torchx import TorchXOperator

SWEEP_JOB = str(Path(__file__).resolve().parents[1] / "jobs" / "sweep_job.py")
HOSTILE_JOB = str(Path(__file__).resolve().parent / "jobs" / "hostile_job.py")
LOSSES = ["0.4", "0.2", "0.3"]

with DAG(
    "tx_hostile_sweep",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
    params={"out": Param("/tmp/tx-hostile", type="string"), "secret": Param("/nonexistent", type="string")},
):
    train = TorchXOperator.partial(task_id="train", component="utils.python", poll_interval=0.5).expand(
        component_args=[
            ["--script", SWEEP_JOB, "--", f"{{{{ params.out }}}}/train-{i}", loss]
            for i, loss in enumerate(LOSSES)
        ]
    )
    attack = TorchXOperator(
        task_id="attack",
        component="utils.python",
        component_args=["--script", HOSTILE_JOB, "--", "{{ params.secret }}", "{{ params.out }}/attack"],
        poll_interval=0.5,
    )
    promote = TorchXPromoteOperator(
        task_id="promote",
        runs_of="train",
        objective="loss",
        mode="min",
        artifact="model",
        asset=Asset("model://tx_hostile_sweep/best"),
    )
    train >> attack >> promote
