"""DAGs for the Kubernetes tests: TorchX apps on the test cluster, in the worker and deferred.

They use the connection ``torchx_k8s`` (scheduler kubernetes, namespace default, queue test) and,
for the resubmission DAG, the tracker connection ``k8s_fs`` (an fsspec store), which the tests
define. ``seconds``, ``data``, ``out``, ``epochs`` and ``epoch_seconds`` come from the run's conf.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG
from torchx.specs import AppDef, Role

from torchx_airflow.operators.torchx import TorchXOperator

REPO = Path(__file__).resolve().parents[3]
COUNTER = str(REPO / "tests" / "dags" / "jobs" / "counter.py")
TRAIN = str(REPO / "dags" / "jobs" / "train.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def _dag(dag_id: str) -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["torchx", "k8s-tests"])


def _counter(**kwargs) -> TorchXOperator:
    """Two replicas of tests/dags/jobs/counter.py (role ``counter``), each printing its numbered lines:
    no torchrun, whose rendezvous port all pods would share on the test cluster's one host."""
    role = Role(
        name="counter",
        image="ghcr.io/pytorch/torchx:0.7.0",  # not pulled by the stand-in kubelet
        entrypoint="python3",
        args=[COUNTER, "--seconds", "{{ dag_run.conf.get('seconds', 2) }}"],
        num_replicas=2,
    )
    kwargs.setdefault("tracker_conn_ids", [])
    return TorchXOperator(
        task_id="run", app=AppDef(name="counter", roles=[role]), torchx_conn_id="torchx_k8s", poll_interval=1,
        **kwargs,
    )  # fmt: skip


# Two replicas, in the worker and deferred; a retry reattaches to the job an earlier try left.
for dag_id, deferrable in (("k8s_sync", False), ("k8s_deferred", True)):
    with _dag(dag_id):
        _counter(deferrable=deferrable, retries=1, retry_delay=timedelta(seconds=1))

# A wait that gives the API server 8 s: past that, the task fails saying so (no retry).
with _dag("k8s_short_outage_budget"):
    _counter(outage_timeout=8, retries=0)

# The example training (dags/jobs/train.py: a checkpoint every epoch), retries=0: a job the cluster
# ends (an evicted pod) is resubmitted by the task itself and resumes from its checkpoint.
with _dag("k8s_resubmit_train"):
    TorchXOperator(
        task_id="train",
        component="dist.ddp",
        component_args=[
            "-j",
            "1x1",
            "--script",
            TRAIN,
            "--",
            "--data",
            "{{ dag_run.conf['data'] }}",
            "--lr",
            "0.2",
            "--epochs",
            "{{ dag_run.conf.get('epochs', 8) }}",
            "--epoch-seconds",
            "{{ dag_run.conf.get('epoch_seconds', 3) }}",
            "--out",
            "{{ dag_run.conf['out'] }}",
        ],  # fmt: skip
        torchx_conn_id="torchx_k8s",
        tracker_conn_ids=["k8s_fs"],
        deferrable=True,
        poll_interval=1,
        retries=0,
    )
