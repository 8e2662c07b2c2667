"""tests/services.py, the servers every other test starts: what runs in them and what they leave."""

from __future__ import annotations

from pathlib import Path

from tests.services import cmdline, mlflow_server_process, process_group


def test_the_mlflow_server_runs_no_job_runner(tmp_path: Path) -> None:
    """MLflow's job runner (huey consumers, about 1.2 GB a server) is off: the server is its supervisor,
    uvicorn and uvicorn's workers."""
    with mlflow_server_process(tmp_path) as (_, proc):
        commands = [cmdline(pid) for pid in process_group(proc.pid)]
    assert any("uvicorn" in command for command in commands), commands
    assert not [c for c in commands if "huey" in c or "mlflow.server.jobs" in c], commands
