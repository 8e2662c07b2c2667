"""Servers the tests start on loopback and stop afterwards: an MLflow tracking server (SQLite
backend) and moto's S3 server. Started by the tests themselves, so a clean checkout needs nothing
running beforehand."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.polling import wait_until

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]
WATCHDOG = Path(__file__).resolve().parent / "watchdog.py"
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: a child between fork and exec only calls it
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A ``preexec_fn`` for commands a test runs in the foreground (``airflow dags test``): the child
    gets SIGTERM when the thread that started it ends, a SIGKILLed pytest worker included. Only the
    child itself: a command that starts a group of its own is the command's to stop on SIGTERM."""
    parent = os.getppid()
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_group(pgid: int) -> list[int]:
    """The pids of the live processes of process group ``pgid`` (zombies too, until reaped)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(ProcessLookupError):
                if os.getpgid(int(entry)) == pgid:
                    pids.append(int(entry))
    return pids


def cmdline(pid: int) -> str:
    """A process's command line ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def guard(pgid: int, owner: int | None = None) -> subprocess.Popen:
    """A watchdog (tests/watchdog.py) that stops process group ``pgid`` when ``owner`` (this
    process) dies, even by SIGKILL; it exits by itself once the group is gone. Reap it with ``wait``."""
    owner = os.getpid() if owner is None else owner
    return subprocess.Popen(
        [sys.executable, "-I", str(WATCHDOG), str(owner), "--group", str(pgid)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,  # it may outlive its starter (a shared server): no hold on its pipes
        start_new_session=True,
    )


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=2):
                return True
        return False

    try:
        wait_until(answers, f"{url} up", timeout, interval=0.3)
    except TimeoutError as e:
        raise RuntimeError(f"{e}:\n{log.read_text()[-3000:]}") from None


@contextlib.contextmanager
def _server(
    cmd: list[str], ready_url: str, workdir: Path, env_extra: dict[str, str] | None = None
) -> Iterator[subprocess.Popen]:
    proc, log = _launch(cmd, workdir, env_extra)
    watchdog = guard(proc.pid)  # the server's group dies with this process, however it ends
    try:
        _wait_http(ready_url, proc, log)
        yield proc
    finally:
        stop_group(proc)
        _reap(watchdog)


def _launch(cmd: list[str], workdir: Path, env_extra: dict[str, str] | None) -> tuple[subprocess.Popen, Path]:
    """A server's process, leading a group of its own in ``workdir``, and its log file."""
    log = workdir / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            start_new_session=True,
            env={**os.environ, **(env_extra or {})},
        )
    return proc, log


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is left (an unreaped zombie counts)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_group(proc: subprocess.Popen, grace: float = 20) -> None:
    """SIGTERM to the group ``proc`` leads; SIGKILL to what is left of it after ``grace`` seconds.
    Returns once the whole group is gone, not only its leader (reaped here)."""
    stop_pgid(proc.pid, grace, reap=proc.poll)


def stop_pgid(pgid: int, grace: float = 20, reap: Callable[[], object] = lambda: None) -> None:
    """Like ``stop_group``, for a group known by its id; ``reap`` collects the leader when it is this
    process's child (an unreaped zombie keeps the group alive)."""

    def gone() -> bool:
        reap()
        return not group_alive(pgid)

    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    try:
        wait_until(gone, f"group {pgid} gone", grace, 0.2)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        wait_until(gone, f"group {pgid} gone after SIGKILL", 10, 0.1)


def _reap(watchdog: subprocess.Popen) -> None:
    """The watchdog ends within a second of its group; one still there after that is stopped."""
    try:
        watchdog.wait(timeout=10)
    except subprocess.TimeoutExpired:
        watchdog.kill()
        watchdog.wait()


#: What every ``mlflow server`` of the tests (and scripts/airflow-stack.sh's) runs with.
MLFLOW_SERVER_ENV = {
    # uvicorn kills a worker that misses a 5 s health check, which a loaded CI machine can take
    "UVICORN_TIMEOUT_WORKER_HEALTHCHECK": "60",
    # MLflow's job runner (a huey consumer per job kind, about seven processes and 1.2 GB a server)
    # runs GenAI evaluation and trace jobs, none of which the tests use
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    # also for servers started outside the suite (bench/): tests/conftest.py explains the race
    "MLFLOW_DISABLE_TELEMETRY": "true",
}


@contextlib.contextmanager
def mlflow_server(workdir: Path) -> Iterator[str]:
    """``mlflow server`` with a SQLite backend on a free loopback port; yields its http URI."""
    with mlflow_server_process(workdir) as (uri, _):
        yield uri


@contextlib.contextmanager
def mlflow_server_process(workdir: Path, workers: int = 1) -> Iterator[tuple[str, subprocess.Popen]]:
    """Like ``mlflow_server``, and the server's process (a group leader: signal the group).

    One uvicorn worker serves concurrent requests on threads (the rank races run against it); with
    ``workers=1`` uvicorn runs in the server's own child, and each more worker is ~200 MB of PSS.
    """
    uri, cmd = _mlflow_command(workdir, workers)
    with _server(cmd, f"{uri}/health", workdir, MLFLOW_SERVER_ENV) as proc:
        yield uri, proc


def mlflow_server_python() -> str:
    """The interpreter that runs ``mlflow server``: ``MLFLOW_SERVER_PYTHON`` (the Makefile sets it), else
    the one of the environment `make install` builds beside this one (``<this venv>-mlflow``, with
    the full ``mlflow``; this one has the client alone)."""
    given = os.environ.get("MLFLOW_SERVER_PYTHON") or f"{sys.prefix}-mlflow/bin/python"
    if not os.access(given, os.X_OK):
        raise RuntimeError(
            f"no Python for the MLflow server at {given}: run `make install`, which builds its "
            "environment, or set MLFLOW_SERVER_PYTHON to a Python with the full mlflow installed"
        )
    return given


def _mlflow_command(workdir: Path, workers: int = 1) -> tuple[str, list[str]]:
    port = free_port()
    cmd = [
        mlflow_server_python(), str(REPO / "scripts" / "mlflow-server.py"),
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
        "--backend-store-uri", f"sqlite:///{workdir}/mlflow.db",
        "--default-artifact-root", str(workdir / "artifacts"),
    ]  # fmt: skip
    return f"http://127.0.0.1:{port}", cmd


def shared_mlflow_server(directory: Path, owner: int) -> str:
    """The URI of one MLflow server for every pytest-xdist worker of a run (``directory`` is the run's,
    made by its controller): the first worker to ask starts it, under a lock, and the others read its
    address; one that finds it no longer answering starts another. It is left running when that worker
    ends, for the others: ``stop_shared_servers`` stops it (every server recorded in ``directory``, from
    the moment it is started) when the run ends, and a watchdog when ``owner`` (the controller) dies,
    even by SIGKILL."""
    state = directory / "mlflow.json"
    with open(directory / "mlflow.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if state.is_file():
            uri = str(json.loads(state.read_text())["uri"])
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{uri}/health", timeout=10):
                    return uri
        workdir = directory / f"mlflow-{os.getpid()}-{time.monotonic_ns()}"
        workdir.mkdir()
        uri, cmd = _mlflow_command(workdir)
        proc, log = _launch(cmd, workdir, MLFLOW_SERVER_ENV)
        (workdir / "server.json").write_text(json.dumps({"uri": uri, "pgid": proc.pid}))  # for the stop
        guard(proc.pid, owner)
        try:
            _wait_http(f"{uri}/health", proc, log)
        except BaseException:
            stop_group(proc)
            raise
        state.write_text(json.dumps({"uri": uri}))
        return uri


def stop_shared_servers(directory: Path, grace: float = 20) -> None:
    """Stop the servers ``shared_mlflow_server`` started in ``directory`` (SIGTERM to each group, then
    SIGKILL after ``grace`` seconds) and remove the directory."""
    try:
        for server in directory.glob("*/server.json"):
            stop_pgid(int(json.loads(server.read_text())["pgid"]), grace)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def moto_s3_server(workdir: Path) -> Iterator[str]:
    """moto's S3 server on a free loopback port; yields its endpoint URL."""
    with moto_s3_server_process(workdir) as (endpoint, _):
        yield endpoint


@contextlib.contextmanager
def moto_s3_server_process(workdir: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """Like ``moto_s3_server``, and the server's process (a group leader)."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    cmd = [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    with _server(cmd, f"{endpoint}/moto-api/", workdir) as proc:
        yield endpoint, proc


class _RecordingHandler(http.server.BaseHTTPRequestHandler):
    """Answers every GET with ``model`` and every HEAD with its length; keeps each request line."""

    requests: list[str]

    def do_GET(self) -> None:
        self.requests.append(f"GET {self.path}")
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"model")

    def do_HEAD(self) -> None:
        self.requests.append(f"HEAD {self.path}")
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def recording_http_server(path: str = "/backdoored.pt") -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on loopback, in a thread of this process: yields a URL on it and the list of
    the requests it saw (what a test asserts stayed empty); stopped on exit."""
    requests: list[str] = []
    handler = type("Recording", (_RecordingHandler,), {"requests": requests})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{path}", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
