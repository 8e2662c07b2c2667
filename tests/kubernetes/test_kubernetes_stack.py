"""Waiting on Kubernetes that survives production, performed for real: a real Airflow (API server,
scheduler, DAG processor, two triggerers) whose tasks submit TorchX apps as Volcano Jobs to a private
test cluster (tests/kubernetes/private_cluster.py), so that stopping its API server disturbs no other
test.

- a person marks a task failed: its job is aborted (Volcano phase ``Aborted``), in the worker and
  deferred;
- a deploy's SIGTERM to the task's supervisor: the job is neither cancelled nor submitted again, the
  retry reattaches to it;
- a triggerer stalls and its trigger moves to the other one: the job is left alone, the wait
  completes there;
- the API server stops mid-wait: within the outage budget both kinds of wait go on; past a task's
  budget, the task fails saying so, its job untouched;
- a pod is evicted: the task resubmits the job itself (no retry), which resumes from its checkpoint;
- the taskflow pipeline (mapped ``@task.torchx`` tasks between classic ones), in the worker and
  deferred: lineage in the fsspec store, every replica's output in the task log.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from tests.e2e.test_celery_rest import _consecutive_free_ports
from tests.kubernetes.conftest import CFG, K8S_CONN
from tests.kubernetes.private_cluster import PrivateCluster, private_cluster
from tests.polling import wait_until
from tests.stack import AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]
DAGS = Path(__file__).resolve().parent / "dags"
HEARTBEAT_THRESHOLD = 6  # seconds without a triggerer heartbeat before its triggers move
OUTAGE_SECONDS = 25


@pytest.fixture(scope="module")
def cluster(k8s_cluster):  # the shared cluster's fixture: the first start on a machine builds the server
    with private_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def stack(cluster, tmp_path_factory):
    home = tmp_path_factory.mktemp("k8s-airflow")
    stack = AirflowStack(
        home=home,
        dags_folder=DAGS,
        log_port=_consecutive_free_ports(3, set()),  # the executor's, triggerer's, triggerer-2's
        env_extra={
            "KUBECONFIG": str(cluster.kubeconfig),
            "AIRFLOW_CONN_TORCHX_K8S": K8S_CONN,
            "AIRFLOW_CONN_TORCHX_K8S_TRACKED": json.dumps(
                {
                    "conn_type": "torchx",
                    "extra": {"scheduler": "kubernetes", "cfg": CFG, "trackers": ["k8s_fs"]},
                }
            ),
            "AIRFLOW_CONN_K8S_FS": json.dumps(
                {"conn_type": "torchx_fsspec", "extra": {"root": str(home / "store")}}
            ),
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": str(HEARTBEAT_THRESHOLD),
        },
    )
    with stack.running():
        yield stack


def wait_handle(stack: AirflowStack, dag_id: str, run: str, task_id: str = "run") -> str:
    return wait_until(lambda: stack.xcom(dag_id, run, task_id, "app_handle"), f"{run}'s app_handle", 120)


def wait_phase(cluster: PrivateCluster, handle: str, phases: tuple[str, ...], timeout: float = 60) -> float:
    """Seconds until the job of ``handle`` is in one of ``phases``."""
    start = time.monotonic()
    wait_until(lambda: cluster.phase(handle) in phases, f"{handle} in {phases}", timeout)
    return time.monotonic() - start


def wait_logged(stack: AirflowStack, dag_id: str, run: str, replica: int, line: str) -> None:
    """Until ``line`` of replica ``replica`` of role ``counter`` is in the task's log (after the pod
    log's timestamp)."""
    shown = re.compile(rf"\[counter/{replica}\] \S+ {re.escape(line)}$", re.M)
    log = lambda: stack.log(dag_id, run, "run", 1)  # noqa: E731
    wait_until(lambda: shown.search(log()), f"{line!r} in {run}'s log", 120, interval=1)


def wait_trigger_running(stack: AirflowStack) -> None:
    """Until a triggerer runs the one trigger of the stack (a trigger shows no Kubernetes log lines)."""
    wait_until(lambda: _trigger_owner(stack), "a triggerer running the trigger", 60)
    wait_until(lambda: _logged(stack, "Waiting for TorchX app"), "the trigger's first line", 60)


def job_name(handle: str) -> str:
    return handle.rsplit(":", 1)[1]


@pytest.mark.parametrize("dag_id", ["k8s_sync", "k8s_deferred"])
def test_marking_the_task_failed_aborts_its_job(stack, cluster, dag_id):
    run = stack.trigger(dag_id, {"seconds": 300})
    stack.wait_ti(dag_id, run, "run", ("deferred" if dag_id == "k8s_deferred" else "running",))
    handle = wait_handle(stack, dag_id, run)
    wait_phase(cluster, handle, ("Running",))
    if dag_id == "k8s_deferred":  # a trigger shows no Kubernetes log lines: its triggerer runs it
        wait_trigger_running(stack)
    else:
        wait_logged(stack, dag_id, run, 1, "line 1/300")  # the wait is under way
    stack.set_ti_state(dag_id, run, "run", "failed")
    # the triggerer notices a removed trigger at its own pace (tens of seconds on a loaded machine)
    wait_phase(cluster, handle, ("Aborted",), timeout=90)
    assert cluster.jobs()[job_name(handle)]["status"]["state"]["reason"] == "Aborted"


def _task_process(ti_id: str) -> int:
    out = subprocess.run(["pgrep", "-f", f"^airflow worker -- {ti_id}"], capture_output=True, text=True)
    pids = [int(pid) for pid in out.stdout.split()]
    assert len(pids) == 1, f"task processes of {ti_id}: {pids}"
    return pids[0]


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _tries(stack: AirflowStack, dag_id: str, run: str) -> list[dict]:
    path = f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run)}/taskInstances/run/tries"
    return stack.api("GET", path)["task_instances"]


def test_a_deploys_sigterm_leaves_the_job_and_the_retry_reattaches(stack, cluster):
    before = set(cluster.jobs())
    run = stack.trigger("k8s_sync", {"seconds": 30})
    ti = stack.wait_ti("k8s_sync", run, "run", ("running",))
    handle = wait_handle(stack, "k8s_sync", run)
    wait_phase(cluster, handle, ("Running",))
    os.kill(_parent(_task_process(ti["id"])), signal.SIGTERM)  # what the kubelet sends a pod's process

    assert stack.wait_run("k8s_sync", run, timeout=300) == "success"
    tries = _tries(stack, "k8s_sync", run)
    assert [t["try_number"] for t in tries] == [1, 2] and tries[-1]["state"] == "success", tries
    jobs = {name: job for name, job in cluster.jobs().items() if name not in before}
    assert list(jobs) == [job_name(handle)]  # exactly one job: never submitted again
    assert jobs[job_name(handle)]["status"]["state"]["phase"] == "Completed"  # never aborted
    first = stack.log("k8s_sync", run, "run", 1)
    assert f"not cancelling TorchX app {handle}: the task instance is still 'running'" in first
    retry = stack.log("k8s_sync", run, "run", 2)
    assert "Submitted TorchX app" not in retry
    reattached = f"Reattached to TorchX app {handle} from an earlier try" in retry
    took_result = "skipping resubmission" in retry and f"TorchX app {handle} is SUCCEEDED" in retry
    assert reattached or took_result, retry[-3000:]
    assert stack.xcom("k8s_sync", run, "run", "return_value")["app_handle"] == handle


def _trigger_owner(stack: AirflowStack) -> int | None:
    with sqlite3.connect(stack.home / "airflow.db") as db:
        owners = {row[0] for row in db.execute("SELECT triggerer_id FROM trigger").fetchall()}
    assert len(owners) <= 1, owners  # this module waits on one trigger at a time here
    return owners.pop() if owners else None


def _logged(stack: AirflowStack, text: str) -> bool:
    """Whether any log of the stack (services', tasks', triggers') holds ``text``."""
    for root in (stack.home / "stack", stack.home / "logs"):
        for path in root.rglob("*.log"):
            if text in path.read_text(errors="replace"):
                return True
    return False


def test_a_trigger_moved_off_a_stalled_triggerer_leaves_its_job_and_completes_on_the_other(stack, cluster):
    before = set(cluster.jobs())
    run = stack.trigger("k8s_deferred", {"seconds": 40})
    stack.wait_ti("k8s_deferred", run, "run", ("deferred",))
    handle = wait_handle(stack, "k8s_deferred", run)
    stalled = wait_until(lambda: _trigger_owner(stack), "the triggerer picking up the trigger", 60)
    wait_trigger_running(stack)
    stack.script("start", "triggerer-2")
    try:
        pgid = int((stack.home / "stack" / "triggerer.pid").read_text())
        os.killpg(pgid, signal.SIGSTOP)  # the whole triggerer: its supervisor and its trigger runner
        try:
            wait_until(
                lambda: _trigger_owner(stack) not in (None, stalled), "triggerer-2 taking the trigger", 90
            )
        finally:
            os.killpg(pgid, signal.SIGCONT)
        # Airflow runs on_kill on the resumed triggerer as for a person's kill; the trigger asks the
        # task instance's state, still deferred, and leaves the job alone
        wait_until(
            lambda: _logged(
                stack, f"not cancelling TorchX app {handle}: the task instance is still 'deferred'"
            ),
            "the trigger's verdict",
            60,
        )
        assert cluster.phase(handle) in ("Running", "Completed"), cluster.phase(handle)
        assert stack.wait_run("k8s_deferred", run, timeout=240) == "success"
    finally:
        stack.script("stop", "triggerer-2")
    assert stack.ti("k8s_deferred", run, "run")["try_number"] == 1
    jobs = {name: job for name, job in cluster.jobs().items() if name not in before}
    assert [(n, j["status"]["state"]["phase"]) for n, j in jobs.items()] == [(job_name(handle), "Completed")]


def test_an_api_server_outage_is_waited_out_within_the_budget_and_fails_clearly_past_it(stack, cluster):
    dags = ("k8s_sync", "k8s_deferred", "k8s_short_outage_budget")
    runs = {dag_id: stack.trigger(dag_id, {"seconds": 60}) for dag_id in dags}
    handles = {dag_id: wait_handle(stack, dag_id, run) for dag_id, run in runs.items()}
    for handle in handles.values():
        wait_phase(cluster, handle, ("Running",))
    for dag_id in ("k8s_sync", "k8s_short_outage_budget"):
        wait_logged(stack, dag_id, runs[dag_id], 0, "line 2/60")  # each wait has seen the job run
    stack.wait_ti("k8s_deferred", runs["k8s_deferred"], "run", ("deferred",))
    wait_trigger_running(stack)

    cluster.stop_api_server()
    try:
        time.sleep(OUTAGE_SECONDS)  # the outage itself: what the waits must live through
    finally:
        cluster.start_api_server()

    for dag_id in ("k8s_sync", "k8s_deferred"):
        run = runs[dag_id]
        state = stack.wait_run(dag_id, run, timeout=300)
        log = stack.log(dag_id, run, "run", 1)
        assert state == "success", log[-3000:]
        assert stack.ti(dag_id, run, "run")["try_number"] == 1, log[-3000:]  # the wait went on
        assert cluster.phase(handles[dag_id]) == "Completed"
        # logged once when the outage starts and once when it ends, not at every poll
        assert log.count("waiting the outage out") == 1, log[-3000:]
        assert log.count("answers again after") == 1, log[-3000:]
    short = runs["k8s_short_outage_budget"]
    assert stack.wait_run("k8s_short_outage_budget", short, timeout=120) == "failed"
    log = stack.log("k8s_short_outage_budget", short, "run", 1)
    assert re.search(r"has not answered for [\d.]+ s, more than outage_timeout \(8 s\)", log), log[-3000:]
    assert "The app itself was not touched" in log
    # the job was left to run: it ends on its own, not Aborted
    wait_phase(cluster, handles["k8s_short_outage_budget"], ("Completed",), timeout=120)


def _checkpoint_epoch(store: Path, handle: str) -> int:
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    artifact = FsspecStore(str(store)).artifacts(handle).get("checkpoint")
    return int((artifact.metadata or {}).get("epoch", 0)) if artifact is not None else 0


def test_an_evicted_pod_costs_no_retry_and_the_job_resumes_from_its_checkpoint(stack, cluster, tmp_path):
    subprocess.run(
        [sys.executable, str(REPO / "dags" / "jobs" / "prepare.py"), "--out", str(tmp_path), "--rows", "200"],
        check=True,
        capture_output=True,
    )
    before = set(cluster.jobs())
    conf = {"data": str(tmp_path / "data.csv"), "out": str(tmp_path / "out"), "epochs": 8, "epoch_seconds": 2}
    run = stack.trigger("k8s_resubmit_train", conf)
    handle = wait_handle(stack, "k8s_resubmit_train", run, "train")
    wait_until(lambda: _checkpoint_epoch(stack.home / "store", handle) >= 2, "a checkpoint of epoch 2", 240)
    namespace, name = handle.rsplit("/", 1)[1].split(":")
    cluster.evict(namespace, f"{name}-train-0-0")

    assert stack.wait_run("k8s_resubmit_train", run, timeout=400) == "success"
    assert stack.ti("k8s_resubmit_train", run, "train")["try_number"] == 1  # no Airflow retry
    result = stack.xcom("k8s_resubmit_train", run, "train", "return_value")
    attempts = result["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2] and attempts[0]["app_handle"] == handle
    assert attempts[0]["reason"] == "PodEvicted" and attempts[1]["state"] == "SUCCEEDED"
    assert attempts[1]["resumed_from"].endswith("checkpoint.pt")
    jobs = {n: j["status"]["state"]["phase"] for n, j in cluster.jobs().items() if n not in before}
    second = job_name(attempts[1]["app_handle"])
    assert jobs == {name: "Terminated", second: "Completed"}, jobs  # Volcano ended it; no restart
    log = stack.log("k8s_resubmit_train", run, "train", 1)
    resumed = re.search(r"attempt 2: resuming from epoch (\d+) of (\S+)", log)
    assert resumed, log[-3000:]
    after = log.split("attempt 2:")[1]
    assert int(resumed.group(1)) >= 2 and "epoch 1/" not in after  # the second job did not start over


@pytest.mark.parametrize("mode", ["sync", "deferred"])
def test_the_pipeline_runs_with_lineage_in_the_store_and_every_replicas_output(
    stack, cluster, tmp_path, mode
):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    dag_id = f"k8s_pipeline_{mode}"
    run = stack.trigger(dag_id, {"out": str(tmp_path), "who": "Kubernetes"})
    assert stack.wait_run(dag_id, run, timeout=600) == "success"
    xcom = lambda task_id, i=-1: stack.xcom(dag_id, run, task_id, "app_handle", map_index=i)  # noqa: E731
    prepare, trains, summary, join = (
        xcom("prepare"),
        [xcom("train", 0), xcom("train", 1)],
        xcom("summary"),
        xcom("join"),
    )
    for handle in (prepare, *trains, summary, join):
        assert handle.startswith("kubernetes://torchx/default:") and cluster.phase(handle) == "Completed"
    for i, lr in enumerate((0.1, 0.4)):  # what each job recorded through AppRun, under its handle
        result = stack.xcom(dag_id, run, "train", "return_value", map_index=i)
        assert result["metadata"]["lr"] == lr
        assert result["artifacts"]["model"]["path"] == str(tmp_path / f"model-{lr}.txt")
    store = FsspecStore(str(stack.home / "store"))
    for handle in (*trains, summary):
        assert [s.source_run_id for s in store.sources(handle)] == [prepare]
    assert sorted(s.source_run_id for s in store.sources(join)) == sorted([*trains, summary])
    log = stack.log(dag_id, run, "summary", 1)
    for replica in (0, 1):  # each pod's lines, through the API server's pod-log proxy, once
        assert len(re.findall(rf"\[summary/{replica}\] \S+ hello, Kubernetes!", log)) == 1, log[-3000:]
        assert len(re.findall(rf"\[summary/{replica}\] \S+ step 3/3", log)) == 1, log[-3000:]
