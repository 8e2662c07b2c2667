"""Assets and OpenLineage on the running system (Airflow's services on free loopback ports, an MLflow
server, the Slurm cluster): a torchx_pipeline run on Slurm, triggered through the REST API, publishes
its models as asset events; the consumer DAG torchx_model_evaluation runs on that event, reads the
producing run from it and evaluates the model with a TorchX app on Slurm. Every TorchX task's
OpenLineage events go to the provider's file transport."""

from __future__ import annotations

import urllib.parse

import pytest

from tests.e2e.conftest import dags_stack
from tests.openlineage_events import by_type, datasets, file_transport, read_events, run_dataset, task_events
from tests.polling import wait_until
from tests.stack import AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]  # two DAG runs on Slurm
MLFLOW_PASSWORD = "e2e-Assets-Mlflow-Secret-31"
LRS = [0.2, 0.5]
CONSUMER = "torchx_model_evaluation"


@pytest.fixture(scope="module")
def assets_stack(slurm_cluster, tmp_path_factory):
    home = tmp_path_factory.mktemp("assets-airflow")
    with dags_stack(home, MLFLOW_PASSWORD, **file_transport(home / "openlineage.jsonl")).running() as stack:
        yield stack


def _consumer_run(stack: AirflowStack, timeout: float = 300) -> dict:
    """The consumer's first run, created by the scheduler for the asset event."""
    runs = wait_until(
        lambda: stack.api("GET", f"/dags/{CONSUMER}/dagRuns")["dag_runs"], f"a run of {CONSUMER}", timeout, 1
    )
    return runs[0]


@pytest.fixture(scope="module")
def runs(assets_stack, tmp_path_factory):
    stack = assets_stack
    stack.wait_for_dag(CONSUMER)  # parsed and unpaused before the pipeline publishes
    out = tmp_path_factory.mktemp("assets-out")
    conf = {"learning_rates": LRS, "epochs": 5, "rows": 30, "scheduler": "slurm", "output_dir": str(out)}
    run = stack.trigger("torchx_pipeline", conf)
    assert stack.wait_run("torchx_pipeline", run, timeout=600) == "success"
    consumer = _consumer_run(stack)
    state = stack.wait_run(CONSUMER, consumer["dag_run_id"], timeout=600)
    return stack, run, consumer, state


def _xcom(stack, dag_id, run_id, task_id, key="return_value", map_index=-1):
    return stack.xcom(dag_id, run_id, task_id, key, map_index=map_index)


def test_the_pipeline_run_triggers_the_consumer_which_evaluates_its_model(runs):
    stack, run, consumer, state = runs
    assert consumer["run_type"] == "asset_triggered"
    assert state == "success"
    evaluate = _xcom(stack, "torchx_pipeline", run, "evaluate")
    produced = _xcom(stack, CONSUMER, consumer["dag_run_id"], "produced_model")
    assert produced == {
        "app_handle": evaluate["app_handle"],
        "path": evaluate["artifacts"]["best_model"]["path"],
        "scheduler": "slurm",
    }
    scored = _xcom(stack, CONSUMER, consumer["dag_run_id"], "evaluate")
    assert scored["app_handle"].startswith("slurm://torchx/")  # evaluated on the scheduler that trained it
    assert scored["metadata"]["models"] == 1
    assert scored["artifacts"]["best_model"]["path"] == produced["path"]


def test_asset_events_carry_the_producing_runs(runs):
    stack, run, _, _ = runs
    query = urllib.parse.urlencode({"source_dag_id": "torchx_pipeline", "source_run_id": run, "limit": 50})
    events = stack.api("GET", f"/assets/events?{query}")["asset_events"]
    evaluate = _xcom(stack, "torchx_pipeline", run, "evaluate")
    best = [e for e in events if e["uri"] == "model://torchx_pipeline/best"]
    assert [e["extra"] for e in best] == [
        {
            "app_handle": evaluate["app_handle"],
            "artifact": "best_model",
            "path": evaluate["artifacts"]["best_model"]["path"],
            "metadata": evaluate["artifacts"]["best_model"]["metadata"],
            "try_number": 1,
        }
    ]
    trained = {e["extra"]["app_handle"]: e for e in events if e["source_task_id"] == "train"}
    for i in range(len(LRS)):
        handle = _xcom(stack, "torchx_pipeline", run, "train", "app_handle", map_index=i)
        model = _xcom(stack, "torchx_pipeline", run, "train", map_index=i)["artifacts"]["model"]["path"]
        assert trained[handle]["uri"] == f"file://{model}" and trained[handle]["extra"]["path"] == model


def test_openlineage_events_of_the_slurm_pipeline(runs):
    stack, run, _, _ = runs
    path = stack.home / "openlineage.jsonl"
    events = read_events(path)
    prepare = _xcom(stack, "torchx_pipeline", run, "prepare", "app_handle")
    evaluate = _xcom(stack, "torchx_pipeline", run, "evaluate", "app_handle")
    trains = [_xcom(stack, "torchx_pipeline", run, "train", "app_handle", map_index=i) for i in range(2)]
    complete = {}
    for task_id, count in (("prepare", 1), ("train", len(LRS)), ("evaluate", 1)):
        mine = task_events(events, "torchx_pipeline", task_id)
        # a deferred task reports START again when it resumes in a worker: same run id
        starts = {e["run"]["runId"] for e in by_type(mine, "START")}
        assert starts == {e["run"]["runId"] for e in by_type(mine, "COMPLETE")}, task_id
        assert len(by_type(mine, "COMPLETE")) == count and not by_type(mine, "FAIL"), task_id
        for event in by_type(mine, "COMPLETE"):
            facet = event["run"]["facets"]["torchx_run"]
            assert facet["state"] == "SUCCEEDED" and facet["appHandle"].startswith("slurm://")
            complete[facet["appHandle"]] = event
    assert run_dataset(prepare) in datasets(complete[prepare], "outputs")
    for handle in trains:
        assert run_dataset(prepare) in datasets(complete[handle], "inputs")
        assert run_dataset(handle) in datasets(complete[handle], "outputs")
        assert run_dataset(handle) in datasets(complete[evaluate], "inputs")
    assert MLFLOW_PASSWORD not in path.read_text()
