"""scripts/airflow-stack.sh without starting anything: which services each executor has, and that a
home keeps the executor it was started with (so `make down` and `start <service>` need no flag)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _stack(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    run_env = {k: v for k, v in os.environ.items() if k not in ("EXECUTOR", "CELERY_WORKERS", "MLFLOW_PORT")}
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "airflow-stack.sh"), *args],
        env={**run_env, "AIRFLOW_HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _services(home: Path, **env: str) -> list[str]:
    proc = _stack(home, "status", **env)
    assert proc.returncode == 0, proc.stderr
    return [line.split()[0] for line in proc.stdout.splitlines()]


def test_a_home_keeps_the_executor_it_was_started_with(tmp_path):
    local = ["api-server", "scheduler", "dag-processor", "triggerer"]
    assert _services(tmp_path) == local
    (tmp_path / "stack" / "executor").write_text("celery\n")  # what `up` records
    assert _services(tmp_path) == ["redis", *local, "worker-1", "worker-2"]
    assert _services(tmp_path, CELERY_WORKERS="3")[-1] == "worker-3"
    assert _services(tmp_path, EXECUTOR="local") == local


def test_an_unknown_executor_is_refused_with_the_choices(tmp_path):
    proc = _stack(tmp_path, "status", EXECUTOR="kubernetes")
    assert proc.returncode == 2
    assert "EXECUTOR must be local or celery, got 'kubernetes'" in proc.stderr


def test_a_home_keeps_the_ports_and_workers_it_was_started_with(tmp_path):
    """`up` records them (stack/settings); a later command uses them unless given again."""
    (tmp_path / "stack").mkdir()
    (tmp_path / "stack" / "executor").write_text("celery\n")
    (tmp_path / "stack" / "settings").write_text(': "${CELERY_WORKERS:=3}"\n: "${MLFLOW_PORT:=5151}"\n')
    assert _services(tmp_path)[-2:] == ["worker-3", "mlflow"]
    assert _services(tmp_path, CELERY_WORKERS="1")[-2:] == ["worker-1", "mlflow"]


def test_up_on_a_running_home_with_other_ports_is_refused(tmp_path):
    (tmp_path / "stack").mkdir()
    recorded = ': "${AIRFLOW_PORT:=8181}"\n: "${AIRFLOW_LOG_PORT:=8793}"\n'
    (tmp_path / "stack" / "settings").write_text(recorded)
    with subprocess.Popen(["sleep", "60"]) as scheduler:  # what a running scheduler's pid file names
        try:
            (tmp_path / "stack" / "scheduler.pid").write_text(str(scheduler.pid))
            proc = _stack(tmp_path, "up", AIRFLOW_PORT="8282")
        finally:
            scheduler.kill()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "This home runs with other ports or workers" in proc.stderr
    assert (tmp_path / "stack" / "settings").read_text() == recorded


def test_up_with_mlflow_and_no_server_environment_is_refused_before_starting_anything(tmp_path):
    """The MLflow server needs the full mlflow, which `make install` puts in an environment of its own:
    without it (or a MLFLOW_SERVER_PYTHON naming another), `up` says so and starts nothing."""
    missing = tmp_path / "no-such-venv" / "bin" / "python"
    proc = _stack(tmp_path, "up", MLFLOW_PORT="5999", MLFLOW_SERVER_PYTHON=str(missing))
    assert proc.returncode == 2
    assert f"no Python for the MLflow server at {missing}" in proc.stderr and "make install" in proc.stderr
    assert not list((tmp_path / "stack").glob("*.pid")), "something was started"
    assert not (tmp_path / "airflow.db").exists(), "the home was prepared"
