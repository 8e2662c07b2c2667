"""DAGs the integration tests run with ``airflow dags test``: real TorchX jobs on local_cwd."""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param
from torchx.components.utils import python

from torchx_airflow.operators.torchx import TorchXDryRunOperator, TorchXOperator
from torchx_airflow.sensors.torchx import TorchXAppSensor

JOBS = Path(__file__).resolve().parents[2] / "dags" / "jobs"
HELLO = str(JOBS / "hello.py")
SLEEPER = str(Path(__file__).resolve().parent / "jobs" / "sleeper.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
SECRET = "tx-s3cret-Value-42"


def _dag(dag_id: str, **kwargs) -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, **kwargs)


with _dag("tx_success", params={"name": Param("world", type="string"), "steps": Param(2, type="integer")}):
    args = ["--script", HELLO, "--", "--name", "{{ params.name }}", "--steps", "{{ params.steps }}"]
    plan = TorchXDryRunOperator(
        task_id="plan", component="utils.python", component_args=args, env={"API_TOKEN": SECRET}
    )
    run = TorchXOperator(
        task_id="run",
        component="utils.python",
        component_args=args,
        env={"API_TOKEN": SECRET},
        poll_interval=0.5,
    )
    plan >> run

with _dag("tx_fail"):
    TorchXOperator(
        task_id="run",
        component="utils.python",
        component_args=["--script", HELLO, "--", "--steps", "1", "--fail"],
        poll_interval=0.5,
    )

with _dag("tx_sleep"):
    TorchXOperator(
        task_id="run",
        component="utils.python",
        component_args=["--script", SLEEPER, "--", "--pid-file", "{{ dag_run.conf['pid_file'] }}"],
        poll_interval=0.5,
    )

with _dag("tx_sensor_unknown"):
    TorchXAppSensor(
        task_id="wait", app_handle="local_cwd://torchx/never-launched-123", poke_interval=1, timeout=60
    )

with _dag("tx_bad_component"):
    TorchXOperator(task_id="run", component="utils.no_such_component", component_args=[])

# A rendered AppDef keeps its role env values out of the rendered fields; a templated cfg works.
with _dag("tx_templated", params={"cfg": Param({"prepend_cwd": True}, type="object")}):
    app = python(c="print('templated')", name="templated")
    app.roles[0].env["API_TOKEN"] = SECRET
    TorchXDryRunOperator(task_id="plan_app", app=app, cfg="{{ params.cfg }}", tracker_conn_ids=[])
