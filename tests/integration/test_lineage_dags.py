"""Automatic lineage and in-job tracking through real DAG runs, with real backends: an fsspec store
(local directory, or moto's S3 server behind s3fs) and a real MLflow tracking server."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.mlflow_store import MlflowStore

from tests.conftest import REPO

# The pipeline's run (three DDP train apps) takes about four minutes on a busy 2-core machine.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

S3_SECRET = "s3-Secret-Key-Lineage-0042"
MLFLOW_PASSWORD = "mlflow-Pa55word-Lineage"
WORKER_ENV = {
    "TORCHX_TRACKERS": "worker_tracker",
    "TORCHX_TRACKER_WORKER_TRACKER_CONFIG": "from-the-worker",
    "TORCHX_PARENT_RUN_ID": "worker://not-a-parent",
}


def _conn(conn_type: str, **fields) -> str:
    return json.dumps({"conn_type": conn_type, **fields})


def _sources(store, run_id: str) -> list[str]:
    return sorted(s.source_run_id for s in store.sources(run_id))


def _check_airflow_metadata(md: dict, dag_id: str, run_id: str, task_id: str, map_index: int, upstream: list):
    assert md["airflow_dag_id"] == dag_id
    assert md["airflow_run_id"] == run_id
    assert md["airflow_task_id"] == task_id
    assert md["airflow_map_index"] == map_index
    assert md["airflow_try_number"] == 1
    assert datetime.fromisoformat(md["airflow_logical_date"]).tzinfo is not None
    assert md["airflow_upstream_task_ids"] == upstream


@pytest.fixture(scope="module")
def pipeline_run(run_dag, tmp_path_factory, mlflow_uri):
    """One run of the example torchx_pipeline with both backends and a conf that changes the params."""
    root = tmp_path_factory.mktemp("pipeline-store")
    out = tmp_path_factory.mktemp("pipeline-out")
    env = {
        "AIRFLOW_CONN_TORCHX_DEFAULT": _conn(
            "torchx", extra={"scheduler": "local_cwd", "trackers": ["pipe_fs", "pipe_ml"]}
        ),
        "AIRFLOW_CONN_PIPE_FS": _conn("torchx_fsspec", extra={"root": str(root)}),
        "AIRFLOW_CONN_PIPE_ML": _conn("mlflow", host=mlflow_uri, extra={"experiment": "pipeline"}),
    }
    conf = {"learning_rates": [0.1, 0.4], "epochs": 7, "rows": 60, "output_dir": str(out)}
    result = run_dag("torchx_pipeline", conf=conf, env=env, dags_folder=REPO / "dags", timeout=400)
    assert result.returncode == 0, result.output[-6000:]
    stores = {"fsspec": FsspecStore(str(root)), "mlflow": MlflowStore(mlflow_uri, "pipeline")}
    return result, stores, out


def test_pipeline_succeeds_with_the_triggered_params(pipeline_run):
    result, _, out = pipeline_run
    assert result.states == {
        "prepare": "success",
        "train_args": "success",
        "train[0]": "success",
        "train[1]": "success",
        "evaluate": "success",
        "promote": "success",
    }
    # the jobs got the conf's values: 60 rows, two learning rates, 7 epochs
    assert result.xcom("prepare")["metadata"]["rows"] == 60
    trained = [result.xcom("train", map_index=i) for i in (0, 1)]
    assert [t["metadata"]["lr"] for t in trained] == [0.1, 0.4]
    assert {t["metadata"]["epochs"] for t in trained} == {7}
    assert all(Path(t["artifacts"]["model"]["path"]).is_relative_to(out) for t in trained)


def test_pipeline_trains_with_ddp_on_two_ranks_that_both_record(pipeline_run):
    result, _, _ = pipeline_run
    for i in (0, 1):
        md = result.xcom("train", map_index=i)["metadata"]
        # DistributedSampler split the 60 rows over the two ranks; each rank recorded its share
        assert (md["world_size"], md["backend"]) == (2, "gloo")
        assert (md["rank0_samples"], md["rank1_samples"]) == (30, 30)
    for rank in (0, 1):
        assert result.output.count(f"[train/0] [{rank}]:rank {rank}/2: 30 samples, backend gloo") == 2
    for lr in (0.1, 0.4):  # rank 0 prints the loss over both ranks' samples every epoch, and it falls
        losses = [float(x) for x in re.findall(rf"\[0\]:epoch \d+/7 lr={lr} loss=([0-9.]+)", result.output)]
        assert len(losses) == 7 and losses[-1] < losses[0], losses


def test_pipeline_loss_per_epoch_is_an_mlflow_metric_with_steps(pipeline_run, mlflow_uri):
    from mlflow import MlflowClient

    result, stores, _ = pipeline_run
    client = MlflowClient(mlflow_uri)
    for i in (0, 1):
        handle = result.xcom("train", key="app_handle", map_index=i)
        history = client.get_metric_history(stores["mlflow"].mlflow_run_id(handle), "train_loss")
        assert sorted(m.step for m in history) == list(range(1, 8))
        assert all(m.value > 0 for m in history)


def test_pipeline_promotes_the_train_run_with_the_lowest_final_loss(pipeline_run):
    from torchx_airflow.lineage.metrics import final_metrics, metric_series

    result, stores, _ = pipeline_run
    handles = [result.xcom("train", key="app_handle", map_index=i) for i in (0, 1)]
    losses = {handle: final_metrics(stores["fsspec"], handle)["loss"] for handle in handles}
    best = min(handles, key=lambda handle: (losses[handle], handles.index(handle)))
    promoted = result.xcom("promote")
    assert (promoted["app_handle"], promoted["value"], promoted["objective"]) == (best, losses[best], "loss")
    model = result.xcom("train", map_index=handles.index(best))["artifacts"]["model"]["path"]
    assert promoted["path"] == model
    for name, store in stores.items():  # recorded on the promoted run only, in every tracker
        assert store.metadata(best)["airflow_promoted"]["asset"] == "model://torchx_pipeline/promoted", name
        assert all("airflow_promoted" not in store.metadata(h) for h in handles if h != best), name
        # the per-epoch loss the job logged with the metrics API, read back as a curve
        assert [step for step, _ in metric_series(store, best)["train_loss"]] == list(range(1, 8)), name


def test_evaluate_loads_the_trained_models(pipeline_run):
    result, _, _ = pipeline_run
    report = json.loads(Path(result.xcom("evaluate")["artifacts"]["report"]["path"]).read_text())
    models = {result.xcom("train", map_index=i)["artifacts"]["model"]["path"] for i in (0, 1)}
    assert {s["model"] for s in report["scores"]} == models
    assert {s["lr"] for s in report["scores"]} == {0.1, 0.4}  # read from the checkpoints
    for score in report["scores"]:
        assert f"lr={score['lr']}: loss {score['loss']:.5f} ({score['model']})" in result.output


def test_pipeline_lineage_edges_are_exact_in_both_backends(pipeline_run):
    result, stores, _ = pipeline_run
    prepare = result.xcom("prepare", key="app_handle")
    train = sorted(result.xcom("train", key="app_handle", map_index=i) for i in (0, 1))
    evaluate = result.xcom("evaluate", key="app_handle")
    assert prepare.startswith("local_cwd://torchx/prepare-")
    for name, store in stores.items():
        assert _sources(store, evaluate) == train, name
        for handle in train:
            assert _sources(store, handle) == [prepare], name
        assert _sources(store, prepare) == [], name
        assert sorted(s.source_run_id for s in store.descendants(prepare)) == train, name
        lineage = store.lineage(evaluate)
        assert {(e.run_id, e.source_run_id) for e in lineage.upstream} == {
            *((evaluate, t) for t in train),
            *((t, prepare) for t in train),
        }, name


def test_pipeline_edges_carry_the_names_of_the_artifacts_that_fed_each_run(pipeline_run):
    """No change to the DAG: train's arguments name prepare's data, evaluate's name the models."""
    result, stores, _ = pipeline_run
    prepare = result.xcom("prepare", key="app_handle")
    train = sorted(result.xcom("train", key="app_handle", map_index=i) for i in (0, 1))
    evaluate = result.xcom("evaluate", key="app_handle")
    for name, store in stores.items():
        for handle in train:
            assert [(s.source_run_id, s.artifact_name) for s in store.sources(handle)] == [
                (prepare, "data")
            ], name
        assert sorted((s.source_run_id, s.artifact_name) for s in store.sources(evaluate)) == [
            (t, "model") for t in train
        ], name
        assert {(e.source_run_id, e.run_id, e.artifact_names) for e in store.lineage(evaluate).upstream} == {
            *((t, evaluate, ("model",)) for t in train),
            *((prepare, t, ("data",)) for t in train),
        }, name
    assert f"with parents ['{prepare} [data]']" in result.output


def test_pipeline_job_metadata_artifacts_and_airflow_context_in_both_backends(pipeline_run):
    result, stores, _ = pipeline_run
    for name, store in stores.items():
        for i, lr in enumerate([0.1, 0.4]):
            handle = result.xcom("train", key="app_handle", map_index=i)
            md = store.metadata(handle)
            assert md["lr"] == lr and md["epochs"] == 7 and md["loss"] >= 0, name
            _check_airflow_metadata(md, "torchx_pipeline", result.run_id, "train", i, ["train_args"])
            assert Path(store.artifacts(handle)["model"].path).exists(), name
        evaluate = result.xcom("evaluate", key="app_handle")
        md = store.metadata(evaluate)
        _check_airflow_metadata(md, "torchx_pipeline", result.run_id, "evaluate", -1, ["train"])
        assert md["models"] == 2 and md["best_lr"] in (0.1, 0.4), name
        assert set(store.artifacts(evaluate)) == {"report", "best_model"}, name


def test_pipeline_results_reach_xcom_and_the_mlflow_link(pipeline_run, mlflow_uri):
    result, stores, _ = pipeline_run
    evaluate = result.xcom("evaluate")
    handle = evaluate["app_handle"]
    assert evaluate["state"] == "SUCCEEDED"
    assert evaluate["sources"] == sorted(result.xcom("train", key="app_handle", map_index=i) for i in (0, 1))
    report = json.loads(Path(evaluate["artifacts"]["report"]["path"]).read_text())
    assert report["best"]["lr"] == evaluate["metadata"]["best_lr"]
    assert evaluate["artifacts"]["best_model"]["metadata"] == {"lr": evaluate["metadata"]["best_lr"]}
    url = result.xcom("evaluate", key="tracker_url")
    mlflow_run = stores["mlflow"].mlflow_run_id(handle)
    assert url == f"{mlflow_uri}/#/experiments/{stores['mlflow'].experiment_id}/runs/{mlflow_run}"
    assert result.xcom("evaluate", key="torchx_run_id") == handle


@pytest.fixture(scope="module")
def lineage_run(run_dag, mlflow_uri, s3_endpoint):
    """tx_lineage on an S3 store (credentials from the connection) and MLflow with a password."""
    env = {
        **WORKER_ENV,
        "AIRFLOW_CONN_TORCHX_DEFAULT": _conn(
            "torchx", extra={"scheduler": "local_cwd", "trackers": ["lin_s3", "lin_ml"]}
        ),
        "AIRFLOW_CONN_LIN_S3": _conn(
            "torchx_fsspec",
            login="testing",
            password=S3_SECRET,
            extra={"root": "s3://lineage-tests/runs", "storage_options": {"endpoint_url": s3_endpoint}},
        ),
        "AIRFLOW_CONN_LIN_ML": _conn(
            "mlflow",
            host=mlflow_uri,
            login="airflow",
            password=MLFLOW_PASSWORD,
            extra={"experiment": "lineage"},
        ),
    }
    result = run_dag("tx_lineage", env=env, timeout=400)
    assert result.returncode == 0, result.output[-6000:]
    s3 = FsspecStore(
        "s3://lineage-tests/runs", {"endpoint_url": s3_endpoint, "key": "testing", "secret": S3_SECRET}
    )
    return result, {"s3": s3, "mlflow": MlflowStore(mlflow_uri, "lineage")}


def test_fan_in_groups_helper_and_skipped_upstreams(lineage_run):
    result, stores = lineage_run
    assert result.states["skipme"] == "skipped"
    handle = {t: result.xcom(t, key="app_handle") for t in ("a", "grp.b", "c", "join")}
    feat = f"airflow://tx_lineage/{result.run_id}/feat"
    assert result.xcom("feat") == feat
    assert result.xcom("feat", key="torchx_run_id") == feat
    for name, store in stores.items():
        # join: c directly, grp.b through the untracked `plain`, the tracked @task feat; not the skipped
        # TorchX task, not `a` (behind feat and grp.b). The job's own TORCHX_PARENT_RUN_ID=c is one edge.
        assert _sources(store, handle["join"]) == sorted([handle["c"], handle["grp.b"], feat]), name
        assert len(list(store.sources(handle["join"]))) == 3, name
        assert _sources(store, handle["grp.b"]) == [handle["a"]], name
        assert _sources(store, feat) == [handle["a"]], name
        assert _sources(store, handle["c"]) == [], name
        assert store.metadata(feat)["rows"] == 3, name
        assert store.artifacts(feat)["features"].path == "/data/features.parquet", name
        _check_airflow_metadata(store.metadata(feat), "tx_lineage", result.run_id, "feat", -1, ["a"])
        _check_airflow_metadata(
            store.metadata(handle["join"]),
            "tx_lineage",
            result.run_id,
            "join",
            -1,
            ["c", "feat", "plain", "skipme"],
        )
        assert store.metadata(handle["join"])["step"] == "join", name  # written by the job itself


def test_jobs_get_the_tasks_trackers_never_the_workers(lineage_run):
    result, _ = lineage_run
    out = result.output
    assert "a: TORCHX_TRACKERS=airflow_stores" in out  # both stores behind one entry point
    assert "a: TORCHX_PARENT_RUN_ID=<unset>" in out
    assert f"join: TORCHX_PARENT_RUN_ID={result.xcom('c', key='app_handle')}" in out
    assert "worker://not-a-parent" not in out and "from-the-worker" not in out
    assert "join: recorded" in out


def test_no_secret_in_task_logs_dry_run_rendered_fields_or_xcom(lineage_run):
    result, stores = lineage_run
    # The secrets reached the job: it wrote to S3 with the connection's key and printed its password.
    for store in stores.values():  # the job wrote its own metadata to both
        assert store.metadata(result.xcom("a", key="app_handle"))["step"] == "a"
    assert "a: MLFLOW_TRACKING_PASSWORD=***" in result.output
    plan = result.xcom("plan")
    assert "TORCHX_TRACKER_AIRFLOW_STORES_CONFIG" in plan["roles"][0]["env_names"]
    assert plan["trackers"] == ["lin_s3", "lin_ml"]
    stored = result.stored_text()
    # the stores' config holds the S3 secret base64-encoded: the whole value is a secret too
    encoded = re.compile(r"base64:[A-Za-z0-9_\-=]{16,}")
    assert "TORCHX_TRACKER_AIRFLOW_STORES_CONFIG" in result.output  # the dry run shows the variable...
    assert not encoded.search(result.output) and not encoded.search(stored)  # ...never its value
    for secret in (S3_SECRET, MLFLOW_PASSWORD):
        assert secret not in result.output
        assert secret not in stored
        assert secret not in json.dumps(plan)
    logs = Path(os.environ["AIRFLOW_HOME"]) / "logs"
    for path in logs.rglob("*") if logs.exists() else []:
        if path.is_file():
            text = path.read_text(errors="replace")
            assert S3_SECRET not in text and MLFLOW_PASSWORD not in text, path
