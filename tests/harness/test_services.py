"""tests/services.py, the servers every other test starts: what runs in them and what they leave."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.services import cmdline, mlflow_server_process, process_group


def test_the_mlflow_server_runs_no_job_runner(tmp_path: Path) -> None:
    """MLflow's job runner (huey consumers, about 1.2 GB a server) is off: the server is its supervisor,
    uvicorn and uvicorn's workers."""
    with mlflow_server_process(tmp_path) as (_, proc):
        commands = [cmdline(pid) for pid in process_group(proc.pid)]
    assert any("uvicorn" in command for command in commands), commands
    assert not [c for c in commands if "huey" in c or "mlflow.server.jobs" in c], commands


def test_mlflow_telemetry_is_off_in_the_suites_processes(tmp_path: Path) -> None:
    """No MLflow telemetry client in a process the suite starts: none in a fresh interpreter without
    the test's own variables (as a stack service or a job runs), and the switch in every process of an
    MLflow server."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST", "CI")}
    probe = (
        "import os, mlflow; from mlflow.telemetry import get_telemetry_client; "
        "print(get_telemetry_client(), os.environ.get('_MLFLOW_TELEMETRY_SESSION_ID'))"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["None", "None"], out.stdout + out.stderr

    with mlflow_server_process(tmp_path) as (_, proc):
        environs = {pid: _environ(pid) for pid in process_group(proc.pid)}
    assert environs
    with_telemetry = [
        cmdline(pid) for pid, env in environs.items() if env.get("MLFLOW_DISABLE_TELEMETRY") != "true"
    ]
    assert not with_telemetry


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
