"""
### TorchX with TaskFlow: `@task.torchx`

A decorated function returns the TorchX app and the task runs it exactly as `TorchXOperator` does
(connection, trackers, lineage, XCom result, deferrable waits):

1. `greet` returns a component with its arguments, `("utils.python", [...])`, as on the
   `torchx run` command line; it is mapped over the `names` param with `expand`, one app per name.
2. `report` returns a `torchx.specs.AppDef` built by hand; it runs after every `greet` app, and its
   tracker run lists them all as sources.

Runs with no services on TorchX's `local_cwd` scheduler, and needs no PyTorch.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param, task

JOB_SCRIPT = str(Path(__file__).parent / "jobs" / "hello.py")

with DAG(
    dag_id="torchx_taskflow",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "example", "taskflow"],
    params={"names": Param(["Ada", "Grace"], type="array", items={"type": "string"}, minItems=1)},
) as dag:
    dag.doc_md = __doc__

    @task
    def names(params: dict | None = None) -> list[str]:
        return params["names"]

    @task.torchx(poll_interval=1)
    def greet(name: str):
        """One app per name: the utils.python component and its arguments."""
        return ("utils.python", ["--script", JOB_SCRIPT, "--", "--name", name, "--steps", "1"])

    @task.torchx(poll_interval=1)
    def report(names: list[str]):
        """An AppDef: one role running the job script with python."""
        from torchx import specs  # inside the task: DAG parsing stays cheap

        role = specs.Role(
            name="report",
            image="",
            entrypoint="python",
            args=[JOB_SCRIPT, "--name", f"{len(names)} greeted apps", "--steps", "1"],
        )
        return specs.AppDef(name="report", roles=[role])

    greeted = names()
    greet.expand(name=greeted) >> report(greeted)
