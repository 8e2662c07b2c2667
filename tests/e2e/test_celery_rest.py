"""Airflow scaled out: the stack of `make up EXECUTOR=celery` (scheduler, triggerer, API server, DAG
processor, Debian's redis-server as the broker and two `airflow celery worker`s), driven through its
REST API, with every TorchX app on the Slurm cluster.

``torchx_pipeline`` runs with its tasks spread over both workers and one Slurm job per task; then a
worker is SIGKILLed while its task waits for a Slurm job (``celery_reattach`` in tests/dags): the
retry runs on the other worker, reattaches to the same job, and lineage and XCom results are intact.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.mlflow_store import MlflowStore

from tests.polling import wait_until
from tests.services import free_port
from tests.slurm.accounting import job_state, jobs_from
from tests.slurm.conftest import slurm_cluster  # noqa: F401 - every app runs on Slurm here
from tests.stack import AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]  # a whole stack, then Slurm jobs
REPO = Path(__file__).resolve().parents[2]
DAG_FILES = (REPO / "dags" / "torchx_pipeline.py", REPO / "tests" / "dags" / "torchx_celery_dags.py")
HOST = socket.gethostname()
WORKERS = {f"worker-{n}@{HOST}": f"worker-{n}" for n in (1, 2)}  # task-instance hostname -> service
LRS = [0.15, 0.45]


def _distinct_free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def _consecutive_free_ports(count: int, avoid: set[int]) -> int:
    """The first of ``count`` consecutive free loopback ports, none of them in ``avoid``."""
    while True:
        base = free_port()
        ports = range(base, base + count)
        if base + count > 65535 or avoid & set(ports):
            continue
        sockets = []
        try:
            for port in ports:
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()


@pytest.fixture(scope="module")
def celery_stack(slurm_cluster, tmp_path_factory):  # noqa: F811
    """`scripts/airflow-stack.sh up` with EXECUTOR=celery on free loopback ports, stopped afterwards."""
    with celery_airflow(tmp_path_factory) as stack:
        yield stack


@contextlib.contextmanager
def celery_airflow(tmp_path_factory, **env: str) -> Iterator[AirflowStack]:
    """The Celery stack of this module (``env`` added to its services' environment), stopped after."""
    if shutil.which("redis-server") is None and os.geteuid() != 0:
        pytest.skip("redis-server is not installed and scripts/install-redis.sh needs root to install it")
    home = tmp_path_factory.mktemp("celery-airflow")
    dags = tmp_path_factory.mktemp("celery-dags")
    for dag_file in DAG_FILES:  # the example pipeline and the test DAG, in one DAG folder
        (dags / dag_file.name).symlink_to(dag_file)
    port, mlflow_port, redis_port = _distinct_free_ports(3)
    # worker-1, the triggerer and worker-2 serve their logs on three consecutive ports
    log_port = _consecutive_free_ports(3, {port, mlflow_port, redis_port})
    stack = AirflowStack(
        home=home,
        dags_folder=dags,
        port=port,
        log_port=log_port,
        env_extra={
            "EXECUTOR": "celery",
            "REDIS_PORT": str(redis_port),
            "CELERY_WORKERS": str(len(WORKERS)),
            # One task slot per worker: tasks queued together (the pipeline's two train tasks) land on
            # different workers, which is what spreading out is for.
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "1",
            "MLFLOW_PORT": str(mlflow_port),
            "TORCHX_PIPELINE_OUTPUT": str(home / "pipeline"),
            # a SIGKILLed worker's task is noticed after 20 s instead of 5 min
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
            **env,
        },
    )
    with stack.running():
        yield stack
    for port in (redis_port, *_worker_log_ports(stack)):  # `down` stopped the broker and the workers
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


def _worker_log_ports(stack: AirflowStack) -> tuple[int, int]:
    """worker-1 serves its logs on AIRFLOW_LOG_PORT, worker-2 two ports up (the triggerer between)."""
    return stack.log_port, stack.log_port + 2


# Slurm, seen through this stack's jobs only: every job it submits runs in its home (the services'
# working directory), which no other test or user shares.


def _job_id(app_handle: str) -> str:
    return app_handle.rsplit("/", 1)[1]


def _tis(stack: AirflowStack, dag_id: str, run: str) -> list[dict]:
    path = f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run)}/taskInstances"
    return stack.api("GET", path)["task_instances"]


def _execution_hosts(stack: AirflowStack, dag_id: str, run: str) -> dict[tuple[str, int], list[str]]:
    """(task_id, map_index) -> the hostname of every execution that started, in order.

    Airflow's audit log records each start (event "running") with the worker's hostname: a deferred
    task starts twice, once to submit and defer and once to resume, maybe on different workers.
    """
    query = urllib.parse.urlencode({"dag_id": dag_id, "run_id": run, "event": "running", "limit": 100})
    entries = stack.api("GET", f"/eventLogs?{query}&order_by=event_log_id")["event_logs"]
    hosts: dict[tuple[str, int], list[str]] = {}
    for entry in entries:
        host = json.loads(entry["extra"])["host_name"]
        hosts.setdefault((entry["task_id"], entry["map_index"]), []).append(host)
    return hosts


@pytest.fixture(scope="module")
def pipeline_run(celery_stack, tmp_path_factory):
    before = set(jobs_from(celery_stack.home))
    conf = {
        "learning_rates": LRS,
        "epochs": 9,
        "rows": 30,
        "scheduler": "slurm",
        "output_dir": str(tmp_path_factory.mktemp("celery-out")),
    }
    run = celery_stack.trigger("torchx_pipeline", conf)
    state = celery_stack.wait_run("torchx_pipeline", run, timeout=600)
    return celery_stack, run, state, before


def _handle(stack: AirflowStack, dag_id: str, run: str, task_id: str, map_index: int = -1) -> str:
    return stack.xcom(dag_id, run, task_id, "app_handle", map_index=map_index)


def test_each_worker_answers_as_its_own_celery_node_and_serves_logs_on_its_own_port(celery_stack):
    from celery import Celery

    broker = Celery(broker=f"redis://127.0.0.1:{celery_stack.env_extra['REDIS_PORT']}/0")
    replies = broker.control.ping(timeout=5.0)
    assert {name for reply in replies for name in reply} == set(WORKERS)
    for port in _worker_log_ports(celery_stack):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_the_pipeline_spreads_over_both_workers_with_one_slurm_job_per_task(pipeline_run):
    stack, run, state, before = pipeline_run
    assert state == "success"
    tis = _tis(stack, "torchx_pipeline", run)
    assert {ti["state"] for ti in tis} == {"success"}
    assert {ti["hostname"] for ti in tis} <= set(WORKERS)
    hosts = _execution_hosts(stack, "torchx_pipeline", run)
    # both workers ran the pipeline's tasks (which worker takes which depends on when a deferred
    # train task frees its slot: under load one worker may start both before the other asks)
    assert {host for started in hosts.values() for host in started} == set(WORKERS), hosts
    handles = [_handle(stack, "torchx_pipeline", run, "prepare")]
    handles += [_handle(stack, "torchx_pipeline", run, "train", i) for i in range(len(LRS))]
    handles.append(_handle(stack, "torchx_pipeline", run, "evaluate"))
    assert all(h.startswith("slurm://torchx/") for h in handles), handles
    jobs = {job: s for job, s in jobs_from(stack.home).items() if job not in before}
    assert sorted(jobs) == sorted(_job_id(h) for h in handles), jobs  # one job per task, no duplicate
    assert set(jobs.values()) == {"COMPLETED"}


def test_the_pipeline_lineage_and_results_with_tasks_on_two_workers(pipeline_run):
    stack, run, _, _ = pipeline_run
    prepare = _handle(stack, "torchx_pipeline", run, "prepare")
    train = sorted(_handle(stack, "torchx_pipeline", run, "train", i) for i in range(len(LRS)))
    evaluate = _handle(stack, "torchx_pipeline", run, "evaluate")
    mlflow_uri = f"http://127.0.0.1:{stack.env_extra['MLFLOW_PORT']}"
    stores = {"fsspec": FsspecStore(str(stack.home / "tracker")), "mlflow": MlflowStore(mlflow_uri, "torchx")}
    for name, store in stores.items():
        assert sorted(s.source_run_id for s in store.sources(evaluate)) == train, name
        for handle in train:
            assert [s.source_run_id for s in store.sources(handle)] == [prepare], name
    results = [stack.xcom("torchx_pipeline", run, "train", "return_value", i) for i in range(len(LRS))]
    assert sorted(r["metadata"]["lr"] for r in results) == LRS
    assert set(stack.xcom("torchx_pipeline", run, "evaluate", "return_value")["artifacts"]) == {
        "report",
        "best_model",
    }


def test_a_sigkilled_workers_task_is_retried_on_the_other_worker_and_reattaches(celery_stack):
    stack, dag_id = celery_stack, "celery_reattach"
    before = set(jobs_from(stack.home))
    run = stack.trigger(dag_id, {"seconds": 60})
    ti = stack.wait_ti(dag_id, run, "train", ("running",), timeout=300)
    handle = wait_until(lambda: _handle(stack, dag_id, run, "train"), "train's app_handle", 120, interval=1)
    wait_until(lambda: job_state(handle).startswith("RUNNING"), f"{handle} RUNNING", 120, interval=1)
    killed = ti["hostname"]
    assert killed in WORKERS, ti
    (other,) = set(WORKERS) - {killed}
    stack.script("stop", WORKERS[killed], "--kill")  # the whole worker: Celery, supervisor and task
    try:
        assert stack.wait_run(dag_id, run, timeout=480) == "success"
    finally:
        stack.script("start", WORKERS[killed])

    path = f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run)}/taskInstances/train/tries"
    tries = stack.api("GET", path)["task_instances"]
    assert [(t["try_number"], t["state"], t["hostname"]) for t in tries] == [
        (1, "failed", killed),
        (2, "success", other),
    ]
    prepare = _handle(stack, dag_id, run, "prepare")
    jobs = {job: s for job, s in jobs_from(stack.home).items() if job not in before}
    assert sorted(jobs) == sorted([_job_id(prepare), _job_id(handle)]), jobs  # train's job: exactly one
    assert jobs[_job_id(handle)] == "COMPLETED"
    log = stack.log(dag_id, run, "train", 2)
    assert f"Reattached to TorchX app {handle} from an earlier try" in log
    assert "Submitted TorchX app" not in log
    assert "[python/0] line 60/60" in log  # the job's output, followed by the retry to its end

    result = stack.xcom(dag_id, run, "train", "return_value")
    assert (result["app_handle"], result["state"], result["sources"]) == (handle, "SUCCEEDED", [prepare])
    assert result["metadata"]["rows"] == 25 and result["metadata"]["airflow_try_number"] == 2
    assert Path(result["artifacts"]["model"]["path"]).is_file()
    mlflow_uri = f"http://127.0.0.1:{stack.env_extra['MLFLOW_PORT']}"
    for store in (FsspecStore(str(stack.home / "tracker")), MlflowStore(mlflow_uri, "torchx")):
        assert [s.source_run_id for s in store.sources(handle)] == [prepare]
        assert store.metadata(handle)["rows"] == 25
