"""A sweep on Kubernetes (tests/kubernetes/test_kubernetes_sweep.py): 9 configurations (three
learning rates x three widths) by successive halving with rungs at 1, 3 and 9 epochs, each segment a
Volcano Job of the connection ``torchx_k8s_tracked`` (kubernetes, tracking to the fsspec store
``k8s_fs``), which the test defines; ``out`` comes from the run's conf.

The trial is tests/dags/jobs/sweep_trial.py at depth 2: the best configuration after 9 epochs
(lr=0.03, width=16) is only second after one.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, Param

from torchx_airflow.sweeps import torchx_sweep

REPO = Path(__file__).resolve().parents[3]
JOB = str(REPO / "tests" / "dags" / "jobs" / "sweep_trial.py")

with DAG(
    "k8s_sweep",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
    params={"out": Param("/tmp/k8s-sweep", type="string")},
    tags=["torchx", "k8s-tests"],
):
    torchx_sweep(
        sweep_id="sweep",
        component="utils.python",
        component_args=[
            "--script",
            JOB,
            "--",
            "--lr",
            "{{ trial.lr }}",
            "--width",
            "{{ trial.width }}",
            "--depth",
            "2",
            "--out",
            "{{ params.out }}/{{ trial.id }}/r{{ trial.rung }}",
        ],  # fmt: skip
        search_space={"lr": [0.01, 0.03, 0.1], "width": [8, 16, 32]},
        objective="val_loss",
        mode="min",
        min_budget=1,
        max_budget=9,
        reduction_factor=3,
        promote_to=Asset("model://k8s_sweep/best"),
        artifact="model",
        torchx_conn_id="torchx_k8s_tracked",
        poll_interval=0.5,
    )
