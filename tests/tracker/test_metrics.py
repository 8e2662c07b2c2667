"""Metrics from training code (``torchx_airflow_tracker.metrics``): a real two-rank TorchX job on
local_cwd logs a curve and final metrics; both stores hold each point once, MLflow as real metrics
with their steps, the fsspec store as metadata TorchX's own reader reads."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import fsspec
import pytest
from mlflow.tracking import MlflowClient
from torchx.components.dist import ddp
from torchx.runner import get_runner
from torchx.tracker.api import AppRun
from torchx.tracker.backend.fsspec import FsspecTracker
from torchx_airflow_tracker.config import encode_config
from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.metrics import (
    MAX_POINTS,
    METRICS_KEY,
    MetricsLogger,
    MetricValueError,
    process_rank,
    thin,
)
from torchx_airflow_tracker.mlflow_store import MlflowStore
from torchx_airflow_tracker.store_layout import METADATA, run_dir_name

JOB = str(Path(__file__).resolve().parents[1] / "jobs" / "metrics_job.py")
LR, EPOCHS = 0.5, 4


def _run_job(env: dict[str, str]) -> tuple[str, dict]:
    app = ddp(str(LR), str(EPOCHS), script=JOB, j="1x2")
    app.roles[0].env.update(env)
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd")
        status = runner.wait(handle, wait_interval=0.2)
        output = "".join(runner.log_lines(handle, app.roles[0].name, 0))
        assert status.state.name == "SUCCEEDED", (status, output)
    (line,) = [line for line in output.splitlines() if "METRICS " in line]
    return handle, json.loads(line.split("METRICS ", 1)[1])


@pytest.mark.timeout(240)
def test_two_ranks_log_each_point_once_to_both_stores(tmp_path, mlflow_uri):
    root = str(tmp_path / "store")
    config = [
        {"kind": "fsspec", "config": {"root": root}},
        {"kind": "mlflow", "config": {"tracking_uri": mlflow_uri, "experiment": "metrics-job"}},
    ]
    handle, logged = _run_job(
        {"TORCHX_TRACKERS": "airflow_stores", "TORCHX_TRACKER_AIRFLOW_STORES_CONFIG": encode_config(config)}
    )
    curve = logged["series"]["train_loss"]
    assert [p[0] for p in curve] == [1, 2, 3, 4]

    # fsspec: one metrics entry (rank 1 wrote none), read as ordinary metadata by TorchX's reader too
    entries = os.listdir(Path(root) / run_dir_name(handle) / METADATA)
    assert len([e for e in entries if e.endswith("-metrics")]) == 1
    expected_entry = {"final": {"train_loss": curve[-1][1]}, "series": {"train_loss": curve}}
    ours = FsspecStore(root).metadata(handle)
    assert ours[METRICS_KEY] == expected_entry
    assert (ours["val_loss"], ours["epochs"]) == (logged["val_loss"], EPOCHS)
    theirs = FsspecTracker(fsspec.filesystem("file"), root).metadata(handle)
    assert theirs[METRICS_KEY] == expected_entry

    # MLflow: real metrics with their steps, each once; the final ones too
    store = MlflowStore(mlflow_uri, "metrics-job")
    mlflow_id = store.mlflow_run_id(handle)
    client = MlflowClient(mlflow_uri)
    history = sorted((m.step, m.value) for m in client.get_metric_history(mlflow_id, "train_loss"))
    assert history == [tuple(p) for p in curve]
    metrics = client.get_run(mlflow_id).data.metrics
    assert (metrics["val_loss"], metrics["epochs"]) == (logged["val_loss"], EPOCHS)


def test_only_rank_zero_writes_by_default(tmp_path, monkeypatch):
    root = str(tmp_path / "store")
    run = AppRun("local_cwd://torchx/app-1", [FsspecStore(root)])
    for rank in (0, 1):  # rank 1 last: what it wrote would win the merge
        monkeypatch.setenv("RANK", str(rank))
        logger = MetricsLogger(run)
        logger.log(1, loss=float(rank + 1))
        logger.log_final(acc=float(rank))
    assert FsspecStore(root).metadata(run.id) == {
        METRICS_KEY: {"final": {"loss": 1.0}, "series": {"loss": [[1, 1.0]]}},
        "acc": 0.0,
    }


def test_every_rank_writes_under_its_own_names(tmp_path):
    root = str(tmp_path / "store")
    run = AppRun("local_cwd://torchx/app-2", [FsspecStore(root)])
    for rank in (0, 1):
        MetricsLogger(run, every_rank=True, rank=rank).log(2, loss=0.25)
    # two writers, two entries under a key each: a metadata read keeps both ranks' curves
    metadata = FsspecStore(root).metadata(run.id)
    assert metadata[f"{METRICS_KEY}.rank0"]["series"] == {"loss.rank0": [[2, 0.25]]}
    assert metadata[f"{METRICS_KEY}.rank1"]["series"] == {"loss.rank1": [[2, 0.25]]}
    names = os.listdir(Path(root) / run_dir_name(run.id) / METADATA)
    assert len(names) == 2
    from torchx_airflow.lineage.metrics import metric_series

    assert metric_series(FsspecStore(root), run.id) == {"loss.rank0": [(2, 0.25)], "loss.rank1": [(2, 0.25)]}


def test_rank_comes_from_torchrun_then_slurm(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("SLURM_PROCID", "3")
    assert process_rank() == 3
    monkeypatch.setenv("RANK", "1")
    assert process_rank() == 1


@pytest.mark.parametrize(
    ("step", "metrics", "named"),
    [
        (1, {"loss": math.nan}, "'loss' = nan"),
        (1, {"loss": math.inf}, "'loss' = inf"),
        (1, {"loss": True}, "'loss' = True"),
        (1, {"loss": "0.1"}, "'loss' = '0.1'"),
        (1, {"loss": 10**400}, "'loss' = 1000"),
        (-1, {"loss": 0.1}, "step -1"),
        (1.5, {"loss": 0.1}, "step 1.5"),
        (1, {"x" * 251: 0.1}, "xxxx"),
    ],
)
def test_bad_metrics_are_refused_before_anything_is_written(tmp_path, step, metrics, named):
    root = str(tmp_path / "store")
    run = AppRun("local_cwd://torchx/app-3", [FsspecStore(root)])
    with pytest.raises(MetricValueError, match=named[:20].replace("(", r"\(")):
        MetricsLogger(run, rank=0).log(step, **metrics)
    assert not (Path(root) / run_dir_name(run.id)).exists()


def test_a_long_curve_is_thinned_to_its_bound_keeping_its_ends(tmp_path):
    run = AppRun("local_cwd://torchx/app-4", [FsspecStore(str(tmp_path / "store"))])
    logger = MetricsLogger(run, rank=0)
    for step in range(1, 2 * MAX_POINTS + 2):
        logger.series.setdefault("loss", []).append((step, float(step)))  # no write per point here
    logger.log(2 * MAX_POINTS + 2, loss=0.0)
    points = FsspecStore(str(tmp_path / "store")).metadata(run.id)[METRICS_KEY]["series"]["loss"]
    assert len(points) <= MAX_POINTS
    assert points[0] == [1, 1.0] and points[-1] == [2 * MAX_POINTS + 2, 0.0]
    assert thin([(1, 1.0), (2, 2.0), (3, 3.0)], 2) == [(1, 1.0), (3, 3.0)]


def test_other_torchx_trackers_get_the_entry_as_metadata(tmp_path):
    root = str(tmp_path / "theirs")
    fs = fsspec.filesystem("file")
    fs.makedirs(root, exist_ok=True)
    run = AppRun("local_cwd://torchx/app-5", [FsspecTracker(fs, root)])
    MetricsLogger(run, rank=0).log(1, loss=0.5)
    assert FsspecTracker(fs, root).metadata(run.id)[METRICS_KEY]["series"] == {"loss": [[1, 0.5]]}
