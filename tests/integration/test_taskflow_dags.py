"""``@task.torchx`` through real DAG runs (``airflow dags test``) of real local_cwd jobs: mapped decorated
tasks next to classic ``TorchXOperator`` tasks, lineage between them in a real fsspec store, the XCom
result, a failing app, and a function that returns something that is not an app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def _sources(store: FsspecStore, run_id: str) -> list[str]:
    return sorted(s.source_run_id for s in store.sources(run_id))


@pytest.fixture(scope="module")
def taskflow_run(run_dag, tmp_path_factory):
    """One run of tf_local tracking to a local fsspec store."""
    root = tmp_path_factory.mktemp("taskflow-store")
    out = tmp_path_factory.mktemp("taskflow-out")
    env = {
        "AIRFLOW_CONN_TORCHX_DEFAULT": json.dumps(
            {"conn_type": "torchx", "extra": {"scheduler": "local_cwd", "trackers": ["tf_fs"]}}
        ),
        "AIRFLOW_CONN_TF_FS": json.dumps({"conn_type": "torchx_fsspec", "extra": {"root": str(root)}}),
    }
    result = run_dag("tf_local", conf={"out": str(out), "who": "Grace"}, env=env)
    assert result.returncode == 0, result.output[-6000:]
    return result, FsspecStore(str(root)), out


def test_decorated_tasks_run_their_apps_and_return_the_operators_result(taskflow_run):
    result, _, out = taskflow_run
    assert result.states == {
        "prepare": "success",
        "train[0]": "success",
        "train[1]": "success",
        "summary": "success",
        "join": "success",
    }
    for i, lr in enumerate([0.1, 0.4]):
        value = result.xcom("train", map_index=i)
        handle = result.xcom("train", key="app_handle", map_index=i)
        assert handle.startswith("local_cwd://torchx/train-")  # named after the task, as the operator does
        assert value["app_handle"] == handle and value["state"] == "SUCCEEDED"
        assert value["roles"] == {"python": ["SUCCEEDED"]}
        # what the job recorded with AppRun comes back, as for TorchXOperator
        assert value["metadata"]["lr"] == lr
        assert value["artifacts"]["model"]["path"] == str(out / f"model-{lr}.txt")
        assert Path(value["artifacts"]["model"]["path"]).read_text() == "weights"
        assert result.xcom("train", key="torchx_run_id", map_index=i) == handle
    # the AppDef's args were templated from the conf; the app is named after its task
    assert "[summary/0] hello, Grace!" in result.output
    assert result.xcom("summary", key="app_handle").startswith("local_cwd://torchx/summary-")


def test_lineage_between_decorated_and_classic_tasks(taskflow_run):
    result, store, _ = taskflow_run
    prepare = result.xcom("prepare", key="app_handle")
    train = sorted(result.xcom("train", key="app_handle", map_index=i) for i in (0, 1))
    summary = result.xcom("summary", key="app_handle")
    join = result.xcom("join", key="app_handle")
    for handle in [*train, summary]:
        assert _sources(store, handle) == [prepare]  # decorated <- classic
    assert _sources(store, join) == sorted([*train, summary])  # classic <- every decorated map index
    assert result.xcom("join")["sources"] == sorted([*train, summary])
    for i in (0, 1):
        md = store.metadata(result.xcom("train", key="app_handle", map_index=i))
        assert (md["airflow_task_id"], md["airflow_map_index"]) == ("train", i)
        assert md["airflow_upstream_task_ids"] == ["prepare"]


def test_rendered_fields_show_the_app_the_function_returned(taskflow_run):
    result, _, _ = taskflow_run
    stored = result.stored_text()
    assert "model-0.1.txt" in stored and "model-0.4.txt" in stored  # train's component_args
    assert "DYNAMIC (set during execution)" not in stored


def test_a_failing_app_fails_the_decorated_task(run_dag):
    result = run_dag("tf_fail")
    assert result.states == {"failing": "failed"}
    assert "failing on request after 1 steps" in result.output
    assert "TorchXAppFailedError" in result.output and "FAILED" in result.output
    assert result.xcom("failing", key="app_handle").startswith("local_cwd://torchx/failing-")


def test_a_bad_return_value_fails_before_anything_is_submitted(run_dag):
    result = run_dag("tf_bad_return")
    assert result.states == {"bad": "failed"}
    assert "The @task.torchx function of task 'bad' returned {'script': " in result.output
    assert "Return a torchx.specs.AppDef, or a (component, args) pair" in result.output
    assert "Submitted TorchX app" not in result.output
    assert result.xcom("bad", key="app_handle") is None


def test_the_example_taskflow_dag(run_dag, tmp_path):
    env = {
        "AIRFLOW_CONN_TORCHX_DEFAULT": json.dumps(
            {"conn_type": "torchx", "extra": {"scheduler": "local_cwd", "trackers": ["tf_fs"]}}
        ),
        "AIRFLOW_CONN_TF_FS": json.dumps({"conn_type": "torchx_fsspec", "extra": {"root": str(tmp_path)}}),
    }
    result = run_dag(
        "torchx_taskflow", conf={"names": ["Ada", "Alan", "Grace"]}, env=env, dags_folder=REPO / "dags"
    )
    assert result.returncode == 0, result.output[-6000:]
    assert result.states["report"] == "success"
    for name in ("Ada", "Alan", "Grace"):
        assert f"[python/0] hello, {name}!" in result.output
    assert "[report/0] hello, 3 greeted apps!" in result.output
    greeted = sorted(result.xcom("greet", key="app_handle", map_index=i) for i in range(3))
    assert all(h.startswith("local_cwd://torchx/greet-") for h in greeted)
    assert _sources(FsspecStore(str(tmp_path)), result.xcom("report", key="app_handle")) == greeted
