"""DAG for the multi-node Slurm tests (tests/slurm/test_slurm_multinode.py): every app in the
partition ``multi``, whose two nodes are network namespaces of this machine (scripts/slurm/nodes.sh).

- ``ddp_deferred`` and ``ddp_worker``: the example training (dags/jobs/train.py) with TorchX's
  ``dist.ddp -j 2x1``: two replicas of 2 CPUs each (the component's default), one per node, gloo
  between them; one waits in the triggerer, one in the worker.
- ``roles``: an app of two roles of 2 CPUs each, one per node.
- ``ranks``: ``dist.ddp -j 2x2``: four ranks, more than one node's two CPUs hold, two per node.

The connection ``torchx_slurm`` comes from the test; ``data`` and ``out`` from the run's conf.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pendulum
from airflow.sdk import DAG
from torchx.specs import AppDef, Resource, Role

from torchx_airflow.operators.torchx import TorchXOperator

TRAIN = str(Path(__file__).resolve().parents[2] / "dags" / "jobs" / "train.py")
WHERE = str(Path(__file__).resolve().parents[1] / "jobs" / "where.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
MULTI = {"partition": "multi"}


def _role(name: str) -> Role:
    return Role(
        name=name,
        image="",
        entrypoint=sys.executable,
        args=[WHERE, name],
        resource=Resource(cpu=2, gpu=0, memMB=512),
    )


with DAG(dag_id="multinode", schedule=None, start_date=START, catchup=False, tags=["torchx", "slurm-tests"]):
    for wait, deferrable in (("deferred", True), ("worker", False)):
        TorchXOperator(
            task_id=f"ddp_{wait}",
            component="dist.ddp",
            component_args=[
                "-j", "2x1", "--script", TRAIN, "--",
                "--data", "{{ dag_run.conf['data'] }}", "--lr", "0.2", "--epochs", "2",
                "--out", "{{ dag_run.conf['out'] }}/" + wait,
            ],
            cfg=MULTI,
            torchx_conn_id="torchx_slurm",
            deferrable=deferrable,
            poll_interval=1,
        )  # fmt: skip
    TorchXOperator(
        task_id="roles",
        app=AppDef(name="mnroles", roles=[_role("mnrole_a"), _role("mnrole_b")]),
        cfg=MULTI,
        torchx_conn_id="torchx_slurm",
        poll_interval=1,
    )
    TorchXOperator(
        task_id="ranks",
        component="dist.ddp",
        component_args=["-j", "2x2", "--script", WHERE, "--", "ranks"],
        cfg=MULTI,
        torchx_conn_id="torchx_slurm",
        poll_interval=1,
    )
