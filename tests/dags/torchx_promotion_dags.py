"""DAGs for the promotion tests: a sweep of five small TorchX apps (one fails on purpose, two tie),
promoted by loss to an asset, and a DAG scheduled on that asset. The sweep's trackers are a template
(``{{ params.trackers }}``): the promotion records in the store they render to."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, task

from torchx_airflow.operators.promote import TorchXPromoteOperator
from torchx_airflow.operators.torchx import TorchXOperator

JOB = str(Path(__file__).resolve().parents[1] / "jobs" / "sweep_job.py")
OUT = os.environ.get("TORCHX_PROMOTE_OUTPUT", str(Path(tempfile.gettempdir()) / "torchx_promote"))
BEST = Asset("model://tx_promote_sweep/best")
# map index 1 has the lowest loss but fails; 2 and 4 tie at the lowest loss of the runs that succeed
GRID = [("0.4", ""), ("0.0", "fail"), ("0.1", ""), ("0.3", ""), ("0.1", "")]
START = pendulum.datetime(2026, 1, 1, tz="UTC")

with DAG(
    "tx_promote_sweep",
    schedule=None,
    start_date=START,
    catchup=False,
    default_args={"retries": 0},
    params={"trackers": "torchx_fsspec_default"},
):
    train = TorchXOperator.partial(
        task_id="train",
        component="utils.python",
        tracker_conn_ids="{{ params.trackers }}",
        poll_interval=0.5,
    ).expand(
        component_args=[
            ["--script", JOB, "--", f"{OUT}/{{{{ run_id | replace(':', '-') }}}}/train-{i}", loss, flag]
            for i, (loss, flag) in enumerate(GRID)
        ]
    )
    promote = TorchXPromoteOperator(
        task_id="promote", runs_of="train", objective="loss", mode="min", artifact="model", asset=BEST
    )
    train >> promote

with DAG("tx_promote_consumer", schedule=[BEST], start_date=START, catchup=False):

    @task
    def promoted(triggering_asset_events=None) -> dict:
        """The promotion that triggered this run."""
        (event,) = triggering_asset_events[BEST]
        return dict(event.extra)

    promoted()
