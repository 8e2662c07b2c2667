"""The DAG of the Hyperband test (tests/integration/test_hyperband_dags.py): 9 configurations (three
learning rates x three depths) by Hyperband on rungs at 1, 3 and 9 epochs (brackets b2, b1, b0), seed
0, promoting the best configuration's model, under a ``max_cost`` of 1200 CPU-seconds priced with
``unit_duration`` 20 s: shares of 415, 369 and 415 for b2, b1 and b0, whose first rungs are priced
from their trials' requests (one CPU each) at 180, 300 and 540. b0's passes its share, so b0 trains
nothing; b2 and b1 spend a tenth of theirs.

The job is tests/dags/jobs/sweep_trial.py: lr=0.1 leads early and ends worse, so bracket b2 (successive
halving over all nine) keeps lr=0.1 to the end, and bracket b1, which starts at 3 epochs, finds the
best configuration (lr=0.03, depth=2)."""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, Param

from torchx_airflow.sweeps import torchx_sweep

JOB = str(Path(__file__).resolve().parent / "jobs" / "sweep_trial.py")
SPACE = {"lr": [0.01, 0.03, 0.1], "width": [16], "depth": [1, 2, 3]}
ARGS = [
    "--script", JOB, "--",
    "--lr", "{{ trial.lr }}", "--width", "{{ trial.width }}", "--depth", "{{ trial.depth }}",
    "--out", "{{ params.out }}/{{ trial.id }}/r{{ trial.rung }}",
]  # fmt: skip

with DAG(
    "tx_hyperband",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 0},
    params={"out": Param("/tmp/tx-hyperband", type="string")},
):
    torchx_sweep(
        sweep_id="hyperband",
        algorithm="hyperband",
        seed=0,
        component="utils.python",
        component_args=ARGS,
        search_space=SPACE,
        objective="val_loss",
        mode="min",
        min_budget=1,
        max_budget=9,
        reduction_factor=3,
        max_cost=1200,
        unit_duration=20,
        promote_to=Asset("model://tx_hyperband/best"),
        artifact="model",
        poll_interval=0.2,
    )
