"""DAGs for the Slurm tests: sync and deferred waits, retries that reattach, kills, timeouts.

They use the connection ``torchx_slurm`` (scheduler slurm), which the tests define. ``seconds`` and
``exit_code`` come from the run's conf.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from torchx_airflow.operators.torchx import TorchXOperator
from torchx_airflow.sensors.torchx import TorchXAppSensor

COUNTER = str(Path(__file__).resolve().parent / "jobs" / "counter.py")
ARGS = [
    "--script", COUNTER, "--",
    "--seconds", "{{ dag_run.conf.get('seconds', 3) }}",
    "--exit-code", "{{ dag_run.conf.get('exit_code', 0) }}",
]  # fmt: skip
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def _dag(dag_id: str) -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["torchx", "slurm-tests"])


def _run(deferrable: bool, **kwargs) -> TorchXOperator:
    return TorchXOperator(
        task_id="run",
        component="utils.python",
        component_args=ARGS,
        torchx_conn_id="torchx_slurm",
        tracker_conn_ids=[],
        deferrable=deferrable,
        poll_interval=1,
        **kwargs,
    )


with _dag("slurm_sync"):
    _run(False, retries=1, retry_delay=timedelta(seconds=1))

with _dag("slurm_deferred"):
    _run(True, retries=1, retry_delay=timedelta(seconds=1))

with _dag("slurm_sync_timeout"):
    _run(False, execution_timeout=timedelta(seconds=15))

with _dag("slurm_deferred_timeout"):
    _run(True, execution_timeout=timedelta(seconds=15))

with _dag("slurm_sensor_unknown"):
    TorchXAppSensor(
        task_id="wait", app_handle="slurm://torchx/987654321", torchx_conn_id="torchx_slurm", poke_interval=1
    )

with _dag("slurm_sensor_deferred"):
    TorchXAppSensor(
        task_id="wait",
        app_handle="{{ dag_run.conf['app_handle'] }}",
        torchx_conn_id="torchx_slurm",
        poke_interval=1,
        deferrable=True,
    )
