"""DAGs for the lineage view: a small pipeline, and a DAG whose run descends from another DAG's run.

``tx_view_pipeline``: prepare -> train (mapped, two runs) -> evaluate, each a real TorchX job that
records an artifact (data, model, report). ``tx_view_finetune``: one job whose parent is the run
named in ``params.parent`` (a run of another DAG), through the job's ``TORCHX_PARENT_RUN_ID``.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param

from torchx_airflow.operators.torchx import TorchXOperator

JOB = str(Path(__file__).resolve().parent / "jobs" / "view_job.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def step(task_id: str, artifact: str, path: str, **kwargs) -> TorchXOperator:
    return TorchXOperator(
        task_id=task_id,
        component="utils.python",
        component_args=["--script", JOB, "--", task_id, artifact, path],
        poll_interval=0.5,
        **kwargs,
    )


with DAG("tx_view_pipeline", schedule=None, start_date=START, catchup=False, tags=["torchx", "lineage"]):
    prepare = step("prepare", "data", "/data/{{ run_id }}/data.csv")
    train = TorchXOperator.partial(task_id="train", component="utils.python", poll_interval=0.5).expand(
        component_args=[
            ["--script", JOB, "--", "train", "model", f"/models/{{{{ run_id }}}}/lr-{lr}.pt"]
            for lr in (0.1, 0.4)
        ]
    )
    evaluate = step("evaluate", "report", "/reports/{{ run_id }}/report.json")
    prepare >> train >> evaluate

with DAG(
    "tx_view_finetune",
    schedule=None,
    start_date=START,
    catchup=False,
    params={"parent": Param("", type="string", description="tracker run id of the model to fine-tune")},
):
    step(
        "finetune",
        "model",
        "/models/{{ run_id }}/finetuned.pt",
        env={"TORCHX_PARENT_RUN_ID": "{{ params.parent }}"},
    )
