"""DAGs for the usage and cost tests, on local_cwd and on Slurm.

Each scheduler's DAGs use the connection ``torchx_usage_<scheduler>``, which the tests define with a
price table and a tracker. ``tx_usage_<scheduler>``: jobs burning a known amount of CPU time (one
long enough for Slurm to sample its memory, one waiting in the triggerer on Slurm), and one that
exits 3. ``tx_usage_<scheduler>_repeat``: one job of a few seconds (Slurm counts whole seconds),
triggered twice, whose second estimate uses the first run's elapsed time.
``tx_usage_<scheduler>_over_budget``: a classic and a ``@task.torchx`` task whose estimate is over
their ``max_cost``: nothing may be submitted.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG, task
from torchx.specs import AppDef, Resource, Role

from torchx_airflow.operators.torchx import TorchXOperator

BURN = str(Path(__file__).resolve().parent / "jobs" / "burn.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
# the long job of the Slurm DAG runs past Slurm's 30 s sampling, so its steps have a MaxRSS
LONG_SLEEP = {"local_cwd": 0.5, "slurm": 40}


def burn(*args: str) -> list[str]:
    return ["--script", BURN, "--", *args]


def dear_app(role: str) -> AppDef:
    """An app whose estimate is far over any small max_cost: 8 CPUs and 16 GB for an hour."""
    entrypoint = sys.executable
    resource = Resource(cpu=8, gpu=0, memMB=16384)
    return AppDef(
        role, roles=[Role(role, image="/tmp", entrypoint=entrypoint, args=[BURN], resource=resource)]
    )


for scheduler in ("local_cwd", "slurm"):
    conn_id = f"torchx_usage_{scheduler}"
    common = {"torchx_conn_id": conn_id, "poll_interval": 1}
    tags = ["torchx", "usage-tests"]

    with DAG(f"tx_usage_{scheduler}", schedule=None, start_date=START, catchup=False, tags=tags):
        long_sleep = str(LONG_SLEEP[scheduler])
        TorchXOperator(
            task_id="sync",
            component="utils.python",
            component_args=burn("--cpu-seconds", "2", "--mb", "100", "--sleep", long_sleep),
            **common,
        )
        TorchXOperator(
            task_id="deferred",
            component="utils.python",
            component_args=burn("--cpu-seconds", "1"),
            deferrable=True,
            **common,
        )
        TorchXOperator(
            task_id="fail",
            component="utils.python",
            component_args=burn("--cpu-seconds", "0.5", "--exit-code", "3"),
            deferrable=True,
            **common,
        )

    with DAG(f"tx_usage_{scheduler}_repeat", schedule=None, start_date=START, catchup=False, tags=tags):
        TorchXOperator(
            task_id="again",
            component="utils.python",
            component_args=burn("--cpu-seconds", "0.5", "--sleep", "3"),
            deferrable=True,
            **common,
        )

    with DAG(f"tx_usage_{scheduler}_over_budget", schedule=None, start_date=START, catchup=False, tags=tags):
        TorchXOperator(
            task_id="too_dear",
            app=dear_app("too-dear-classic"),
            max_cost=0.01,
            expected_duration=timedelta(hours=1),
            **common,
        )

        @task.torchx(max_cost=0.01, expected_duration=3600, **common)
        def too_dear_decorated():
            return dear_app("too-dear-decorated")

        too_dear_decorated()
