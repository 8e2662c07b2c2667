"""A worker going away is not a user's kill: on the stack of `make up EXECUTOR=celery` (two Celery
workers, one task slot each), the signals deployments deliver reach a task that waits for a Slurm
job, and the job is never cancelled: the retry reattaches to it and the task succeeds.

- SIGTERM to the task's supervisor process (the KubernetesExecutor's pod termination: Airflow
  forwards it to the task, which runs ``on_kill``);
- SIGTERM to the process group of one Celery worker (``systemctl stop``, a container stop with an
  init), while the task waits in the worker, and while a deferred task resumes on that worker.

Each test counts the stack's jobs in ``sacct`` (by work dir: this stack's home): exactly one for the
task, COMPLETED, none CANCELLED.
"""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from tests.e2e.test_celery_rest import (
    WORKERS,
    _handle,
    _job_id,
    celery_airflow,
)
from tests.faults import CommandFaults
from tests.polling import wait_until
from tests.slurm.accounting import job_state, jobs_from
from tests.slurm.conftest import slurm_cluster  # noqa: F401 - every app runs on Slurm here
from tests.stack import AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]  # a whole stack, then Slurm jobs


@pytest.fixture(scope="module")
def faults(tmp_path_factory) -> CommandFaults:
    return CommandFaults(tmp_path_factory.mktemp("kill-faults"))


@pytest.fixture(scope="module")
def stack(slurm_cluster, faults, tmp_path_factory):  # noqa: F811
    with celery_airflow(tmp_path_factory, PATH=faults.path(os.environ["PATH"])) as stack:
        yield stack


@pytest.fixture(autouse=True)
def _disarm(faults):
    faults.clear()
    yield
    faults.clear()


def _tries(stack: AirflowStack, dag_id: str, run: str) -> list[dict]:
    path = f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run)}/taskInstances/train/tries"
    return stack.api("GET", path)["task_instances"]


def _task_process(ti_id: str) -> int:
    """The pid of the task process (``airflow worker -- <ti id>``) of a task instance."""
    out = subprocess.run(
        ["pgrep", "-f", f"^airflow worker -- {ti_id}"], capture_output=True, text=True
    ).stdout
    pids = [int(pid) for pid in out.split()]
    assert len(pids) == 1, f"task processes of {ti_id}: {pids}"
    return pids[0]


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _running_train(stack: AirflowStack, dag_id: str, run: str) -> tuple[dict, str]:
    """``train``'s task instance once its Slurm job runs, and its app handle."""
    ti = stack.wait_ti(dag_id, run, "train", ("running",), timeout=300)
    handle = wait_until(lambda: _handle(stack, dag_id, run, "train"), "train's app_handle", 120)
    wait_until(lambda: job_state(handle).startswith("RUNNING"), f"{handle} RUNNING", 120)
    return ti, handle


def _assert_one_completed_job_and_a_reattaching_retry(
    stack: AirflowStack, dag_id: str, run: str, handle: str, before: set[str]
) -> list[dict]:
    assert stack.wait_run(dag_id, run, timeout=300) == "success"
    tries = _tries(stack, dag_id, run)
    assert [t["try_number"] for t in tries] == [1, 2] and tries[-1]["state"] == "success", tries
    prepare = _handle(stack, dag_id, run, "prepare")
    jobs = {job: s for job, s in jobs_from(stack.home).items() if job not in before}
    assert sorted(jobs) == sorted([_job_id(prepare), _job_id(handle)]), jobs  # train's job: exactly one
    assert jobs[_job_id(handle)] == "COMPLETED", jobs  # never CANCELLED
    first = stack.log(dag_id, run, "train", 1)
    assert f"not cancelling TorchX app {handle}: the task instance is still 'running'" in first
    assert "left running for the next try to reattach" in first
    retry = stack.log(dag_id, run, "train", 2)
    assert "Submitted TorchX app" not in retry
    assert stack.xcom(dag_id, run, "train", "return_value")["app_handle"] == handle
    return tries


def _assert_retry_took_over(retry: str, handle: str) -> None:
    """The retry reattached to the job, or (when the 30 s job ended before the retry started: the
    stopped worker's shutdown and the requeue take their time) took its result without submitting."""
    reattached = f"Reattached to TorchX app {handle} from an earlier try" in retry
    took_result = "skipping resubmission" in retry and f"TorchX app {handle} is SUCCEEDED" in retry
    assert reattached or took_result, retry[-3000:]


def test_sigterm_to_the_task_supervisor_leaves_the_job_for_the_retry(stack):
    dag_id = "celery_reattach"
    before = set(jobs_from(stack.home))
    run = stack.trigger(dag_id, {"seconds": 30})
    ti, handle = _running_train(stack, dag_id, run)
    supervisor = _parent(_task_process(ti["id"]))
    os.kill(supervisor, signal.SIGTERM)  # what the kubelet sends a pod's process

    _assert_one_completed_job_and_a_reattaching_retry(stack, dag_id, run, handle, before)
    _assert_retry_took_over(stack.log(dag_id, run, "train", 2), handle)


def test_stopping_a_workers_process_group_leaves_the_job_and_the_other_worker_reattaches(stack):
    dag_id = "celery_reattach"
    before = set(jobs_from(stack.home))
    run = stack.trigger(dag_id, {"seconds": 30})
    ti, handle = _running_train(stack, dag_id, run)
    stopped = ti["hostname"]
    (other,) = set(WORKERS) - {stopped}
    stack.script("stop", WORKERS[stopped])  # SIGTERM to the worker's process group, as systemd does
    try:
        tries = _assert_one_completed_job_and_a_reattaching_retry(stack, dag_id, run, handle, before)
    finally:
        stack.script("start", WORKERS[stopped])
    assert [t["hostname"] for t in tries] == [stopped, other]
    _assert_retry_took_over(stack.log(dag_id, run, "train", 2), handle)


def test_stopping_the_worker_a_deferred_task_resumes_on_leaves_the_job_for_the_retry(stack, faults):
    dag_id = "celery_reattach_deferred"
    before = set(jobs_from(stack.home))
    run = stack.trigger(dag_id, {"seconds": 12})
    stack.wait_ti(dag_id, run, "train", ("deferred",), timeout=300)
    handle = wait_until(lambda: _handle(stack, dag_id, run, "train"), "train's app_handle", 120)
    faults.hold_tasks(120)  # the resume's first query of Slurm waits: the task is caught resuming
    wait_until(lambda: any(c.startswith("held") for c in faults.calls()), "the resume querying Slurm", 180)
    ti = stack.ti(dag_id, run, "train")
    assert ti["state"] == "running" and ti["hostname"] in WORKERS, ti
    stopped = ti["hostname"]
    (other,) = set(WORKERS) - {stopped}
    stack.script("stop", WORKERS[stopped])
    faults.clear()
    try:
        tries = _assert_one_completed_job_and_a_reattaching_retry(stack, dag_id, run, handle, before)
    finally:
        stack.script("start", WORKERS[stopped])
    assert [t["hostname"] for t in tries][-1] == other
