"""OpenLineage events and asset events of real DAG runs (``airflow dags test``, local_cwd jobs), with
the OpenLineage provider's file transport, an fsspec tracker and a real MLflow server whose
connection has a password."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.conftest import REPO
from tests.openlineage_events import (
    by_type,
    datasets,
    file_transport,
    read_events,
    run_dataset,
    task_events,
    validate,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]  # real DAG runs on a shared machine

MLFLOW_PASSWORD = "mlflow-Pa55word-OpenLineage-77"
LRS = [0.1, 0.3]


def _conn(conn_type: str, **fields) -> str:
    return json.dumps({"conn_type": conn_type, **fields})


@pytest.fixture(scope="module")
def tracked_env(tmp_path_factory, mlflow_uri):
    root = tmp_path_factory.mktemp("ol-store")
    return {
        "AIRFLOW_CONN_TORCHX_DEFAULT": _conn(
            "torchx", extra={"scheduler": "local_cwd", "trackers": ["ol_fs", "ol_ml"]}
        ),
        "AIRFLOW_CONN_OL_FS": _conn("torchx_fsspec", extra={"root": str(root)}),
        "AIRFLOW_CONN_OL_ML": _conn(
            "mlflow", host=mlflow_uri, login="airflow", password=MLFLOW_PASSWORD, extra={"experiment": "ol"}
        ),
    }


def _run(run_dag, tmp_path_factory, tracked_env, dag_id, conf, **kwargs):
    events_file = tmp_path_factory.mktemp(dag_id) / "events.jsonl"
    env = {**tracked_env, **file_transport(events_file)}
    result = run_dag(dag_id, conf=conf, env=env, timeout=500, **kwargs)
    return result, read_events(events_file), events_file


@pytest.fixture(scope="module")
def pipeline(run_dag, tmp_path_factory, tracked_env):
    out = tmp_path_factory.mktemp("ol-pipeline-out")
    conf = {"learning_rates": LRS, "epochs": 5, "rows": 40, "output_dir": str(out)}
    result, events, path = _run(
        run_dag, tmp_path_factory, tracked_env, "torchx_pipeline", conf, dags_folder=REPO / "dags"
    )
    assert result.returncode == 0, result.output[-6000:]
    return result, events, path


@pytest.fixture(scope="module")
def fan_in(run_dag, tmp_path_factory, tracked_env):
    conf = {"out": str(tmp_path_factory.mktemp("ol-fan-in-out"))}
    result, events, path = _run(run_dag, tmp_path_factory, tracked_env, "tx_openlineage", conf)
    assert result.returncode == 0, result.output[-6000:]
    return result, events, path


@pytest.fixture(scope="module")
def failing(run_dag, tmp_path_factory, tracked_env):
    conf = {"out": str(tmp_path_factory.mktemp("ol-fail-out"))}
    result, events, path = _run(run_dag, tmp_path_factory, tracked_env, "tx_openlineage_fail", conf)
    assert result.returncode != 0 and result.states["broken"] == "failed", result.output[-6000:]
    return result, events, path


def _complete(events, dag_id, task_id, app_handle):
    """The COMPLETE event of the task run whose TorchX handle is ``app_handle``."""
    (event,) = [
        e
        for e in by_type(task_events(events, dag_id, task_id), "COMPLETE")
        if e["run"]["facets"]["torchx_run"]["appHandle"] == app_handle
    ]
    return event


def test_every_torchx_task_emits_start_and_complete(pipeline):
    result, events, _ = pipeline
    # prepare and evaluate run utils.python; train runs dist.ddp, whose entrypoint is bash (torchrun)
    entrypoints = {"prepare": "python", "train": "bash", "evaluate": "python"}
    for task_id, runs in (("prepare", 1), ("train", len(LRS)), ("evaluate", 1)):
        mine = task_events(events, "torchx_pipeline", task_id)
        starts, completes = by_type(mine, "START"), by_type(mine, "COMPLETE")
        assert len(starts) == len(completes) == runs, task_id
        assert {e["run"]["runId"] for e in starts} == {e["run"]["runId"] for e in completes}, task_id
        assert not by_type(mine, "FAIL"), task_id
        for event in starts:
            assert event["job"]["facets"]["torchx_app"]["roles"][0]["entrypoint"] == entrypoints[task_id]


def test_pipeline_edges_are_datasets_from_parent_to_child(pipeline):
    result, events, _ = pipeline
    prepare = result.xcom("prepare", key="app_handle")
    trains = [result.xcom("train", key="app_handle", map_index=i) for i in range(len(LRS))]
    evaluate = result.xcom("evaluate", key="app_handle")
    prepared = _complete(events, "torchx_pipeline", "prepare", prepare)
    evaluated = _complete(events, "torchx_pipeline", "evaluate", evaluate)
    data = result.xcom("prepare")["artifacts"]["data"]["path"]
    assert run_dataset(prepare) in datasets(prepared, "outputs")
    assert ("file", data) in datasets(prepared, "outputs")
    for i, handle in enumerate(trains):
        trained = _complete(events, "torchx_pipeline", "train", handle)
        # prepare -> train through the untracked train_args task: the run and the data file it read
        assert datasets(trained, "inputs") == {run_dataset(prepare), ("file", data)}
        artifacts = result.xcom("train", map_index=i)["artifacts"]
        model, checkpoint = artifacts["model"]["path"], artifacts["checkpoint"]["path"]
        # the model, and the checkpoint of the last epoch (what a resubmitted job resumes from)
        assert datasets(trained, "outputs") == {run_dataset(handle), ("file", model), ("file", checkpoint)}
        assert {run_dataset(handle), ("file", model)} <= datasets(evaluated, "inputs")
    report = result.xcom("evaluate")["artifacts"]["report"]["path"]
    # evaluate records the best model (a train output it read) as an artifact: an input, not an output
    assert datasets(evaluated, "outputs") == {run_dataset(evaluate), ("file", report)}


def test_facets_describe_the_app_and_its_run(pipeline):
    result, events, _ = pipeline
    evaluate = result.xcom("evaluate")
    event = _complete(events, "torchx_pipeline", "evaluate", evaluate["app_handle"])
    run = event["run"]["facets"]["torchx_run"]
    assert run["state"] == "SUCCEEDED" and run["sources"] == evaluate["sources"]
    assert len(run["sources"]) == len(LRS)
    assert event["run"]["facets"]["externalQuery"]["externalQueryId"] == evaluate["app_handle"]
    assert event["run"]["facets"]["externalQuery"]["source"] == "torchx://local_cwd"
    app = event["job"]["facets"]["torchx_app"]
    assert app["scheduler"] == "local_cwd" and app["appName"] == "evaluate"
    (role,) = app["roles"]
    assert role["num_replicas"] == 1 and role["resource"]["cpu"] >= 1 and "args" not in role
    # env names, never values: the tracker config, the MLflow password and the OpenLineage parent
    assert {"TORCHX_TRACKERS", "MLFLOW_TRACKING_PASSWORD", "OPENLINEAGE_PARENT_ID"} <= set(role["env_names"])


def test_events_validate_and_carry_no_secret(pipeline, fan_in, failing):
    for _, events, path in (pipeline, fan_in, failing):
        assert events
        for event in events:
            validate(event)
        assert MLFLOW_PASSWORD not in path.read_text()


def test_fan_in_parents_joined_with_and_without_a_shared_artifact(fan_in):
    result, events, _ = fan_in
    a, b, join = (result.xcom(t, key="app_handle") for t in ("a", "b", "join"))
    a_out = result.xcom("a")["artifacts"]["out"]["path"]
    b_out = result.xcom("b")["artifacts"]["out"]["path"]
    joined = _complete(events, "tx_openlineage", "join", join)
    # b shares no file with join: its run dataset alone joins them
    assert datasets(joined, "inputs") == {run_dataset(a), run_dataset(b), ("file", a_out)}
    assert ("file", b_out) not in datasets(joined, "inputs")
    for task_id, handle in (("a", a), ("b", b)):
        assert run_dataset(handle) in datasets(
            _complete(events, "tx_openlineage", task_id, handle), "outputs"
        )


def test_the_job_gets_the_task_run_as_its_openlineage_parent(fan_in):
    result, events, _ = fan_in
    # `airflow dags test` reports the DAG run when it ends: its COMPLETE has the DAG run's id
    (dag_run,) = by_type([e for e in events if e["job"]["name"] == "tx_openlineage"], "COMPLETE")
    for task_id in ("a", "b", "join"):
        (start,) = by_type(task_events(events, "tx_openlineage", task_id), "START")
        parent = f"torchx-tests/tx_openlineage.{task_id}/{start['run']['runId']}"
        assert f"{task_id}: OPENLINEAGE_PARENT_ID={parent}" in result.output
        root = f"torchx-tests/tx_openlineage/{dag_run['run']['runId']}"
        assert f"{task_id}: OPENLINEAGE_ROOT_PARENT_ID={root}" in result.output


def test_a_failing_app_emits_fail_with_its_state_and_parents(failing):
    result, events, _ = failing
    ok = result.xcom("ok", key="app_handle")
    broken = result.xcom("broken", key="app_handle")
    mine = task_events(events, "tx_openlineage_fail", "broken")
    assert [e["eventType"] for e in mine] == ["START", "FAIL"]
    fail = mine[1]
    run = fail["run"]["facets"]["torchx_run"]
    assert run["appHandle"] == broken and run["state"] == "FAILED" and run["sources"] == [ok]
    assert datasets(fail, "inputs") == {run_dataset(ok)}
    assert datasets(fail, "outputs") == {run_dataset(broken)}  # no artifact: it recorded none


def _asset_events(result) -> list[tuple[str, dict, str]]:
    with sqlite3.connect(result.db) as conn:
        rows = conn.execute(
            "SELECT a.uri, e.extra, e.source_task_id FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE e.source_dag_id = ? AND e.source_run_id = ?",
            (result.dag_id, result.run_id),
        ).fetchall()
    return [(uri, json.loads(extra), task_id) for uri, extra, task_id in rows]


def test_asset_events_carry_the_run_that_wrote_the_artifact(fan_in):
    result, _, _ = fan_in
    events = {task_id: (uri, extra) for uri, extra, task_id in _asset_events(result)}
    assert set(events) == {"a", "b"}
    a_out = result.xcom("a")["artifacts"]["out"]
    assert events["a"] == (
        "torchx-test://tx_openlineage/a-out",
        {
            "app_handle": result.xcom("a", key="app_handle"),
            "artifact": "out",
            "path": a_out["path"],
            "metadata": {"step": "a"},
            "try_number": 1,
        },
    )
    # through the AssetAlias: an asset named by the artifact's own path
    b_path = result.xcom("b")["artifacts"]["out"]["path"]
    assert events["b"][0] == f"file://{b_path}" and events["b"][1]["path"] == b_path


def test_a_failed_app_emits_no_asset_event(failing):
    result, _, _ = failing
    assert _asset_events(result) == []


def test_pipeline_publishes_every_model_and_the_best_one(pipeline):
    result, _, _ = pipeline
    events = _asset_events(result)
    evaluate = result.xcom("evaluate")
    best = [extra for uri, extra, task in events if uri == "model://torchx_pipeline/best"]
    assert best == [
        {
            "app_handle": evaluate["app_handle"],
            "artifact": "best_model",
            "path": evaluate["artifacts"]["best_model"]["path"],
            "metadata": evaluate["artifacts"]["best_model"]["metadata"],
            "try_number": 1,
        }
    ]
    models = sorted(extra["path"] for uri, extra, task in events if task == "train")
    assert models == sorted(result.xcom("train", map_index=i)["artifacts"]["model"]["path"] for i in range(2))
