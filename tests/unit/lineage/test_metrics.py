"""Reading a run's metrics back (``torchx_airflow.lineage.metrics``) from real stores: what a
``MetricsLogger`` wrote, exactly; junk a job may have written instead, skipped without an error."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from torchx.tracker.api import AppRun
from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.metrics import METRICS_KEY, MetricsLogger
from torchx_airflow_tracker.mlflow_store import MlflowStore
from torchx_airflow_tracker.multi_store import MultiStore
from torchx_airflow_tracker.store_layout import METADATA, run_dir_name

from torchx_airflow.lineage.metrics import MAX_METRICS, MAX_POINTS, MAX_SERIES, final_metrics, metric_series

CURVE = [(1, 0.5), (2, 0.25), (3, 0.125)]


def _log(store, run_id: str) -> None:
    logger = MetricsLogger(AppRun(run_id, [store]), rank=0)
    for step, value in CURVE:
        logger.log(step, loss=value, acc=1 - value)
    logger.log_final(val_loss=0.0625, epochs=3)
    store.add_metadata(run_id, airflow_attempt=2, torchx_cost={"usd": 1.0}, note="text", ok=True)


@pytest.fixture(params=["fsspec", "mlflow"])
def store(request, tmp_path):
    if request.param == "fsspec":
        return FsspecStore(str(tmp_path / "store"))
    return MlflowStore(request.getfixturevalue("mlflow_uri"), f"metrics-{uuid.uuid4().hex[:6]}")


def test_reads_exactly_what_the_job_logged(store):
    run_id = f"local_cwd://torchx/run-{uuid.uuid4().hex[:6]}"
    _log(store, run_id)
    assert final_metrics(store, run_id) == {"loss": 0.125, "acc": 0.875, "val_loss": 0.0625, "epochs": 3.0}
    assert metric_series(store, run_id) == {"loss": CURVE, "acc": [(s, 1 - v) for s, v in CURVE]}
    # the same through a multi-store (reads from its first store)
    assert metric_series(MultiStore([store]), run_id)["loss"] == CURVE


def test_a_run_without_metrics_or_store_gives_nothing(store):
    assert final_metrics(store, "local_cwd://torchx/none") == {}
    assert metric_series(store, "local_cwd://torchx/none") == {}


def test_mlflow_metrics_the_job_logged_itself_count_as_final(mlflow_uri):
    store = MlflowStore(mlflow_uri, f"direct-{uuid.uuid4().hex[:6]}")
    run_id = "local_cwd://torchx/direct"
    store.add_metadata(run_id, lr=0.1)
    MlflowClient(mlflow_uri).log_metric(store.mlflow_run_id(run_id), "f1", 0.75, step=7)
    assert final_metrics(store, run_id) == {"lr": 0.1, "f1": 0.75}


def _junk_entry(root: Path, run_id: str, content: str) -> None:
    directory = root / run_dir_name(run_id) / METADATA
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{uuid.uuid4().hex}-junk").write_text(content)


@pytest.mark.parametrize(
    "entry",
    [
        "not json",
        json.dumps([1, 2]),
        json.dumps({"metadata": {METRICS_KEY: "a string"}}),
        json.dumps({"metadata": {METRICS_KEY: {"series": [1, 2]}}}),
        json.dumps({"metadata": {METRICS_KEY: {"series": {"loss": "x", "": [[1, 1.0]]}}}}),
        json.dumps({"metadata": {METRICS_KEY: {"series": {"loss": [[1], ["a", 1.0], [-1, 1.0], [1, "1"]]}}}}),
        json.dumps({"metadata": {"loss": "NaN", "acc": [1], "flag": True, "x" * 300: 1.0}}),
        '{"metadata": {"loss": NaN, "acc": Infinity, "big": 1e999}}',
    ],
)
def test_junk_in_an_fsspec_store_is_skipped(tmp_path, entry):
    root, run_id = tmp_path / "store", "local_cwd://torchx/junk"
    _junk_entry(root, run_id, entry)
    store = FsspecStore(str(root))
    store.add_metadata(run_id, good=1.5)
    assert final_metrics(store, run_id) == {"good": 1.5}
    assert metric_series(store, run_id) == {}


def test_reads_are_bounded(tmp_path):
    root, run_id = tmp_path / "store", "local_cwd://torchx/huge"
    series = {f"m{i}": [[s, float(s)] for s in range(3 * MAX_POINTS)] for i in range(MAX_SERIES + 5)}
    metadata = {f"k{i}": float(i) for i in range(MAX_METRICS + 50)}
    _junk_entry(root, run_id, json.dumps({"metadata": {**metadata, METRICS_KEY: {"series": series}}}))
    store = FsspecStore(str(root))
    read = metric_series(store, run_id)
    assert len(read) == MAX_SERIES
    assert all(len(points) <= MAX_POINTS for points in read.values())
    assert read["m0"][0] == (0, 0.0) and read["m0"][-1] == (3 * MAX_POINTS - 1, float(3 * MAX_POINTS - 1))
    assert len(final_metrics(store, run_id)) == MAX_METRICS
    assert all(math.isfinite(v) for v in final_metrics(store, run_id).values())


def test_a_store_that_fails_gives_nothing(tmp_path):
    root = tmp_path / "not-a-dir"
    root.write_text("a file where the store's root should be")
    store = FsspecStore(str(root))
    assert final_metrics(store, "local_cwd://torchx/x") == {}
    assert metric_series(store, "local_cwd://torchx/x") == {}
