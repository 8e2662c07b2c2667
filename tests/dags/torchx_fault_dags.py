"""DAGs for the fault-injection tests on Slurm: each task's app has a role name of its own, so the
tests count exactly the Slurm jobs a DAG submitted (``sacct`` job name ``<role>-0``).

The connection ``torchx_slurm`` and the tracker connections are defined by the tests. ``seconds`` and
``tracker`` come from the run's conf.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG
from torchx.specs import AppDef, Role

from torchx_airflow.operators.torchx import TorchXOperator
from torchx_airflow.sensors.torchx import TorchXAppSensor

COUNTER = str(Path(__file__).resolve().parent / "jobs" / "counter.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def _dag(dag_id: str) -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["torchx", "fault-tests"])


def _app(role: str) -> AppDef:
    return AppDef(
        name=role,
        roles=[
            Role(
                name=role,
                image="",
                entrypoint=sys.executable,
                args=[COUNTER, "--seconds", "{{ dag_run.conf.get('seconds', 3) }}"],
            )
        ],
    )


def _run(role: str, **kwargs) -> TorchXOperator:
    kwargs.setdefault("tracker_conn_ids", [])
    return TorchXOperator(
        task_id="run",
        app=_app(role),
        torchx_conn_id="torchx_slurm",
        poll_interval=1,
        retries=1,
        retry_delay=timedelta(seconds=1),
        **kwargs,
    )


# A tracker that hangs or dies right after submission: the task still ends with one job.
with _dag("fault_tracker_sync"):
    _run("faulttrk", tracker_conn_ids="{{ dag_run.conf['tracker'] }}", tracker_timeout=8)

# The scheduler's status command fails a few times in a row, in the worker or in the triggerer.
with _dag("fault_status_sync"):
    _run("faultstat")

with _dag("fault_status_deferred"):
    _run("faultstatdef", deferrable=True)

# The worker is SIGKILLed after submission, before its first status poll.
with _dag("fault_killed_sync"):
    _run("faultkill")


# The worker is SIGKILLed as sbatch returns, before the task could read the job id and record it.
with _dag("fault_submit_killed"):
    _run("faultsubmit")


# Sensors watch apps they did not launch: their timeout never cancels them, in every mode.
def _sensor(dag_id: str, **kwargs) -> None:
    kwargs.setdefault("poke_interval", 1)
    with _dag(dag_id):
        TorchXAppSensor(
            task_id="wait",
            app_handle="{{ dag_run.conf['app_handle'] }}",
            torchx_conn_id="torchx_slurm",
            **kwargs,
        )


_sensor("sensor_timeout_poke", mode="poke", timeout=6)
_sensor("sensor_timeout_poke_soft", mode="poke", timeout=6, soft_fail=True)
# Reschedule mode pokes 10 s apart: with pokes a second apart, a loaded scheduler can drain one poke's
# executor event after the next poke started and fail the task itself (apache/airflow#71172).
_sensor("sensor_timeout_reschedule", mode="reschedule", poke_interval=10, timeout=12)
_sensor("sensor_timeout_reschedule_soft", mode="reschedule", poke_interval=10, timeout=12, soft_fail=True)
_sensor("sensor_timeout_deferred", deferrable=True, timeout=6)
_sensor("sensor_timeout_deferred_soft", deferrable=True, timeout=6, soft_fail=True)
_sensor("sensor_deferred_soft", deferrable=True, timeout=300, soft_fail=True)
_sensor("sensor_poke_soft", timeout=300, soft_fail=True)
