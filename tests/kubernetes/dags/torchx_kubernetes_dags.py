"""DAGs for the Kubernetes tests: a TorchX app of two replicas on the test cluster, in the worker.

They use the connection ``torchx_k8s`` (scheduler kubernetes, namespace default, queue test), which
the tests define. ``seconds`` comes from the run's conf.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from torchx_airflow.operators.torchx import TorchXOperator

COUNTER = str(Path(__file__).resolve().parents[2] / "dags" / "jobs" / "counter.py")

with DAG(dag_id="k8s_sync", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False):
    TorchXOperator(
        task_id="run",
        component="dist.spmd",
        component_args=[
            "-j",
            "2x1",
            "--script",
            COUNTER,
            "--",
            "--seconds",
            "{{ dag_run.conf.get('seconds', 2) }}",
        ],  # fmt: skip
        torchx_conn_id="torchx_k8s",
        tracker_conn_ids=[],
        poll_interval=1,
    )
