"""A running Airflow (API server, scheduler, DAG processor, triggerer) for tests, started and stopped
through the project's own ``scripts/airflow-stack.sh``, and a small client of its REST API."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.polling import wait_until
from tests.scheduling import require_heavy
from tests.services import free_port

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "airflow-stack.sh"
TERMINAL_RUN_STATES = ("success", "failed")


def _tail(log: Path) -> str:
    return log.read_text()[-3000:] if log.exists() else "(no log)"


@dataclass
class AirflowStack:
    """One Airflow home with its services; ``env`` is what every service (and its tasks) gets."""

    home: Path
    dags_folder: Path
    env_extra: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    log_port: int = 0
    password: str = "admin-test-password"
    _token: str | None = None

    def __post_init__(self) -> None:
        require_heavy("an Airflow stack")
        if not self.log_port:
            self.log_port = free_port()
            while self.log_port + 1 == self.port:
                self.log_port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        # connections come from the stack's own home (and env_extra), not from the test process
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_CONN_")}
        return {
            **inherited,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_PORT": str(self.port),
            "AIRFLOW_LOG_PORT": str(self.log_port),
            "AIRFLOW_ADMIN_PASSWORD": self.password,
            # every service of the stack stops when this process ends, even by SIGKILL (tests/watchdog.py)
            "STACK_OWNER_PID": str(os.getpid()),
            # the UI's, REST API's and CLI's connection "Test" (off by default in Airflow)
            "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
            **self.env_extra,
        }

    def script(self, *args: str, timeout: float = 300) -> str:
        proc = subprocess.run(
            ["bash", str(SCRIPT), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.home,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"airflow-stack.sh {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def up(self) -> AirflowStack:
        self.script("up")
        return self

    def up_api_server(self, timeout: float = 240) -> AirflowStack:
        """Only the home and the API server: enough for REST calls that run no task."""
        subprocess.run(
            ["bash", str(REPO / "scripts" / "airflow-home.sh")],
            env=self.env,
            cwd=self.home,
            check=True,
            capture_output=True,
            timeout=timeout,
        )
        self.script("start", "api-server")
        try:
            wait_until(self._healthy, "API server healthy", timeout, interval=1)
        except TimeoutError as e:
            log = self.home / "stack" / "api-server.log"
            raise TimeoutError(f"{e}; its log:\n{_tail(log)}") from None
        return self

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=5) as resp:
                return json.load(resp)["metadatabase"]["status"] == "healthy"
        except (OSError, ValueError, KeyError):
            return False

    def down(self) -> None:
        self.script("down", timeout=120)

    @contextlib.contextmanager
    def running(self) -> Iterator[AirflowStack]:
        """The services up for the ``with`` block, stopped after (also when ``up`` fails half-way)."""
        try:
            yield self.up()
        finally:
            self.down()

    # REST API

    def _request(
        self, method: str, path: str, body: Any = None, auth: bool = True, token: str | None = None
    ) -> Any:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {token or self.token()}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}{path}", data=data, headers=headers, method=method)
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read().decode()
        return json.loads(text) if text else None

    def token(self) -> str:
        if self._token is None:
            self._token = self.token_of("admin", self.password)
        return self._token

    def token_of(self, username: str, password: str | None = None) -> str:
        """A token of ``username``: another user of ``AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS`` has the
        password the API server generated for it in the stack's ``passwords.json``."""
        if password is None:
            password = json.loads((self.home / "stack" / "passwords.json").read_text())[username]
        reply = self._request("POST", "/auth/token", {"username": username, "password": password}, auth=False)
        return str(reply["access_token"])

    def api(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        """A REST call as admin, or as the user whose ``token`` is given."""
        return self._request(method, f"/api/v2{path}", body, token=token)

    def wait_for_dag(self, dag_id: str, timeout: float = 180) -> None:
        dag = wait_until(lambda: self._dag(dag_id), f"DAG {dag_id} parsed", timeout, interval=1)
        if dag.get("is_paused"):
            self.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})

    def _dag(self, dag_id: str) -> dict[str, Any] | None:
        try:
            return self.api("GET", f"/dags/{dag_id}")
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
            return None

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        self.wait_for_dag(dag_id)
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        return run["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}")["state"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 300) -> str:
        def finished() -> str | None:
            state = self.run_state(dag_id, run_id)
            return state if state in TERMINAL_RUN_STATES else None

        return wait_until(finished, f"run {run_id} of {dag_id} finished", timeout, interval=1)

    def ti(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/{task_id}")

    def wait_ti(
        self, dag_id: str, run_id: str, task_id: str, states: tuple[str, ...], timeout: float = 180
    ) -> dict:
        last: dict[str, Any] = {}

        def in_states() -> dict[str, Any] | None:
            last.update(self.ti(dag_id, run_id, task_id))
            return dict(last) if last["state"] in states else None

        try:
            return wait_until(in_states, f"{task_id} of {run_id} in {states}", timeout)
        except TimeoutError as e:
            raise TimeoutError(f"{e} (last state: {last.get('state')})") from None

    def set_ti_state(self, dag_id: str, run_id: str, task_id: str, state: str) -> None:
        self.api(
            "PATCH",
            f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/{task_id}",
            {"new_state": state},
        )

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str, map_index: int = -1) -> Any:
        try:
            entry = self.api(
                "GET",
                f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/{task_id}/xcomEntries/{key}"
                f"?deserialize=true&map_index={map_index}",
            )
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise
        return entry["value"]

    def log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        reply = self.api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/{task_id}/logs/{try_number}"
            f"?full_content=true&map_index={map_index}",
        )
        content = reply.get("content", "")
        if not isinstance(content, list):
            return str(content)
        lines = []
        for entry in content:
            if not isinstance(entry, dict):
                lines.append(str(entry))
                continue
            lines.append(str(entry.get("event", "")))
            if "error_detail" in entry:  # the exception a task failed with
                lines.append(json.dumps(entry["error_detail"]))
        return "\n".join(lines)
