"""OpenLineage and asset events of TorchX tasks that wait in the triggerer on Slurm: a fan-in and a
failing app, on a real Airflow (scheduler, triggerer, API server) with the file transport."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from tests.openlineage_events import by_type, datasets, file_transport, read_events, run_dataset, task_events
from tests.services import free_port
from tests.slurm.conftest import REPO
from tests.stack import AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]  # two DAG runs on Slurm


@pytest.fixture(scope="module")
def ol_stack(slurm_cluster, tmp_path_factory):
    home = tmp_path_factory.mktemp("ol-slurm-airflow")
    stack = AirflowStack(
        home=home,
        dags_folder=REPO / "tests" / "dags",
        env_extra={
            "AIRFLOW__CORE__PARALLELISM": "4",
            # an MLflow server for mlflow_default: two DAG runs start at once, and tasks opening a
            # fresh SQLite tracking store at the same moment race to create its tables
            "MLFLOW_PORT": str(free_port()),
            **file_transport(home / "openlineage.jsonl"),
        },
    )
    with stack.running():
        yield stack


@pytest.fixture(scope="module")
def runs(ol_stack, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ol-slurm-out"))
    conf = {"scheduler": "slurm", "out": out}
    started = {dag_id: ol_stack.trigger(dag_id, conf) for dag_id in ("tx_openlineage", "tx_openlineage_fail")}
    states = {dag_id: ol_stack.wait_run(dag_id, run, timeout=900) for dag_id, run in started.items()}
    return ol_stack, started, states, read_events(ol_stack.home / "openlineage.jsonl")


def _handle(stack, dag_id, run, task_id):
    return stack.xcom(dag_id, run, task_id, "app_handle")


def _mine(events, dag_id, task_id, app_handle):
    """Every event of the task run whose TorchX handle is ``app_handle`` (by its run id)."""
    mine = task_events(events, dag_id, task_id)
    run_ids = {
        e["run"]["runId"]
        for e in mine
        if e["run"]["facets"].get("torchx_run", {}).get("appHandle") == app_handle
    }
    (run_id,) = run_ids
    return [e for e in mine if e["run"]["runId"] == run_id]


def test_deferred_slurm_tasks_report_complete_with_their_edges(runs):
    stack, started, states, events = runs
    run = started["tx_openlineage"]
    assert states["tx_openlineage"] == "success"
    handles = {t: _handle(stack, "tx_openlineage", run, t) for t in ("a", "b", "join")}
    assert all(h.startswith("slurm://torchx/") for h in handles.values())
    complete = {}
    for task_id, handle in handles.items():
        mine = _mine(events, "tx_openlineage", task_id, handle)
        # START when the task starts and again when it resumes from the triggerer; one COMPLETE
        assert {e["eventType"] for e in mine} == {"START", "COMPLETE"}, task_id
        (complete[task_id],) = by_type(mine, "COMPLETE")
        facet = complete[task_id]["run"]["facets"]["torchx_run"]
        assert facet["state"] == "SUCCEEDED", task_id
        assert run_dataset(handle) in datasets(complete[task_id], "outputs")
    a_out = stack.xcom("tx_openlineage", run, "a", "return_value")["artifacts"]["out"]["path"]
    assert datasets(complete["join"], "inputs") == {
        run_dataset(handles["a"]),
        run_dataset(handles["b"]),
        ("file", a_out),
    }


def test_a_failing_slurm_app_reports_fail_with_its_state(runs):
    stack, started, states, events = runs
    run = started["tx_openlineage_fail"]
    assert states["tx_openlineage_fail"] == "failed"
    ok = _handle(stack, "tx_openlineage_fail", run, "ok")
    broken = _handle(stack, "tx_openlineage_fail", run, "broken")
    mine = _mine(events, "tx_openlineage_fail", "broken", broken)
    (fail,) = by_type(mine, "FAIL")
    assert not by_type(mine, "COMPLETE")
    facet = fail["run"]["facets"]["torchx_run"]
    assert facet["state"] == "FAILED" and facet["sources"] == [ok]
    assert datasets(fail, "inputs") == {run_dataset(ok)}


def test_the_slurm_job_nests_under_its_task_run(runs):
    stack, started, _, events = runs
    run = started["tx_openlineage"]
    (start, *_) = by_type(task_events(events, "tx_openlineage", "a"), "START")
    logs = stack.home / "logs" / "dag_id=tx_openlineage" / f"run_id={run}" / "task_id=a"
    text = "\n".join(p.read_text(errors="replace") for p in logs.rglob("*.log"))
    assert f"a: OPENLINEAGE_PARENT_ID=torchx-tests/tx_openlineage.a/{start['run']['runId']}" in text


def test_asset_events_only_for_the_succeeded_slurm_apps(runs):
    stack, started, _, _ = runs
    found = {}
    for dag_id, run in started.items():
        query = urllib.parse.urlencode({"source_dag_id": dag_id, "source_run_id": run})
        found[dag_id] = stack.api("GET", f"/assets/events?{query}")["asset_events"]
    assert found["tx_openlineage_fail"] == []
    by_task = {e["source_task_id"]: e for e in found["tx_openlineage"]}
    assert set(by_task) == {"a", "b"}
    run = started["tx_openlineage"]
    extra = by_task["a"]["extra"]
    assert extra["app_handle"] == _handle(stack, "tx_openlineage", run, "a") and extra["try_number"] == 1
    assert json.dumps(extra["metadata"]) == json.dumps({"step": "a"})
