"""
### TorchX hello: dry-run and run TorchX apps from Airflow

The smallest useful pipeline, runnable with no services (TorchX's `local_cwd` scheduler):

1. `plan` dry-runs the job: its XCom shows exactly what would be submitted.
2. `echo` runs the builtin `utils.echo` component.
3. `hello` runs a job script kept next to this DAG (`jobs/hello.py`) with `utils.python`;
   its arguments are templated from the DAG's params, and its output lands in the task log
   prefixed `[role/replica]`.

Trigger it from the UI to change the name or the number of steps.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param

from torchx_airflow.operators.torchx import TorchXDryRunOperator, TorchXOperator

JOB_SCRIPT = str(Path(__file__).parent / "jobs" / "hello.py")
HELLO_ARGS = [
    "--script", JOB_SCRIPT, "--",
    "--name", "{{ params.name }}", "--steps", "{{ params.steps }}",
]  # fmt: skip

with DAG(
    dag_id="torchx_hello",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "example"],
    params={
        "name": Param("Airflow", type="string", description="Who the job greets"),
        "steps": Param(3, type="integer", minimum=1, maximum=100, description="Steps the job counts"),
    },
) as dag:
    dag.doc_md = __doc__

    plan = TorchXDryRunOperator(task_id="plan", component="utils.python", component_args=HELLO_ARGS)
    echo = TorchXOperator(
        task_id="echo", component="utils.echo", component_args=["--msg", "hello from TorchX"]
    )
    hello = TorchXOperator(
        task_id="hello", component="utils.python", component_args=HELLO_ARGS, poll_interval=1
    )

    plan >> echo >> hello
