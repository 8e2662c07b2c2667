"""The comparison view over an eight-run sweep on the real Slurm cluster, through a running Airflow
(tests/dags/torchx_compare_dags.py, ``tx_compare_sweep_slurm``): each mapped task's job logs a loss
curve and final metrics to an fsspec store; the view's JSON, from the API server over HTTP, holds
exactly what the jobs wrote, and never the sweep's hidden key."""

from __future__ import annotations

import json
import urllib.parse

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore

from tests.dags.torchx_compare_dags import EPOCHS, LEARNING_RATES, SECRET
from tests.slurm.conftest import REPO
from tests.stack import AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
DAG = "tx_compare_sweep_slurm"


@pytest.fixture(scope="module")
def stack(slurm_cluster, tmp_path_factory):
    """Airflow whose ``torchx_compare_slurm`` connection submits to Slurm and tracks to a store."""
    home = tmp_path_factory.mktemp("compare-airflow")
    conn = {"scheduler": "slurm", "trackers": ["compare_fs"]}
    stack = AirflowStack(
        home=home,
        dags_folder=REPO / "tests" / "dags",
        env_extra={
            "AIRFLOW_CONN_TORCHX_COMPARE_SLURM": json.dumps({"conn_type": "torchx", "extra": conn}),
            "AIRFLOW_CONN_COMPARE_FS": json.dumps(
                {"conn_type": "torchx_fsspec", "extra": {"root": str(home / "store")}}
            ),
            "AIRFLOW__CORE__PARALLELISM": "4",
        },
    )
    with stack.running():
        yield stack, home / "store"


def test_sweep_on_slurm_shows_exactly_what_the_jobs_logged(stack):
    airflow, store_root = stack
    run = airflow.trigger(DAG)
    assert airflow.wait_run(DAG, run, timeout=900) == "success"
    path = f"/torchx/api/compare/{DAG}/{urllib.parse.quote(run, safe='')}"
    keys = [f"{run}/{i}" for i in range(len(LEARNING_RATES))]
    query = urllib.parse.urlencode([("task_id", "train"), *[("show", k) for k in keys]])
    data = airflow._request("GET", f"{path}?{query}")
    assert SECRET not in json.dumps(data)
    assert [row["map_index"] for row in data["runs"]] == list(range(8))
    store = FsspecStore(str(store_root))
    for row, lr in zip(data["runs"], LEARNING_RATES, strict=True):
        handle = airflow.xcom(DAG, run, "train", "torchx_run_id", map_index=row["map_index"])
        assert handle.startswith("slurm://") and row["torchx_run_id"] == handle
        assert row["state"] == "SUCCEEDED" and row["usage"]["source"] == "sacct"
        # sacct counts whole seconds: a job may take 0 s; the column is the accounting's figure
        assert row["elapsed_s"] == row["usage"]["elapsed_s"] >= 0
        curve = [[epoch, lr / epoch] for epoch in range(1, EPOCHS + 1)]
        assert row["metrics"] == {"train_loss": lr / EPOCHS, "val_loss": lr / (EPOCHS + 1), "epochs": EPOCHS}
        assert data["series"][row["key"]] == {"train_loss": curve}
        written = store.metadata(handle)
        assert written["torchx_metrics"]["series"]["train_loss"] == curve
        assert written["val_loss"] == row["metrics"]["val_loss"]
    assert "env.SEED" in data["params"] and data["trackers"] == ["compare_fs"]
    assert "scheduler" not in data["params"]  # the same for every run: not a column
