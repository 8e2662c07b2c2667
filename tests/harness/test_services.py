"""tests/services.py, the servers every other test starts: what runs in them and what they leave."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.polling import wait_until
from tests.services import (
    cmdline,
    group_alive,
    mlflow_server_process,
    mlflow_server_python,
    process_group,
    stop_shared_servers,
)


@pytest.fixture(scope="module")
def mlflow_processes(tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[str, dict[str, str]]]:
    """Every process of one running test MLflow server: pid -> (command line, environment)."""
    with mlflow_server_process(tmp_path_factory.mktemp("mlflow")) as (_, proc):
        return {pid: (cmdline(pid), _environ(pid)) for pid in process_group(proc.pid)}


def test_the_mlflow_server_runs_no_job_runner(mlflow_processes) -> None:
    """MLflow's job runner (huey consumers, about 2 GB a server) is off, and the server is one process:
    uvicorn, with no idle ``mlflow server`` parent of about 200 MB behind it (scripts/mlflow-server.py)."""
    commands = [command for command, _ in mlflow_processes.values()]
    assert len(commands) == 1 and "uvicorn" in commands[0], commands
    assert not [c for c in commands if "huey" in c or "mlflow.server.jobs" in c], commands


def test_the_server_runs_from_its_own_environment_and_the_clients_load_no_pandas(mlflow_processes) -> None:
    """The server runs ``mlflow server`` from the environment `make install` builds for it (the full
    ``mlflow``); this one has the client alone (mlflow-skinny), as users' workers and jobs do, so a
    process importing the MLflow client (a training rank, a pytest worker) loads no pandas, pyarrow or
    scipy (about 80 MB each)."""
    (command,) = [command for command, _ in mlflow_processes.values()]
    assert command.split()[0] == mlflow_server_python() != sys.executable, command
    probe = (
        "import sys; from mlflow.tracking import MlflowClient; "
        "print(sorted({'pandas', 'pyarrow', 'scipy'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", (
        f"{out.stdout}{out.stderr}: this environment has the full mlflow (an install older than "
        "mlflow-skinny in the test extra): `make clean install` rebuilds it"
    )


def test_mlflow_telemetry_is_off_in_the_suites_processes(mlflow_processes) -> None:
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

    with_telemetry = [
        command for command, env in mlflow_processes.values() if env.get("MLFLOW_DISABLE_TELEMETRY") != "true"
    ]
    assert not with_telemetry


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


OWNER = """
import sys
from pathlib import Path
from tests.services import {starter}

with {starter}(Path(sys.argv[1])) as started:
    print(started[1].pid, flush=True)
    sys.stdin.read()  # held until the test kills this process
"""


@pytest.mark.parametrize("starter", ["mlflow_server_process", "moto_s3_server_process"])
def test_a_server_dies_with_the_process_that_started_it_even_by_sigkill(tmp_path: Path, starter: str) -> None:
    """A pytest worker SIGKILLed runs no teardown: the server's whole process group goes anyway."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER.format(starter=starter), str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        pgid = int(owner.stdout.readline() or 0)  # type: ignore[union-attr]
        assert pgid, f"the owner did not start its server: exit code {owner.poll()}"
        assert process_group(pgid), "the server's group is empty before the kill"
        owner.kill()
        owner.wait()
        wait_until(lambda: not group_alive(pgid), f"server group {pgid} gone after its owner's SIGKILL", 60)
    finally:
        owner.kill()
        owner.wait()


ASKER = """
import sys
from pathlib import Path
from tests.services import shared_mlflow_server

print(shared_mlflow_server(Path(sys.argv[1]), int(sys.argv[2])), flush=True)
"""


def _ask(directory: Path, controller: int, askers: int) -> set[str]:
    """What ``askers`` processes asking for the shared server at once get."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ASKER, str(directory), str(controller)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for _ in range(askers)
    ]
    uris = {proc.communicate(timeout=180)[0].strip() for proc in procs}
    assert all(proc.returncode == 0 for proc in procs), uris
    return uris


def _servers(directory: Path) -> list[int]:
    return [int(json.loads(f.read_text())["pgid"]) for f in sorted(directory.glob("*/server.json"))]


@pytest.mark.parametrize("end", ["the run ends", "the controller is killed"])
def test_the_workers_share_one_mlflow_server_that_outlives_its_starter(tmp_path: Path, end: str) -> None:
    """Three workers asking at once get one server (tests/conftest.py's ``mlflow_uri`` under xdist); it
    still answers after they have all exited (the one that started it may end first), and it goes when
    the run ends (``stop_shared_servers``, the controller's) or when the controller dies by SIGKILL. A
    worker that finds it dead starts another, which the end of the run stops too."""
    controller = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        uris = _ask(tmp_path, controller.pid, 3)
        assert len(uris) == 1, uris
        (uri,) = uris
        (pgid,) = _servers(tmp_path)
        assert len(process_group(pgid)) == 1, "one server process"
        time.sleep(2)  # a watchdog of one of the askers (all gone) would have stopped it by now
        assert group_alive(pgid), "the server went with the worker that started it"
        with urllib.request.urlopen(f"{uri}/health", timeout=10) as answer:
            assert answer.status == 200
        if end == "the run ends":
            os.killpg(pgid, signal.SIGKILL)  # as the kernel's OOM killer would
            wait_until(lambda: not group_alive(pgid), "the killed server gone", 30)
            (again,) = _ask(tmp_path, controller.pid, 1)
            assert again != uri and len(_servers(tmp_path)) == 2
            (second,) = set(_servers(tmp_path)) - {pgid}
            assert group_alive(second)
            stop_shared_servers(tmp_path)
            assert not group_alive(second) and not tmp_path.exists()
        else:
            controller.kill()
            controller.wait()
            wait_until(
                lambda: not group_alive(pgid), f"server group {pgid} gone after the controller's SIGKILL", 60
            )
    finally:
        controller.kill()
        controller.wait()


STACK_OWNER = """
import sys
from pathlib import Path
from tests.stack import AirflowStack

home = Path(sys.argv[1])
stack = AirflowStack(home, home / "dags").up_api_server()
print((home / "stack" / "api-server.pid").read_text().strip(), flush=True)
sys.stdin.read()  # held until the test kills this process
"""


def test_an_airflow_stack_dies_with_the_process_that_started_it_even_by_sigkill(tmp_path: Path) -> None:
    """scripts/airflow-stack.sh's services outlive the script by design; the tests' stacks still go with
    the test process that started them (its watchdog stops every service of the stack's pid files)."""
    (tmp_path / "dags").mkdir()
    owner = subprocess.Popen(
        [sys.executable, "-c", STACK_OWNER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        pgid = int(owner.stdout.readline() or 0)  # type: ignore[union-attr]
        assert pgid, f"the owner did not start its API server: exit code {owner.poll()}"
        watchdog = int((tmp_path / "stack" / "watchdog.pid").read_text())
        assert process_group(pgid) and group_alive(watchdog)
        owner.kill()
        owner.wait()
        wait_until(
            lambda: not group_alive(pgid), f"API server group {pgid} gone after its owner's SIGKILL", 60
        )
        wait_until(lambda: not group_alive(watchdog), "the stack's watchdog gone", 10)
    finally:
        owner.kill()
        owner.wait()


FOREGROUND_OWNER = """
import subprocess, sys
from tests.services import die_with_parent

# waits for a signal: nothing of its owner's (a pipe closing) would end it
pause = [sys.executable, "-c", "import signal; signal.pause()"]
command = subprocess.Popen(pause, preexec_fn=die_with_parent)
print(command.pid, flush=True)
sys.stdin.read()  # held until the test kills this process
"""


def test_a_foreground_command_dies_with_the_process_that_ran_it_even_by_sigkill() -> None:
    """What run_dag runs (``airflow dags test``) gets SIGTERM when its pytest worker is SIGKILLed."""
    owner = subprocess.Popen(
        [sys.executable, "-c", FOREGROUND_OWNER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        command = int(owner.stdout.readline() or 0)  # type: ignore[union-attr]
        assert command and _running(command), f"the owner did not start its command: exit code {owner.poll()}"
        owner.kill()
        owner.wait()
        wait_until(lambda: not _running(command), f"command {command} gone after its owner's SIGKILL", 30)
    finally:
        owner.kill()
        owner.wait()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
