"""A learning-rate sweep for the comparison view: eight mapped runs of one task, each a real TorchX
job (``tests/jobs/metrics_job.py``) that logs a loss curve and final metrics.

Each run gets its own ``SEED`` in env, and the same ``SWEEP_API_KEY`` (a value Airflow hides by its
name): the view shows the one and never the other. ``params.trackers`` names the tracker
connection, so the same sweep runs on an fsspec store and on MLflow.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param

from torchx_airflow.operators.torchx import TorchXOperator

JOB = str(Path(__file__).resolve().parents[1] / "jobs" / "metrics_job.py")
LEARNING_RATES = (0.5, 0.25, 0.125, 0.75, 1.0, 0.375, 0.625, 0.875)
EPOCHS = 3
SECRET = "sweep-Api-K3y-4411"

with DAG(
    "tx_compare_sweep",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"trackers": Param("cmp_fs", type="string", description="the tracker connection(s)")},
):
    TorchXOperator.partial(
        task_id="train",
        component="utils.python",
        tracker_conn_ids="{{ params.trackers }}",
        poll_interval=0.5,
    ).expand_kwargs(
        [
            {
                "component_args": ["--script", JOB, "--", str(lr), str(EPOCHS)],
                "env": {"SEED": str(i), "SWEEP_API_KEY": SECRET},
            }
            for i, lr in enumerate(LEARNING_RATES)
        ]
    )

# The same sweep on Slurm, through the connection torchx_compare_slurm (the Slurm test defines it
# with a tracker).
with DAG(
    "tx_compare_sweep_slurm",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "slurm"],
):
    TorchXOperator.partial(
        task_id="train", component="utils.python", torchx_conn_id="torchx_compare_slurm", poll_interval=1
    ).expand_kwargs(
        [
            {
                "component_args": ["--script", JOB, "--", str(lr), str(EPOCHS)],
                "env": {"SEED": str(i), "SWEEP_API_KEY": SECRET},
            }
            for i, lr in enumerate(LEARNING_RATES)
        ]
    )
