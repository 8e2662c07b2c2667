"""Waiting that survives production, on a real Slurm cluster (with accounting) and a real Airflow
(scheduler, triggerer, API server, DAG processor): deferred waits, a killed triggerer, a SIGKILLed
worker, tasks killed by the user, failures, timeouts and unknown handles."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.polling import wait_until
from tests.slurm.accounting import job_state, jobs_from, sacct
from torchx_airflow.schedulers.slurm import sacct_window

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent


def last_job_id() -> int:
    ids = [int(row[0]) for row in sacct(*sacct_window("now-2days"), "-o", "JobID") if row[0].isdigit()]
    return max(ids, default=0)


def jobs_after(job_id: int, workdir: Path) -> list[list[str]]:
    """Jobs submitted after ``job_id`` from ``workdir`` (the stack's home, where its workers run)."""
    return [[job, state] for job, state in jobs_from(workdir).items() if job.isdigit() and int(job) > job_id]


def wait_job_state(app_handle: str, prefix: str, timeout: float) -> float:
    """Seconds until the job's state starts with ``prefix``."""
    start = time.monotonic()
    wait_until(lambda: job_state(app_handle).startswith(prefix), f"{app_handle} {prefix}", timeout)
    return time.monotonic() - start


def wait_handle(stack, dag_id: str, run_id: str, timeout: float = 120) -> str:
    return wait_until(
        lambda: stack.xcom(dag_id, run_id, "run", "app_handle"), f"the app_handle of {run_id}", timeout
    )


def wait_trigger_running(stack, dag_id: str, run_id: str, timeout: float = 120) -> None:
    """Until the trigger runs in the triggerer: its first line of the job's output is in the task's
    log (a deferred task's worker shows none)."""
    wait_until(
        lambda: "[python/0] line 1/" in stack.log(dag_id, run_id, "run", 1),
        f"the trigger of {run_id} showing the job's first line",
        timeout,
        interval=1,
    )


def torchx_run(cwd: Path, *args: str) -> str:
    """``torchx run --scheduler slurm ...`` from ``cwd``; returns the handle it prints."""
    out = subprocess.run(
        [str(BIN / "torchx"), "run", "--scheduler", "slurm", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=True,
    ).stdout
    return next(line for line in out.splitlines() if line.startswith("slurm://"))


def test_torchx_cli_runs_on_the_cluster_and_status_works_from_another_process(slurm_cluster, tmp_path):
    handle = torchx_run(tmp_path, "utils.echo", "--msg", "hello-slurm")
    wait_job_state(handle, "COMPLETED", 60)
    other = tmp_path / "elsewhere"
    other.mkdir()
    status = subprocess.run(
        [str(BIN / "torchx"), "status", handle], capture_output=True, text=True, cwd=other, check=True
    )
    assert "State: SUCCEEDED" in status.stdout + status.stderr


def test_deferred_wait_completes_through_the_triggerer_and_prints_the_logs_once(slurm_stack):
    run = slurm_stack.trigger("slurm_deferred", {"seconds": 6})
    slurm_stack.wait_ti("slurm_deferred", run, "run", ("deferred",), timeout=120)
    assert slurm_stack.wait_run("slurm_deferred", run) == "success"
    handle = slurm_stack.xcom("slurm_deferred", run, "run", "app_handle")
    log = slurm_stack.log("slurm_deferred", run, "run", 1)
    assert f"Waiting for TorchX app {handle} in the triggerer" in log
    assert log.count("[python/0] line 6/6") == 1 and log.count("[python/0] line 1/6") == 1
    assert "[python/0] to stderr" in log
    assert job_state(handle) == "COMPLETED"
    result = slurm_stack.xcom("slurm_deferred", run, "run", "return_value")
    assert result["state"] == "SUCCEEDED" and result["app_handle"] == handle


def test_job_lines_show_in_the_task_log_while_the_task_is_deferred(slurm_stack):
    run = slurm_stack.trigger("slurm_deferred", {"seconds": 40})
    slurm_stack.wait_ti("slurm_deferred", run, "run", ("deferred",), timeout=120)
    wait_until(
        lambda: "[python/0] line 3/40" in slurm_stack.log("slurm_deferred", run, "run", 1),
        "line 3/40 in the task's log",
        90,
        interval=2,
    )
    assert slurm_stack.ti("slurm_deferred", run, "run")["state"] == "deferred"  # still waiting
    assert slurm_stack.wait_run("slurm_deferred", run, timeout=180) == "success"
    log = slurm_stack.log("slurm_deferred", run, "run", 1)
    for n in (1, 3, 40):  # shown live or on resume, each exactly once
        assert log.count(f"[python/0] line {n}/40") == 1, n
    assert log.count("[python/0] to stderr") == 1


def test_killed_triggerer_is_replaced_and_the_task_completes_with_one_event(slurm_stack):
    before = last_job_id()
    run = slurm_stack.trigger("slurm_deferred", {"seconds": 25})
    slurm_stack.wait_ti("slurm_deferred", run, "run", ("deferred",), timeout=120)
    handle = wait_handle(slurm_stack, "slurm_deferred", run)
    wait_trigger_running(slurm_stack, "slurm_deferred", run)
    slurm_stack.script("stop", "triggerer", "--kill")  # returns once the triggerer's process is gone
    # a dead triggerer cancels nothing: not now, and not later (the app ends SUCCEEDED, asserted below)
    assert not job_state(handle).startswith("CANCELLED")
    slurm_stack.script("start", "triggerer")
    assert slurm_stack.wait_run("slurm_deferred", run, timeout=240) == "success"
    ti = slurm_stack.ti("slurm_deferred", run, "run")
    assert ti["try_number"] == 1
    assert [row[0] for row in jobs_after(before, slurm_stack.home)] == [handle.rsplit("/", 1)[1]]
    log = slurm_stack.log("slurm_deferred", run, "run", 1)
    assert log.count(f"TorchX app {handle} is SUCCEEDED") == 1


def test_sigkilled_worker_is_retried_and_the_retry_reattaches(slurm_stack):
    before = last_job_id()
    run = slurm_stack.trigger("slurm_sync", {"seconds": 45})
    ti = slurm_stack.wait_ti("slurm_sync", run, "run", ("running",), timeout=120)
    handle = wait_handle(slurm_stack, "slurm_sync", run)
    wait_job_state(handle, "RUNNING", 60)
    pids = subprocess.run(
        ["pgrep", "-f", f"airflow worker -- .*{ti['id']}"], capture_output=True, text=True
    ).stdout
    assert pids.split(), "no worker process for the task"
    for pid in pids.split():
        os.kill(int(pid), signal.SIGKILL)
    assert slurm_stack.wait_run("slurm_sync", run, timeout=300) == "success"
    ti = slurm_stack.ti("slurm_sync", run, "run")
    assert ti["try_number"] == 2
    jobs = jobs_after(before, slurm_stack.home)
    assert [row[0] for row in jobs] == [handle.rsplit("/", 1)[1]], jobs  # exactly one job for the task
    log = slurm_stack.log("slurm_sync", run, "run", 2)
    assert f"Reattached to TorchX app {handle} from an earlier try" in log
    assert "Submitted TorchX app" not in log
    assert slurm_stack.xcom("slurm_sync", run, "run", "return_value")["app_handle"] == handle


@pytest.mark.parametrize("dag_id", ["slurm_sync", "slurm_deferred"])
def test_marking_the_task_failed_cancels_the_job_within_30_s(slurm_stack, dag_id):
    run = slurm_stack.trigger(dag_id, {"seconds": 300})
    waiting = "deferred" if dag_id == "slurm_deferred" else "running"
    slurm_stack.wait_ti(dag_id, run, "run", (waiting,), timeout=120)
    handle = wait_handle(slurm_stack, dag_id, run)
    wait_job_state(handle, "RUNNING", 60)
    if waiting == "deferred":
        wait_trigger_running(slurm_stack, dag_id, run)
    slurm_stack.set_ti_state(dag_id, run, "run", "failed")
    assert wait_job_state(handle, "CANCELLED", 30) <= 30


def test_failing_job_fails_the_task_with_slurms_state_and_message(slurm_stack):
    run = slurm_stack.trigger("slurm_sync_timeout", {"seconds": 1, "exit_code": 3})
    assert slurm_stack.wait_run("slurm_sync_timeout", run) == "failed"
    handle = slurm_stack.xcom("slurm_sync_timeout", run, "run", "app_handle")
    assert job_state(handle) == "FAILED"
    log = slurm_stack.log("slurm_sync_timeout", run, "run", 1)
    assert f"TorchX app {handle} finished in state FAILED" in log
    assert "FAILED" in log.split(f"TorchX app {handle} is ", 1)[1].splitlines()[0]  # Slurm's message


@pytest.mark.parametrize("dag_id", ["slurm_sync_timeout", "slurm_deferred_timeout"])
def test_execution_timeout_cancels_the_job(slurm_stack, dag_id):
    run = slurm_stack.trigger(dag_id, {"seconds": 300})
    handle = wait_handle(slurm_stack, dag_id, run)
    assert slurm_stack.wait_run(dag_id, run, timeout=180) == "failed"
    wait_job_state(handle, "CANCELLED", 30)


def test_sensor_on_a_handle_slurm_does_not_know_fails_clearly(slurm_stack):
    run = slurm_stack.trigger("slurm_sensor_unknown")
    assert slurm_stack.wait_run("slurm_sensor_unknown", run) == "failed"
    log = slurm_stack.log("slurm_sensor_unknown", run, "wait", 1)
    assert "slurm://torchx/987654321" in log and "unknown to its scheduler" in log


def test_deferred_sensor_waits_on_a_slurm_app_in_the_triggerer(slurm_stack, tmp_path):
    handle = torchx_run(tmp_path, "utils.sh", "sleep", "8")
    run = slurm_stack.trigger("slurm_sensor_deferred", {"app_handle": handle})
    slurm_stack.wait_ti("slurm_sensor_deferred", run, "wait", ("deferred",), timeout=120)
    assert slurm_stack.wait_run("slurm_sensor_deferred", run) == "success"
    assert slurm_stack.xcom("slurm_sensor_deferred", run, "wait", "return_value")["state"] == "SUCCEEDED"
