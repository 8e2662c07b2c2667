"""Faults injected for real while tasks wait on Slurm jobs, through a running Airflow: a tracker
server that hangs or dies right after submission, a status command that fails several times, a
worker SIGKILLed before its first poll, and sensors whose timeout passes. Each ends with exactly
one Slurm job per task, and no sensor ever cancels the app it watches.

Faults are armed through command shims first on the services' PATH (tests/faults.py); jobs are
counted in ``sacct`` by their own job name, so other jobs on the cluster never count.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults import STATUS_COMMANDS, CommandFaults
from tests.polling import wait_until
from tests.services import mlflow_server_process
from tests.slurm.accounting import job_state, jobs_named
from tests.slurm.conftest import REPO, SLURM_CONN
from tests.slurm.test_slurm_reliability import torchx_run  # apps launched outside Airflow
from tests.stack import AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
BIN = Path(sys.executable).parent


def _mlflow_conn(uri: str) -> str:
    return json.dumps({"conn_type": "mlflow", "host": uri, "extra": {"experiment": "faults"}})


@pytest.fixture(scope="module")
def faults(tmp_path_factory) -> CommandFaults:
    return CommandFaults(tmp_path_factory.mktemp("faults"))


@pytest.fixture(scope="module")
def tracker_servers(tmp_path_factory):
    """Two MLflow servers: one to hang (SIGSTOP) and one to kill right after a submission."""
    with (
        mlflow_server_process(tmp_path_factory.mktemp("ml-hung")) as hung,
        mlflow_server_process(tmp_path_factory.mktemp("ml-stopped")) as stopped,
    ):
        from torchx_airflow_tracker.mlflow_store import MlflowStore

        for uri, _ in (hung, stopped):
            # the experiment made before the tasks open it: a fresh server's first writes (its
            # database created, the experiment made) can take longer than the task's 8 s tracker
            # budget on a loaded host, and that budget is for the fault, not for the warm-up
            MlflowStore(uri, "faults").experiment_id  # noqa: B018
        try:
            yield {"hung": hung, "stopped": stopped}
        finally:
            for _, proc in (hung, stopped):  # a stopped group must run again to be stopped for good
                try:
                    os.killpg(proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass


@pytest.fixture(scope="module")
def stack(slurm_cluster, faults, tracker_servers, tmp_path_factory):
    stack = AirflowStack(
        home=tmp_path_factory.mktemp("faults-airflow"),
        dags_folder=REPO / "tests" / "dags",
        env_extra={
            "PATH": faults.path(os.environ["PATH"]),
            "AIRFLOW_CONN_TORCHX_SLURM": SLURM_CONN,
            "AIRFLOW_CONN_FAULT_ML_HUNG": _mlflow_conn(tracker_servers["hung"][0]),
            "AIRFLOW_CONN_FAULT_ML_STOPPED": _mlflow_conn(tracker_servers["stopped"][0]),
            "AIRFLOW__CORE__PARALLELISM": "8",
            # a SIGKILLed worker's task is noticed after 20 s instead of 5 min
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
        },
    )
    with stack.running():
        yield stack


@pytest.fixture(autouse=True)
def _disarm(faults):
    faults.clear()
    yield
    faults.clear()


def _since() -> str:
    return (datetime.datetime.now() - datetime.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S")


def wait_state(app_handle: str, prefixes: tuple[str, ...], timeout: float = 90) -> str:
    return wait_until(
        lambda: (state := job_state(app_handle)).startswith(prefixes) and state,
        f"{app_handle} in {prefixes}",
        timeout,
    )


@pytest.mark.parametrize("fault", ["hung", "stopped"])
def test_tracker_server_failing_right_after_submission_leaves_one_job_and_a_successful_task(
    stack, faults, tracker_servers, fault
):
    _, server = tracker_servers[fault]
    faults.after_sbatch(f"kill -{'STOP' if fault == 'hung' else 'KILL'} -- -{server.pid}")
    since = _since()
    run = stack.trigger("fault_tracker_sync", {"seconds": 3, "tracker": f"fault_ml_{fault}"})
    state = stack.wait_run("fault_tracker_sync", run, timeout=240)
    log = stack.log("fault_tracker_sync", run, "run", 1)
    assert state == "success", log[-3000:]
    assert stack.ti("fault_tracker_sync", run, "run")["try_number"] == 1
    handle = stack.xcom("fault_tracker_sync", run, "run", "app_handle")
    assert jobs_named("faulttrk-0", since) == [(handle.rsplit("/", 1)[1], "COMPLETED")]
    # the lineage write and the results read each gave up after tracker_timeout, with a warning
    assert f"Recording lineage of {handle}" in log
    assert f"Reading the results of {handle}" in log
    result = stack.xcom("fault_tracker_sync", run, "run", "return_value")
    assert result["state"] == "SUCCEEDED" and result["metadata"] == {}


def test_status_command_failing_three_times_in_a_row_is_retried_not_failed(stack, faults):
    faults.after_sbatch(f"echo 3 > {faults.root}/fail")
    since = _since()
    run = stack.trigger("fault_status_sync", {"seconds": 3})
    state = stack.wait_run("fault_status_sync", run, timeout=240)
    assert state == "success", stack.log("fault_status_sync", run, "run", 1)[-3000:]
    assert (faults.root / "fail").read_text().strip() == "0"  # all three failures were hit
    assert stack.ti("fault_status_sync", run, "run")["try_number"] == 1
    handle = stack.xcom("fault_status_sync", run, "run", "app_handle")
    assert jobs_named("faultstat-0", since) == [(handle.rsplit("/", 1)[1], "COMPLETED")]


def triggerer_pids(stack: AirflowStack) -> set[int]:
    """The triggerer service and every process under it (its trigger runner polls the apps)."""
    import psutil

    leader = psutil.Process(int((stack.home / "stack" / "triggerer.pid").read_text()))
    return {leader.pid, *(child.pid for child in leader.children(recursive=True))}


def status_callers(calls: list[str]) -> list[int]:
    """The pid that ran each status command in ``calls`` (``calls.log`` lines), in order."""
    return [int(line.split()[1]) for line in calls if line.split()[0] in STATUS_COMMANDS]


def test_status_command_failing_three_times_while_deferred_is_retried_by_the_triggerer(stack, faults):
    """The README's "the same while deferred" row: the triggerer's own queries fail, not the worker's.

    The fault is armed only once the task is deferred and the trigger has polled the job, so the
    worker's check before it defers cannot use up the failures.
    """
    since = _since()
    run = stack.trigger("fault_status_deferred", {"seconds": 40})
    stack.wait_ti("fault_status_deferred", run, "run", ("deferred",), timeout=180)
    triggerer = triggerer_pids(stack)
    wait_until(
        lambda: set(status_callers(faults.calls())) & triggerer, "the trigger polled the job", 120, 0.2
    )
    armed_at = len(faults.calls())
    faults.fail_status(3)
    wait_until(
        lambda: (faults.root / "fail").read_text().strip() == "0", "three status commands failed", 120, 0.2
    )
    failing = status_callers(faults.calls()[armed_at:])
    assert stack.ti("fault_status_deferred", run, "run")["state"] == "deferred"  # still waiting

    state = stack.wait_run("fault_status_deferred", run, timeout=240)
    assert state == "success", stack.log("fault_status_deferred", run, "run", 1)[-3000:]
    # the failing commands were the triggerer's, and its retry policy carried the wait through them
    # (a command that was under way as the fault was armed may be counted before or after it)
    assert failing and set(failing) <= triggerer, (failing, triggerer)
    # the trigger's own log (the shared poller's batched query) shows its retries through them
    run_logs = stack.home / "logs" / "dag_id=fault_status_deferred" / f"run_id={run}" / "task_id=run"
    trigger_log = "".join(log.read_text() for log in run_logs.glob("attempt=1.log.trigger.*.log"))
    # the outage policy logs the failing queries once when they start and once when they end
    assert trigger_log.count("waiting the outage out") == 1, trigger_log[-3000:]
    assert trigger_log.count("answers again after") == 1, trigger_log[-3000:]
    assert stack.ti("fault_status_deferred", run, "run")["try_number"] == 1
    handle = stack.xcom("fault_status_deferred", run, "run", "app_handle")
    assert jobs_named("faultstatdef-0", since) == [(handle.rsplit("/", 1)[1], "COMPLETED")]


def test_worker_sigkilled_between_submission_and_its_first_poll_reattaches(stack, faults):
    faults.after_sbatch(f"touch {faults.root}/kill_poller")
    since = _since()
    run = stack.trigger("fault_killed_sync", {"seconds": 20})
    state = stack.wait_run("fault_killed_sync", run, timeout=300)
    assert any(line.startswith("killed ") for line in faults.calls()), "the fault never fired"
    assert state == "success", stack.log("fault_killed_sync", run, "run", 2)[-3000:]
    ti = stack.ti("fault_killed_sync", run, "run")
    assert ti["try_number"] == 2
    handle = stack.xcom("fault_killed_sync", run, "run", "return_value")["app_handle"]
    assert jobs_named("faultkill-0", since) == [(handle.rsplit("/", 1)[1], "COMPLETED")]
    log = stack.log("fault_killed_sync", run, "run", 2)
    assert f"Reattached to TorchX app {handle} from an earlier try" in log
    assert "Submitted TorchX app" not in log


def test_worker_sigkilled_as_sbatch_returns_finds_its_job_by_the_mark_and_reattaches(stack, faults):
    """The window ResumableJobMixin leaves open: the job was submitted, its handle never recorded."""
    faults.kill_next_submitter()
    since = _since()
    run = stack.trigger("fault_submit_killed", {"seconds": 15})
    state = stack.wait_run("fault_submit_killed", run, timeout=300)
    killed = [line for line in faults.calls() if line.startswith("submitter-killed ")]
    assert killed, "the fault never fired"
    assert state == "success", stack.log("fault_submit_killed", run, "run", 2)[-3000:]
    assert stack.ti("fault_submit_killed", run, "run")["try_number"] == 2
    handle = stack.xcom("fault_submit_killed", run, "run", "return_value")["app_handle"]
    app_id = handle.rsplit("/", 1)[1]
    assert killed[0].split()[2] == app_id  # the job sbatch made before its submitter was killed
    assert jobs_named("faultsubmit-0", since) == [(app_id, "COMPLETED")]
    log = stack.log("fault_submit_killed", run, "run", 2)
    assert f"An earlier try died while submitting TorchX app {handle}" in log
    assert f"Reattached to TorchX app {handle} from an earlier try" in log
    assert "Submitted TorchX app" not in log


# dag id -> the sensor's final state; the app it watches must be left running in every case
SENSOR_TIMEOUTS = {
    "sensor_timeout_poke": "failed",
    "sensor_timeout_poke_soft": "skipped",
    "sensor_timeout_reschedule": "failed",
    "sensor_timeout_reschedule_soft": "skipped",
    "sensor_timeout_deferred": "failed",
    "sensor_timeout_deferred_soft": "skipped",
}


def test_a_sensor_timeout_never_cancels_the_app_in_any_mode(stack, tmp_path):
    handle = torchx_run(tmp_path, "utils.sh", "sleep", "300")
    try:
        wait_state(handle, ("RUNNING",))
        runs = {dag_id: stack.trigger(dag_id, {"app_handle": handle}) for dag_id in SENSOR_TIMEOUTS}
        outcomes = {}
        for dag_id, run in runs.items():
            stack.wait_run(dag_id, run, timeout=240)
            outcomes[dag_id] = stack.ti(dag_id, run, "wait")["state"]
        logs = {dag_id: stack.log(dag_id, run, "wait", 1) for dag_id, run in runs.items()}
        # each ended by its own timeout: failed with AirflowSensorTimeout, or skipped with soft_fail
        ended_by = {
            dag_id: "timeout" if "AirflowSensorTimeout" in log else "skip" if "Skipping task" in log else "?"
            for dag_id, log in logs.items()
        }
        expected = {
            dag_id: "skip" if state == "skipped" else "timeout" for dag_id, state in SENSOR_TIMEOUTS.items()
        }
        wrong = "\n\n".join(f"--- {d}\n{logs[d]}" for d in runs if ended_by[d] != expected[d])
        assert outcomes == SENSOR_TIMEOUTS, wrong
        assert ended_by == expected, wrong
        assert job_state(handle) == "RUNNING"  # six timeouts later, still running
    finally:
        subprocess.run(["scancel", handle.rsplit("/", 1)[1]], check=False)


@pytest.mark.parametrize("dag_id", ["sensor_poke_soft", "sensor_deferred_soft"])
@pytest.mark.parametrize("when", ["before", "while"])
def test_soft_fail_skips_on_a_failed_app_whether_it_failed_before_or_while_watched(
    stack, tmp_path, dag_id, when
):
    seconds = "0" if when == "before" else "8"
    handle = torchx_run(tmp_path, "utils.sh", "sh", "-c", f"sleep {seconds}; exit 3")
    if when == "before":
        wait_state(handle, ("FAILED",))
    run = stack.trigger(dag_id, {"app_handle": handle})
    stack.wait_run(dag_id, run, timeout=240)
    assert stack.ti(dag_id, run, "wait")["state"] == "skipped"
    assert wait_state(handle, ("FAILED",)) == "FAILED"
