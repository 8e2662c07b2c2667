"""torchx_pipeline triggered through the REST API of a running Airflow, on Slurm, with a conf that
changes the params: the jobs get the new values, lineage and tracker data land in the fsspec store
and the MLflow server, and the deferrable tasks wait in the triggerer."""

from __future__ import annotations

import json

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.mlflow_store import MlflowStore

from tests.e2e.conftest import MLFLOW_PASSWORD
from tests.services import cmdline, process_group

# Starting the stack and training two DDP apps on Slurm fits the default 300 s only on an idle machine.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
LRS = [0.15, 0.45]


@pytest.fixture(scope="module")
def pipeline_run(pipeline_stack, tmp_path_factory):
    out = tmp_path_factory.mktemp("e2e-out")
    conf = {"learning_rates": LRS, "epochs": 9, "rows": 30, "scheduler": "slurm", "output_dir": str(out)}
    run = pipeline_stack.trigger("torchx_pipeline", conf)
    state = pipeline_stack.wait_run("torchx_pipeline", run, timeout=420)
    return pipeline_stack, run, state


def _handle(stack, run, task, map_index=None):
    task_path = task if map_index is None else f"{task}/{map_index}"
    ti = stack.api("GET", f"/dags/torchx_pipeline/dagRuns/{run}/taskInstances/{task_path}")
    assert ti["state"] == "success", ti
    return stack.xcom(
        "torchx_pipeline", run, task, "app_handle", map_index=-1 if map_index is None else map_index
    )


def test_pipeline_succeeds_and_jobs_got_the_triggered_params(pipeline_run):
    stack, run, state = pipeline_run
    assert state == "success"
    handles = [_handle(stack, run, "train", i) for i in range(len(LRS))]
    assert all(h.startswith("slurm://torchx/") for h in handles)
    store = FsspecStore(str(stack.home / "tracker"))
    assert [store.metadata(h)["lr"] for h in handles] == LRS
    assert {store.metadata(h)["epochs"] for h in handles} == {9}
    assert store.metadata(_handle(stack, run, "prepare"))["rows"] == 30


def test_ddp_training_on_slurm_logs_the_loss_per_epoch_to_mlflow(pipeline_run):
    from mlflow import MlflowClient

    stack, run, _ = pipeline_run
    mlflow_uri = f"http://127.0.0.1:{stack.env_extra['MLFLOW_PORT']}"
    store = MlflowStore(mlflow_uri, "torchx")
    for i in range(len(LRS)):
        handle = _handle(stack, run, "train", i)
        md = store.metadata(handle)
        # two ranks under torchrun in one Slurm job, each recording its half of the 30 rows
        assert (md["world_size"], md["backend"]) == (2, "gloo")
        assert (md["rank0_samples"], md["rank1_samples"]) == (15, 15)
        history = MlflowClient(mlflow_uri).get_metric_history(store.mlflow_run_id(handle), "train_loss")
        assert sorted(m.step for m in history) == list(range(1, 10))


def test_lineage_and_tracker_data_in_both_backends(pipeline_run):
    stack, run, _ = pipeline_run
    prepare = _handle(stack, run, "prepare")
    train = sorted(_handle(stack, run, "train", i) for i in range(len(LRS)))
    evaluate = _handle(stack, run, "evaluate")
    mlflow_uri = f"http://127.0.0.1:{stack.env_extra['MLFLOW_PORT']}"
    stores = {"fsspec": FsspecStore(str(stack.home / "tracker")), "mlflow": MlflowStore(mlflow_uri, "torchx")}
    for name, store in stores.items():
        assert sorted(s.source_run_id for s in store.sources(evaluate)) == train, name
        for handle in train:
            assert [s.source_run_id for s in store.sources(handle)] == [prepare], name
        assert store.metadata(evaluate)["airflow_run_id"] == run, name
        assert set(store.artifacts(evaluate)) == {"report", "best_model"}, name


def test_deferrable_tasks_waited_in_the_triggerer(pipeline_run):
    stack, run, _ = pipeline_run
    logs = stack.home / "logs" / "dag_id=torchx_pipeline" / f"run_id={run}"
    trigger_logs = {p.relative_to(logs).parts[0]: p for p in logs.rglob("*.log.trigger.*.log")}
    assert set(trigger_logs) == {"task_id=prepare", "task_id=train", "task_id=evaluate"}
    train_logs = list((logs / "task_id=train").rglob("*.log.trigger.*.log"))
    assert len(train_logs) == len(LRS)
    for path in trigger_logs.values():
        assert "Trigger fired event" in path.read_text()


def test_extra_links_of_a_torchx_task(pipeline_run):
    stack, run, _ = pipeline_run
    links = stack.api("GET", f"/dags/torchx_pipeline/dagRuns/{run}/taskInstances/evaluate/links")
    url = stack.xcom("torchx_pipeline", run, "evaluate", "tracker_url")
    assert links["extra_links"]["MLflow Run"] == url
    assert url.startswith(f"http://127.0.0.1:{stack.env_extra['MLFLOW_PORT']}/#/experiments/")
    result = stack.xcom("torchx_pipeline", run, "evaluate", "return_value")
    assert json.dumps(result).count("slurm://torchx/") >= len(LRS) + 1


def test_the_connection_password_is_in_no_task_log_file(pipeline_run):
    stack, run, _ = pipeline_run
    logs = [p for p in (stack.home / "logs").rglob("*") if p.is_file()]
    assert any("dag_id=torchx_pipeline" in str(p) for p in logs)
    for path in logs:
        assert MLFLOW_PASSWORD not in path.read_text(errors="replace"), path
    prepare = next(
        p
        for p in logs
        if f"run_id={run}" in str(p) and "task_id=prepare" in str(p) and "trigger" not in p.name
    )
    # the dry-run request the task logs has no password variable at all: on Slurm it leaves the
    # batch script and reaches the job through sbatch's environment
    text = prepare.read_text()
    assert "TorchX dry run of app prepare" in text and "MLFLOW_TRACKING_PASSWORD=" not in text


def test_the_stacks_mlflow_server_is_one_process_with_no_job_runner(pipeline_stack):
    """`make up`'s MLflow (scripts/airflow-stack.sh): uvicorn alone, in the service's own process group;
    no idle `mlflow server` parent (scripts/mlflow-server.py) and no job runner (huey consumers)."""
    pid = int((pipeline_stack.home / "stack" / "mlflow.pid").read_text())
    commands = [cmdline(p) for p in process_group(pid)]
    assert len(commands) == 1 and "uvicorn" in commands[0] and "mlflow.server" in commands[0], commands
