"""docker-compose.yml run for real: the whole stack up on stand-in images built here from Debian's
packages and the package index (tests/compose/docker-compose.test.yml), torchx_pipeline triggered
through the REST API until it succeeds, the Celery workers scaled to three, the stack brought down.

Docker's engine, docker-compose and debootstrap come from Debian's packages (scripts/install-docker.sh);
the images are built by scripts/compose-images.sh, which rebuilds only what changed. Needs root.
Each step prints its time (pytest -s shows them).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.compose, pytest.mark.timeout(1800)]
REPO = Path(__file__).resolve().parents[2]
OVERRIDE = Path(__file__).resolve().parent / "docker-compose.test.yml"
PROJECT = "torchx-airflow-compose-test"
PORTS = ("AIRFLOW_PORT", "MLFLOW_PORT", "MINIO_PORT", "MINIO_CONSOLE_PORT", "FLOWER_PORT")
# A small run: two DDP trainings of a few epochs on a few rows.
CONF = {"learning_rates": [0.1, 0.3], "epochs": 3, "rows": 40, "scheduler": "local_cwd"}


def _timed(step: str, cmd: list[str], timeout: float = 1200, **kwargs: Any) -> str:
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, **kwargs)
    print(f"{time.monotonic() - started:7.1f} s  {step}")
    assert proc.returncode == 0, f"{step}: {cmd} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ComposeStack:
    """The compose project of this test: its commands and the REST API of its Airflow."""

    def __init__(self) -> None:
        self.env = {**os.environ, **{name: str(_free_port()) for name in PORTS}}
        self.url = f"http://127.0.0.1:{self.env['AIRFLOW_PORT']}"
        self._token: str | None = None

    def compose(self, step: str, *args: str, timeout: float = 900) -> str:
        # --compatibility: docker-compose v1 honours deploy.replicas (two workers) as compose v2 does
        base = ["docker", "compose"] if _has_compose_v2() else ["docker-compose", "--compatibility"]
        files = ["-p", PROJECT, "-f", str(REPO / "docker-compose.yml"), "-f", str(OVERRIDE)]
        return _timed(step, [*base, *files, *args], timeout=timeout, env=self.env)

    def containers(self, service: str) -> list[str]:
        """The running containers of a service, or with "" of every service of the project."""
        filters = ["--filter", f"label=com.docker.compose.project={PROJECT}"]
        if service:
            filters += ["--filter", f"label=com.docker.compose.service={service}"]
        out = subprocess.run(["docker", "ps", "-q", *filters], capture_output=True, text=True, check=True)
        return out.stdout.split()

    def api(self, method: str, path: str, body: Any = None, auth: bool = True) -> Any:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}{path}", data=data, headers=headers, method=method)
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read().decode()
        return json.loads(text) if text else None

    def token(self) -> str:
        if self._token is None:
            reply = self.api("POST", "/auth/token", {"username": "admin", "password": "admin"}, auth=False)
            self._token = reply["access_token"]
        return self._token

    def wait(self, what: str, check, timeout: float) -> Any:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            try:
                result = check()
            except (urllib.error.URLError, ConnectionError, OSError):
                result = None
            if result:
                print(f"{time.monotonic() - started:7.1f} s  {what}")
                return result
            time.sleep(2)
        raise TimeoutError(f"{what}: not within {timeout} s")


def _has_compose_v2() -> bool:
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def stack() -> Iterator[ComposeStack]:
    assert os.geteuid() == 0, "the compose test installs Docker and builds images: run it as root"
    _timed("install Docker (scripts/install-docker.sh)", ["bash", "scripts/install-docker.sh"])
    assert shutil.which("docker")
    _timed("build stand-in images (scripts/compose-images.sh)", ["bash", "scripts/compose-images.sh"], 2400)
    stack = ComposeStack()
    stack.compose("remove what an earlier run left", "down", "-v", "--remove-orphans")
    try:
        stack.compose("docker compose up -d", "up", "-d", "--no-build")
        stack.wait("API server answers", lambda: stack.api("GET", "/api/v2/version", auth=False), 300)
        yield stack
    finally:  # the test brings it down itself; this is for a test that failed before
        stack.compose("down -v after the test", "down", "-v", "--remove-orphans")


def test_pipeline_runs_in_the_stack_then_workers_scale_to_three(stack):
    assert len(stack.containers("airflow-worker")) == 2  # deploy.replicas
    stack.wait("torchx_pipeline parsed", lambda: stack.api("GET", "/api/v2/dags/torchx_pipeline"), 300)
    run = stack.api("POST", "/api/v2/dags/torchx_pipeline/dagRuns", {"logical_date": None, "conf": {**CONF}})[
        "dag_run_id"
    ]
    path = f"/api/v2/dags/torchx_pipeline/dagRuns/{urllib.request.quote(run)}"
    state = stack.wait(
        "torchx_pipeline run finished",
        lambda: (s := stack.api("GET", path)["state"]) in ("success", "failed") and s,
        900,
    )
    tis = stack.api("GET", f"{path}/taskInstances")["task_instances"]
    assert state == "success", [
        (t["task_id"], t["map_index"], t["state"], _failure(stack, path, t)) for t in tis
    ]
    assert {t["state"] for t in tis} == {"success"}
    # the tasks ran on the Celery workers (their container hostnames), not elsewhere
    workers = {_hostname(c) for c in stack.containers("airflow-worker")}
    assert {t["hostname"] for t in tis} <= workers

    stack.compose("scale airflow-worker to 3", "up", "-d", "--no-build", "--scale", "airflow-worker=3")
    assert len(stack.containers("airflow-worker")) == 3
    pong = stack.wait("three workers answer the broker", lambda: _ping(stack), 300)
    assert pong == {f"celery@{_hostname(c)}" for c in stack.containers("airflow-worker")}

    stack.compose("docker compose down -v", "down", "-v", "--remove-orphans")
    assert not stack.containers(""), "containers of the stack left after down"


def _failure(stack: ComposeStack, run_path: str, ti: dict[str, Any]) -> str:
    """The end of a failed task's log (for the assertion message), else its hostname."""
    if ti["state"] != "failed":
        return ti["hostname"]
    task = ti["task_id"] if ti["map_index"] < 0 else f"{ti['task_id']}/{ti['map_index']}"
    log = stack.api("GET", f"{run_path}/taskInstances/{task}/logs/{ti['try_number']}?full_content=true")
    return json.dumps(log)[-3000:]


def _hostname(container: str) -> str:
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{.Config.Hostname}}", container],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


PING = (
    "import json; from celery import Celery; "
    "print(json.dumps(Celery(broker='redis://redis:6379/0').control.ping(timeout=5.0)))"
)


def _ping(stack: ComposeStack) -> set[str] | None:
    """The Celery nodes that answer a ping through the stack's broker, once there are three."""
    worker = stack.containers("airflow-worker")[0]
    proc = subprocess.run(
        ["docker", "exec", worker, "python", "-c", PING], capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        return None
    nodes = {name for reply in json.loads(proc.stdout.strip().splitlines()[-1]) for name in reply}
    return nodes if len(nodes) == 3 else None
