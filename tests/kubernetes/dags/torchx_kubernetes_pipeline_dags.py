"""The taskflow pipeline on Kubernetes: a classic ``prepare``, a decorated ``train`` mapped over
learning rates, a decorated ``summary`` returning an ``AppDef`` of two replicas, and a classic
``join`` downstream of both (the shape of tests/dags/torchx_taskflow_dags.py), in the worker
(``k8s_pipeline_sync``) and deferred (``k8s_pipeline_deferred``).

The connection ``torchx_k8s_tracked`` (kubernetes, tracking to the fsspec store ``k8s_fs``) is the
test's. ``out`` and ``who`` come from the run's conf.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from torchx_airflow.operators.torchx import TorchXOperator

REPO = Path(__file__).resolve().parents[3]
HELLO = str(REPO / "dags" / "jobs" / "hello.py")
TRACKED = str(REPO / "tests" / "jobs" / "tracked_job.py")
IMAGE = "ghcr.io/pytorch/torchx:0.7.0"  # not pulled by the stand-in kubelet
START = pendulum.datetime(2026, 1, 1, tz="UTC")
LRS = [0.1, 0.4]


def _pipeline(deferrable: bool) -> None:
    step = {"torchx_conn_id": "torchx_k8s_tracked", "poll_interval": 1, "deferrable": deferrable}
    prepare = TorchXOperator(
        task_id="prepare",
        component="utils.python",
        component_args=["--script", HELLO, "--", "--name", "prepare", "--steps", "3", "--sleep", "1"],
        **step,
    )

    @task.torchx(**step)
    def train(lr: float, dag_run=None):
        """A component with arguments, one app per learning rate."""
        return ("utils.python", ["--script", TRACKED, "--", f"{dag_run.conf['out']}/model-{lr}.txt", str(lr)])

    @task.torchx(**step)
    def summary():
        """An AppDef of two replicas, its args templated like TorchXOperator's."""
        from torchx import specs

        who = "{{ dag_run.conf.get('who', 'AppDef') }}"
        args = [HELLO, "--name", who, "--steps", "3", "--sleep", "1"]
        role = specs.Role(name="summary", image=IMAGE, entrypoint="python", args=args, num_replicas=2)
        return specs.AppDef(name="summary", roles=[role])

    join = TorchXOperator(
        task_id="join",
        component="utils.python",
        component_args=["--script", HELLO, "--", "--name", "join", "--steps", "2", "--sleep", "1"],
        **step,
    )
    prepare >> train.expand(lr=LRS) >> join
    prepare >> summary() >> join


for deferrable in (False, True):
    with DAG(
        dag_id=f"k8s_pipeline_{'deferred' if deferrable else 'sync'}",
        schedule=None,
        start_date=START,
        catchup=False,
        tags=["torchx", "k8s-tests"],
    ):
        _pipeline(deferrable)
