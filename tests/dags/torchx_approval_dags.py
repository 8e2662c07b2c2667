"""DAGs for the cost approval tests (tests/integration/test_cost_approval.py): apps whose estimate (8
CPUs and 16 GB for an hour) is far over their ``max_cost``, on connections that ask an approver.

``tx_cost_approval``: a classic and a ``@task.torchx`` task on ``torchx_approval`` (the approver has
minutes). ``tx_cost_approval_timeout``: one task on ``torchx_approval_short`` (seconds): no one answers.
``tx_cost_approval_changed``: a ``@task.torchx`` task whose app's replicas come from the Airflow
Variable ``tx_approval_replicas``, which the test changes between the question and the answer. Those
connections name the approver (``cost_approvers``); ``tx_cost_approval_self`` is on
``torchx_approval_open``, which names none: the requester answers it. ``tx_cost_approval_sweep``: a
sweep of three trials (rungs at 1 and 3 epochs) whose first rung (3 x 1 CPU and 1 GB for an hour)
is over its ``max_cost``: its plan asks the approver before anything trains.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, task
from torchx.specs import AppDef, Resource, Role

from torchx_airflow.operators.torchx import TorchXOperator
from torchx_airflow.sweeps import torchx_sweep

BURN = str(Path(__file__).resolve().parent / "jobs" / "burn.py")
TRIAL = str(Path(__file__).resolve().parent / "jobs" / "sweep_trial.py")
RUN_DIR = "{{ run_id | replace(':', '_') | replace('+', '_') }}"
OUT = "{{ var.value.tx_approval_sweep_out }}/" + RUN_DIR + "/{{ trial.id }}/r{{ trial.rung }}"
START = pendulum.datetime(2026, 1, 1, tz="UTC")
TAGS = ["torchx", "approval-tests"]


def dear_app(name: str, replicas: int = 1) -> AppDef:
    """Asks for 8 CPUs and 16 GB (the estimate), runs a job of a tenth of a CPU-second on local_cwd."""
    resource = Resource(cpu=8, gpu=0, memMB=16384)
    args = [BURN, "--cpu-seconds", "0.1", "--mb", "1"]
    role = Role(name, image="/tmp", entrypoint=sys.executable, args=args, resource=resource)
    role.num_replicas = replicas
    return AppDef(name, roles=[role])


with DAG("tx_cost_approval", schedule=None, start_date=START, catchup=False, tags=TAGS):
    common = {"torchx_conn_id": "torchx_approval", "max_cost": 0.01, "expected_duration": 3600}
    TorchXOperator(task_id="dear", app=dear_app("dear-classic"), poll_interval=1, **common)

    @task.torchx(poll_interval=1, **common)
    def dear_decorated():
        return dear_app("dear-decorated")

    dear_decorated()

with DAG("tx_cost_approval_timeout", schedule=None, start_date=START, catchup=False, tags=TAGS):
    TorchXOperator(
        task_id="dear",
        app=dear_app("dear-unanswered"),
        torchx_conn_id="torchx_approval_short",
        max_cost=0.01,
        expected_duration=3600,
        poll_interval=1,
    )

with DAG("tx_cost_approval_self", schedule=None, start_date=START, catchup=False, tags=TAGS):
    TorchXOperator(
        task_id="dear",
        app=dear_app("dear-self"),
        torchx_conn_id="torchx_approval_open",
        max_cost=0.01,
        expected_duration=3600,
        poll_interval=1,
    )

with DAG("tx_cost_approval_changed", schedule=None, start_date=START, catchup=False, tags=TAGS):

    @task.torchx(torchx_conn_id="torchx_approval", max_cost=0.01, expected_duration=3600, poll_interval=1)
    def changed():
        from airflow.sdk import Variable

        return dear_app("dear-changed", int(Variable.get("tx_approval_replicas", default="1")))

    changed()

with DAG("tx_cost_approval_sweep", schedule=None, start_date=START, catchup=False, tags=TAGS):
    torchx_sweep(
        sweep_id="sweep",
        component="utils.python",
        component_args=[
            "--cpu",
            "1",
            "--memMB",
            "1024",
            "--script",
            TRIAL,
            "--",
            "--lr",
            "{{ trial.lr }}",
            "--width",
            "16",
            "--depth",
            "2",
            "--out",
            OUT,
        ],  # fmt: skip
        search_space={"lr": [0.01, 0.03, 0.1]},
        objective="val_loss",
        min_budget=1,
        max_budget=3,
        max_cost=0.01,
        unit_duration=3600,
        promote_to=Asset("model://tx_cost_approval_sweep/best"),
        torchx_conn_id="torchx_approval",
        tracker_conn_ids=["approval_fs"],
        poll_interval=1,
    )
