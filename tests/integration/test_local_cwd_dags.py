"""Real DAG runs (``airflow dags test``) launching real TorchX jobs on the local_cwd scheduler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import AIRFLOW, collect_run
from tests.dags.torchx_test_dags import HELLO, SECRET
from tests.polling import wait_until

pytestmark = pytest.mark.integration


def test_success_streams_job_output_and_returns_status(run_dag):
    result = run_dag("tx_success", conf={"name": "Grace", "steps": 3})

    assert result.returncode == 0, result.output[-3000:]
    assert result.states == {"plan": "success", "run": "success"}
    # templated params reached the job, and its output is in the task log, one prefixed line each
    assert "[python/0] hello, Grace!" in result.output
    for step in (1, 2, 3):
        assert result.output.count(f"[python/0] step {step}/3") == 1
    handle = result.xcom("run", key="app_handle")
    assert handle.startswith("local_cwd://torchx/run-")  # the app is named after its task
    value = result.xcom("run")
    assert value["app_handle"] == handle
    assert value["state"] == "SUCCEEDED"
    assert value["roles"] == {"python": ["SUCCEEDED"]}
    assert value["ui_url"].startswith("file://")


def test_dry_run_summary_describes_the_request(run_dag):
    result = run_dag("tx_success", conf={"name": "Ada", "steps": 1})

    summary = result.xcom("plan")
    assert summary["scheduler"] == "local_cwd"
    assert summary["app_name"] == "plan"
    (role,) = summary["roles"]
    assert role["entrypoint"] == "python"
    assert role["args"][-5:] == [HELLO, "--name", "Ada", "--steps", "1"]
    assert role["num_replicas"] == 1
    assert {"API_TOKEN", "TORCHX_JOB_ID"} <= set(role["env_names"])
    assert set(role["resource"]) == {"cpu", "gpu", "memMB", "capabilities", "devices"}
    assert HELLO in summary["request"]
    assert summary["cfg"]["prepend_cwd"] is False  # resolved defaults of local_cwd's run options


def test_env_secret_reaches_the_job_but_no_log_or_xcom(run_dag):
    result = run_dag("tx_success", conf={"name": "Sec", "steps": 1})

    assert result.states["run"] == "success"
    assert SECRET not in result.output
    assert "***" in result.xcom("plan")["request"]
    assert SECRET not in json.dumps(result.xcom("plan")) + json.dumps(result.xcom("run"))


def test_templated_cfg_renders_and_a_rendered_app_keeps_its_env_secret_out_of_the_db(run_dag):
    result = run_dag("tx_templated", conf={"cfg": {"prepend_cwd": True, "log_dir": "/tmp/tx-templated"}})

    assert result.states == {"plan_app": "success"}, result.output[-3000:]
    summary = result.xcom("plan_app")
    assert summary["cfg"]["prepend_cwd"] is True and summary["cfg"]["log_dir"] == "/tmp/tx-templated"
    stored = result.stored_text()  # every XCom and rendered template field of the run
    assert "API_TOKEN" in stored and SECRET not in stored
    assert SECRET not in result.output


def test_failing_job_fails_the_task_with_the_job_error(run_dag):
    result = run_dag("tx_fail")

    assert result.states == {"run": "failed"}
    assert "[python/0] failing on request after 1 steps" in result.output
    assert "finished in state FAILED" in result.output
    handle = result.xcom("run", key="app_handle")  # pushed before the wait, kept on failure
    assert handle.startswith("local_cwd://")


def test_unknown_component_fails_before_submission(run_dag):
    result = run_dag("tx_bad_component")

    assert result.states == {"run": "failed"}
    assert "Unknown or invalid TorchX component 'utils.no_such_component'" in result.output
    assert result.xcom("run", key="app_handle") is None


def test_sensor_fails_fast_on_unknown_handle(run_dag):
    result = run_dag("tx_sensor_unknown")

    assert result.states == {"wait": "failed"}
    assert "'local_cwd://torchx/never-launched-123' is unknown to its scheduler" in result.output
    assert "only visible from the process that launched them" in result.output
    # failed at the first poke (poke_interval 1 s), not by the sensor's 60 s timeout
    assert "AirflowSensorTimeout" not in result.output and "Sensor has timed out" not in result.output


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie has exited; only its parent's wait is missing
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


@pytest.mark.timeout(600)  # the start may take minutes on a busy machine
def test_killing_the_task_cancels_the_job(airflow_db, tmp_path):
    pid_file = tmp_path / "job.pid"
    log = tmp_path / "dags-test.log"
    # the output goes to a file: a pipe nobody reads until the end fills (64 KiB) and blocks the run
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [AIRFLOW, "dags", "test", "tx_sleep", "--conf", json.dumps({"pid_file": str(pid_file)})],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    try:
        # `airflow dags test` parses the test DAGs and submits first: minutes on a busy machine
        wait_until(pid_file.exists, "the job started", 240, interval=0.2)
        job_pid = int(pid_file.read_text())
        assert _alive(job_pid)

        proc.send_signal(signal.SIGTERM)  # what Airflow sends a task it kills
        # gone within Airflow's grace before it SIGKILLs a killed task (killed_task_cleanup_time, 60 s)
        wait_until(lambda: not _alive(job_pid), "the job gone after the kill", 60, interval=0.2)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = log.read_text()
    assert "Task killed (its app ends with this process): cancelling TorchX app local_cwd://" in output
    result = collect_run(airflow_db, "tx_sleep", proc.returncode, output)
    assert result.states == {"run": "failed"}
    assert "finished in state CANCELLED" in output
