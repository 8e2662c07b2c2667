"""``@task.torchx`` on a real Slurm cluster through a real Airflow (scheduler, triggerer, API server):
mapped decorated tasks and an ``AppDef`` task deferring to the triggerer, next to classic tasks, with
lineage in a real fsspec store. (The example pipeline's DDP training on Slurm is tested in
tests/e2e/pipeline/test_pipeline_rest.py.)"""

from __future__ import annotations

import json
import subprocess

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore

from tests.slurm.conftest import REPO
from tests.stack import AirflowStack

pytestmark = pytest.mark.integration
LRS = [0.1, 0.4]


def slurm_state(app_handle: str) -> str:
    """Slurm's accounting state of the job behind one handle (only the jobs this test created)."""
    job_id = app_handle.rsplit("/", 1)[1]
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State"], capture_output=True, text=True, check=True
    ).stdout
    return out.strip().splitlines()[0] if out.strip() else ""


@pytest.fixture(scope="module")
def taskflow_stack(slurm_cluster, tmp_path_factory):
    """Airflow with the test DAGs; ``torchx_slurm`` tracks to a local fsspec store."""
    home = tmp_path_factory.mktemp("taskflow-airflow")
    conn = {"conn_type": "torchx", "extra": {"scheduler": "slurm", "trackers": ["tf_fs"]}}
    stack = AirflowStack(
        home=home,
        dags_folder=REPO / "tests" / "dags",
        env_extra={
            "AIRFLOW_CONN_TORCHX_SLURM": json.dumps(conn),
            "AIRFLOW_CONN_TF_FS": json.dumps(
                {"conn_type": "torchx_fsspec", "extra": {"root": str(home / "store")}}
            ),
            "AIRFLOW__CORE__PARALLELISM": "4",
        },
    )
    with stack.running():
        yield stack


@pytest.fixture(scope="module")
def taskflow_run(taskflow_stack, tmp_path_factory):
    out = tmp_path_factory.mktemp("taskflow-slurm-out")
    run = taskflow_stack.trigger("tf_slurm", {"out": str(out), "who": "Slurm"})
    state = taskflow_stack.wait_run("tf_slurm", run, timeout=420)
    return taskflow_stack, run, state, out


def test_decorated_tasks_run_on_slurm_and_wait_in_the_triggerer(taskflow_run):
    stack, run, state, out = taskflow_run
    assert state == "success"
    handles = [stack.xcom("tf_slurm", run, "train", "app_handle", map_index=i) for i in range(len(LRS))]
    for i, (lr, handle) in enumerate(zip(LRS, handles, strict=True)):
        assert handle.startswith("slurm://torchx/")
        assert slurm_state(handle) == "COMPLETED"
        result = stack.xcom("tf_slurm", run, "train", "return_value", map_index=i)
        assert result["state"] == "SUCCEEDED" and result["app_handle"] == handle
        assert result["metadata"]["lr"] == lr
        assert result["artifacts"]["model"]["path"] == str(out / f"model-{lr}.txt")
    summary = stack.xcom("tf_slurm", run, "summary", "app_handle")
    assert slurm_state(summary) == "COMPLETED"
    log = stack.log("tf_slurm", run, "summary", 1)
    assert f"Waiting for TorchX app {summary} in the triggerer" in log
    assert log.count("[summary/0] hello, Slurm!") == 1  # the AppDef's templated args; logs once
    logs = stack.home / "logs" / "dag_id=tf_slurm" / f"run_id={run}"
    tasks = sorted({p.relative_to(logs).parts[0] for p in logs.rglob("*.log.trigger.*.log")})
    assert tasks == ["task_id=join", "task_id=prepare", "task_id=summary", "task_id=train"]


def test_lineage_between_decorated_and_classic_tasks_on_slurm(taskflow_run):
    stack, run, _, _ = taskflow_run
    store = FsspecStore(str(stack.home / "store"))
    prepare = stack.xcom("tf_slurm", run, "prepare", "app_handle")
    decorated = [stack.xcom("tf_slurm", run, "train", "app_handle", map_index=i) for i in range(len(LRS))]
    decorated.append(stack.xcom("tf_slurm", run, "summary", "app_handle"))
    join = stack.xcom("tf_slurm", run, "join", "app_handle")
    for handle in decorated:
        assert [s.source_run_id for s in store.sources(handle)] == [prepare]
    assert sorted(s.source_run_id for s in store.sources(join)) == sorted(decorated)
    md = store.metadata(decorated[1])
    assert (md["airflow_task_id"], md["airflow_map_index"], md["airflow_run_id"]) == ("train", 1, run)
