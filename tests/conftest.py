"""Test set-up: a private Airflow home with a SQLite metadata DB, and helpers for real DAG runs.

The environment is set before Airflow is imported, so nothing the tests do touches the user's
Airflow home. DAG runs go through the real ``airflow dags test`` command, which runs the tasks
(and their TorchX jobs) in a child process exactly as a user's run does.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.services import die_with_parent

REPO = Path(__file__).resolve().parent.parent
TEST_DAGS = Path(__file__).resolve().parent / "dags"
_HOME = Path(tempfile.mkdtemp(prefix="torchx-airflow-tests-"))

os.environ.update(
    {
        "AIRFLOW_HOME": str(_HOME),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(TEST_DAGS),
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW_CONN_TORCHX_DEFAULT": json.dumps(
            {"conn_type": "torchx", "extra": {"scheduler": "local_cwd"}}
        ),
        # the deployment's cache key (a test key, no secret): cached tasks refuse to run without one
        "AIRFLOW__TORCHX__CACHE_KEY_SECRET": "torchx_cache_key",
        "AIRFLOW_VAR_TORCHX_CACHE_KEY": "test-deployment-cache-key-0123456789abcdef",
        # MLflow's usage telemetry off in every process of the suite (this one, servers, Airflow stacks,
        # `airflow dags test`, and the jobs, which inherit it): its client starts a thread that fetches
        # a config and, when that fails as it does offline, pops _MLFLOW_TELEMETRY_SESSION_ID from
        # os.environ while other threads read or swap the environment
        "MLFLOW_DISABLE_TELEMETRY": "true",
        # local_cwd jobs run `python` from PATH: the interpreter running the tests.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
)
AIRFLOW = str(Path(sys.executable).parent / "airflow")

# Each directory's marker, applied at collection: a new file there is marked without anyone
# remembering. `pytest -m "not slurm and not e2e"` runs the part that needs no root (README, Tests).
DIRECTORY_MARKERS = {
    "unit": "unit",
    "harness": "unit",
    "integration": "integration",
    "tracker": "tracker",
    "packaging": "packaging",
    "slurm": "slurm",
    "kubernetes": "kubernetes",
    "e2e": "e2e",
    "compose": "compose",
}
# The tests of these directories start Airflow stacks (tests/stack.py) in module or session fixtures,
# whose start counts against the first test's timeout: each gets this much more than its own. It is
# the bound AirflowStack.up() gives `airflow-stack.sh up`.
STACK_DIRECTORIES = ("slurm", "e2e", "kubernetes")
STACK_START_SECONDS = 300


# Under pytest-xdist, the controller makes a directory for the servers its workers share (the MLflow
# server of ``mlflow_uri``), passed to them in the environment, and stops those servers at the end.
SHARED_SERVERS = "TORCHX_AIRFLOW_TEST_SHARED_SERVERS"


def pytest_configure(config: pytest.Config) -> None:
    from tests import require_all

    if not config.pluginmanager.is_registered(require_all):  # also given as `-p tests.require_all`
        config.pluginmanager.register(require_all, "torchx_airflow_require_all")
    if _is_xdist_controller(config):
        os.environ[SHARED_SERVERS] = tempfile.mkdtemp(prefix="torchx-airflow-shared-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _is_xdist_controller(config) and SHARED_SERVERS in os.environ:
        from tests.services import stop_shared_servers

        stop_shared_servers(Path(os.environ.pop(SHARED_SERVERS)))
    shutil.rmtree(_HOME, ignore_errors=True)  # this process's Airflow home: nothing is left in /tmp


def _is_xdist_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput") and bool(config.getoption("numprocesses", None))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """The longest test files first, files sharing a package's service on one worker."""
    from tests.scheduling import make_scheduler

    return make_scheduler(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        if not item.path.resolve().is_relative_to(tests_dir):  # not ours (a path given beside tests/)
            continue
        directory = item.path.resolve().relative_to(tests_dir).parts[0]
        marker = DIRECTORY_MARKERS.get(directory)
        if marker is None:
            raise pytest.UsageError(
                f"{item.nodeid}: tests/{directory} has no marker; add it to DIRECTORY_MARKERS in "
                "tests/conftest.py (and register a new marker in pyproject.toml)"
            )
        item.add_marker(marker)
        if directory in STACK_DIRECTORIES:
            _add_stack_start_time(config, item)
    from tests.scheduling import order_items

    order_items(items)  # the longest files first (tests/scheduling.py)


def _add_stack_start_time(config: pytest.Config, item: pytest.Item) -> None:
    """Raise the item's pytest-timeout (its marker's, else --timeout's, else the ini's) by the
    stack's start; a test without a timeout keeps none."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        seconds = marker.args[0] if marker.args else marker.kwargs.get("timeout")
        kwargs = {k: v for k, v in marker.kwargs.items() if k != "timeout"}
    else:
        seconds = config.getoption("timeout", None) or config.getini("timeout")
        kwargs = {}
    if seconds and float(seconds) > 0:
        item.add_marker(pytest.mark.timeout(float(seconds) + STACK_START_SECONDS, **kwargs), append=False)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated SQLite metadata DB in the private Airflow home."""
    subprocess.run([AIRFLOW, "db", "migrate"], check=True, capture_output=True, text=True)
    return _HOME / "airflow.db"


@dataclass
class DagRunResult:
    """What one ``airflow dags test`` run left behind: its output, task states and XComs."""

    returncode: int
    output: str
    run_id: str
    states: dict[str, str] = field(default_factory=dict)
    db: Path | None = None
    dag_id: str = ""

    def stored_text(self) -> str:
        """Every XCom value and rendered template field of this run, as stored: to search for secrets."""
        assert self.db is not None
        with sqlite3.connect(self.db) as conn:
            xcoms = conn.execute(
                "SELECT value FROM xcom WHERE dag_id=? AND run_id=?", (self.dag_id, self.run_id)
            ).fetchall()
            rendered = conn.execute(
                "SELECT rendered_fields FROM rendered_task_instance_fields WHERE dag_id=? AND run_id=?",
                (self.dag_id, self.run_id),
            ).fetchall()
        assert xcoms and rendered, "nothing stored for this run"
        return "\n".join(str(v) for (v,) in xcoms + rendered)

    def xcom(self, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        assert self.db is not None
        with sqlite3.connect(self.db) as conn:
            row = conn.execute(
                "SELECT value FROM xcom WHERE dag_id=? AND run_id=? AND task_id=? AND key=? AND map_index=?",
                (self.dag_id, self.run_id, task_id, key, map_index),
            ).fetchone()
        if row is None:
            return None
        value = json.loads(row[0])
        return json.loads(value) if isinstance(value, str) and value[:1] in "[{" else value


@pytest.fixture(scope="session")
def run_dag(airflow_db: Path):
    """Run a DAG through ``airflow dags test``; returns a ``DagRunResult``.

    DAGs come from tests/dags unless ``dags_folder`` says otherwise; ``env`` is added to the
    command's environment (connections as ``AIRFLOW_CONN_*``, for example).
    """

    def _run(
        dag_id: str,
        conf: dict[str, Any] | None = None,
        timeout: float = 240,
        env: dict[str, str] | None = None,
        dags_folder: Path | None = None,
    ) -> DagRunResult:
        cmd = [AIRFLOW, "dags", "test", dag_id]
        if conf:
            cmd += ["--conf", json.dumps(conf)]
        run_env = {**os.environ, **(env or {})}
        if dags_folder is not None:
            run_env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags_folder)
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=_HOME,
            env=run_env,
            preexec_fn=die_with_parent,  # the run (and the job it cancels on SIGTERM) ends with this worker
        )
        return collect_run(airflow_db, dag_id, proc.returncode, proc.stdout + proc.stderr)

    return _run


def collect_run(db: Path, dag_id: str, returncode: int, output: str) -> DagRunResult:
    """Read the newest run of ``dag_id`` and its task states from the metadata DB."""
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT run_id FROM dag_run WHERE dag_id=? ORDER BY id DESC LIMIT 1", (dag_id,)
        ).fetchone()
        assert row, f"no run of {dag_id} was recorded; output:\n{output[-4000:]}"
        run_id = row[0]
        states = {
            (task_id if map_index < 0 else f"{task_id}[{map_index}]"): state
            for task_id, map_index, state in conn.execute(
                "SELECT task_id, map_index, state FROM task_instance WHERE dag_id=? AND run_id=?",
                (dag_id, run_id),
            )
        }
    return DagRunResult(returncode, output, run_id, states, db, dag_id)


@pytest.fixture(scope="session")
def mlflow_uri(tmp_path_factory) -> str:
    """A real MLflow tracking server on loopback for the whole session: under pytest-xdist, one for
    all the workers (``shared_mlflow_server``; tests name their experiments and runs uniquely)."""
    from tests.services import mlflow_server, shared_mlflow_server

    shared = os.environ.get(SHARED_SERVERS)
    if shared and os.environ.get("PYTEST_XDIST_WORKER"):
        yield shared_mlflow_server(Path(shared), owner=os.getppid())  # the worker's parent: the controller
        return
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as uri:
        yield uri


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory) -> str:
    """moto's S3 server on loopback for the whole session; credentials are moto's test ones."""
    from tests.services import moto_s3_server

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with moto_s3_server(tmp_path_factory.mktemp("moto")) as endpoint:
        yield endpoint
