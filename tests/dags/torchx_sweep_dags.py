"""DAGs of the sweep tests (tests/integration/test_sweep_dags.py): 27 configurations (three values of
three parameters) by successive halving with rungs at 1, 3 and 9 epochs, cached, promoting the best
configuration's model; the same, uncached, under the ``max_cost`` the test sets in ``TX_SWEEP_MAX_COST``
(read when the DAG is parsed: the sweep's budget is fixed in the DAG), its first rung priced at half
a CPU-second an epoch (what a segment spends is more: its Python starts)."""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, Param

from torchx_airflow.sweeps import torchx_sweep

JOB = str(Path(__file__).resolve().parent / "jobs" / "sweep_trial.py")
SPACE = {"lr": [0.01, 0.03, 0.1], "width": [8, 16, 32], "depth": [1, 2, 3]}
ARGS = [
    "--script", JOB, "--",
    "--lr", "{{ trial.lr }}", "--width", "{{ trial.width }}", "--depth", "{{ trial.depth }}",
    "--out", "{{ params.out }}/{{ trial.id }}/r{{ trial.rung }}", "--series",
]  # fmt: skip

BUDGET = float(os.environ.get("TX_SWEEP_MAX_COST") or 1.0)

for dag_id, max_cost in (("tx_sweep", None), ("tx_sweep_budget", BUDGET)):
    with DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        default_args={"retries": 0},
        params={"out": Param("/tmp/tx-sweep", type="string")},
    ):
        torchx_sweep(
            sweep_id="sweep",
            component="utils.python",
            component_args=ARGS,
            search_space=SPACE,
            objective="val_loss",
            mode="min",
            min_budget=1,
            max_budget=9,
            reduction_factor=3,
            max_cost=max_cost,
            unit_duration=0.5 if max_cost else None,  # prices the first rung: under what it spends
            promote_to=Asset(f"model://{dag_id}/best"),
            artifact="model",
            cache=max_cost is None,
            poll_interval=0.2,
        )
