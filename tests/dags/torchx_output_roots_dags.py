"""DAG for the output roots test (tests/integration/test_output_roots_dags.py): ``train`` writes where
its environment says (``JOB_OUT``, from the params), a directory no argument names, and records the
file as its artifact; ``evaluate``, cached, has ``train``'s artifact in its cache key (a parent's
artifact is read only under the task's output roots)."""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param

from torchx_airflow.operators.torchx import TorchXOperator

JOB = str(Path(__file__).resolve().parent / "jobs" / "env_out_job.py")
ENV = {"JOB_OUT": "{{ params.out }}", "CACHE_LEDGER": "{{ params.ledger }}"}

with DAG(
    "tx_output_roots",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"out": Param("/tmp/tx-out", type="string"), "ledger": Param("/tmp/tx-ledger", type="string")},
    tags=["torchx", "cache"],
):
    step = {"component": "utils.python", "env": ENV, "poll_interval": 1}
    train = TorchXOperator(task_id="train", component_args=["--script", JOB, "--", "--name", "train"], **step)
    evaluate = TorchXOperator(
        task_id="evaluate", component_args=["--script", JOB, "--", "--name", "evaluate"], cache=True, **step
    )
    train >> evaluate
