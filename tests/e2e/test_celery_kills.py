"""A worker going away is not a user's kill: on the stack of `make up EXECUTOR=celery` (two Celery
workers, one task slot each), the signals deployments deliver reach a task that waits for a Slurm
job, and the job is never cancelled: the retry reattaches to it and the task succeeds.

- SIGTERM to the task's supervisor process (the KubernetesExecutor's pod termination: Airflow
  forwards it to the task, which runs ``on_kill``);
- SIGTERM to the process group of one Celery worker (``systemctl stop``, a container stop with an
  init), while the task waits in the worker, and while a deferred task resumes on that worker.

Each test counts the stack's jobs in ``sacct`` (by work dir: this stack's home): exactly one for the
task, COMPLETED, none CANCELLED.

Then a sweep (``celery_sweep``: 9 configurations, rungs at 1, 3 and 9 epochs) on the Slurm cluster's
two nodes, whose worker is SIGKILLed while two segments of a rung run: the sweep finishes as it
would have, with one job per segment.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.parse
from pathlib import Path

import pytest

from tests.e2e.test_celery_rest import (
    WORKERS,
    _handle,
    _job_id,
    _tis,
    celery_airflow,
)
from tests.faults import CommandFaults
from tests.polling import wait_until
from tests.slurm.accounting import job_records, job_state, jobs_from
from tests.slurm.conftest import slurm_cluster  # noqa: F401 - every app runs on Slurm here
from tests.slurm.test_slurm_multinode import multinode_absent
from tests.stack import TERMINAL_RUN_STATES, AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]  # a whole stack, then Slurm jobs


@pytest.fixture(scope="module")
def faults(tmp_path_factory) -> CommandFaults:
    return CommandFaults(tmp_path_factory.mktemp("kill-faults"))


@pytest.fixture(scope="module")
def stack(slurm_cluster, faults, tmp_path_factory):  # noqa: F811
    with celery_airflow(tmp_path_factory, PATH=faults.path(os.environ["PATH"])) as stack:
        yield stack


@pytest.fixture(autouse=True)
def _disarm(faults):
    faults.clear()
    yield
    faults.clear()


def _tries(stack: AirflowStack, dag_id: str, run: str) -> list[dict]:
    path = f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run)}/taskInstances/train/tries"
    return stack.api("GET", path)["task_instances"]


def _task_process(ti_id: str) -> int:
    """The pid of the task process (``airflow worker -- <ti id>``) of a task instance."""
    out = subprocess.run(
        ["pgrep", "-f", f"^airflow worker -- {ti_id}"], capture_output=True, text=True
    ).stdout
    pids = [int(pid) for pid in out.split()]
    assert len(pids) == 1, f"task processes of {ti_id}: {pids}"
    return pids[0]


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _running_train(stack: AirflowStack, dag_id: str, run: str) -> tuple[dict, str]:
    """``train``'s task instance once its Slurm job runs, and its app handle."""
    ti = stack.wait_ti(dag_id, run, "train", ("running",), timeout=300)
    handle = wait_until(lambda: _handle(stack, dag_id, run, "train"), "train's app_handle", 120)
    wait_until(lambda: job_state(handle).startswith("RUNNING"), f"{handle} RUNNING", 120)
    return ti, handle


def _assert_one_completed_job_and_a_reattaching_retry(
    stack: AirflowStack, dag_id: str, run: str, handle: str, before: set[str]
) -> list[dict]:
    assert stack.wait_run(dag_id, run, timeout=300) == "success"
    tries = _tries(stack, dag_id, run)
    assert [t["try_number"] for t in tries] == [1, 2] and tries[-1]["state"] == "success", tries
    prepare = _handle(stack, dag_id, run, "prepare")
    jobs = {job: s for job, s in jobs_from(stack.home).items() if job not in before}
    assert sorted(jobs) == sorted([_job_id(prepare), _job_id(handle)]), jobs  # train's job: exactly one
    assert jobs[_job_id(handle)] == "COMPLETED", jobs  # never CANCELLED
    first = stack.log(dag_id, run, "train", 1)
    assert f"not cancelling TorchX app {handle}: the task instance is still 'running'" in first
    assert "left running for the next try to reattach" in first
    retry = stack.log(dag_id, run, "train", 2)
    assert "Submitted TorchX app" not in retry
    assert stack.xcom(dag_id, run, "train", "return_value")["app_handle"] == handle
    return tries


def _assert_retry_took_over(retry: str, handle: str) -> None:
    """The retry reattached to the job, or (when the 30 s job ended before the retry started: the
    stopped worker's shutdown and the requeue take their time) took its result without submitting."""
    reattached = f"Reattached to TorchX app {handle} from an earlier try" in retry
    took_result = "skipping resubmission" in retry and f"TorchX app {handle} is SUCCEEDED" in retry
    assert reattached or took_result, retry[-3000:]


def test_sigterm_to_the_task_supervisor_leaves_the_job_for_the_retry(stack):
    dag_id = "celery_reattach"
    before = set(jobs_from(stack.home))
    run = stack.trigger(dag_id, {"seconds": 30})
    ti, handle = _running_train(stack, dag_id, run)
    supervisor = _parent(_task_process(ti["id"]))
    os.kill(supervisor, signal.SIGTERM)  # what the kubelet sends a pod's process

    _assert_one_completed_job_and_a_reattaching_retry(stack, dag_id, run, handle, before)
    _assert_retry_took_over(stack.log(dag_id, run, "train", 2), handle)


def test_stopping_a_workers_process_group_leaves_the_job_and_the_other_worker_reattaches(stack):
    dag_id = "celery_reattach"
    before = set(jobs_from(stack.home))
    run = stack.trigger(dag_id, {"seconds": 30})
    ti, handle = _running_train(stack, dag_id, run)
    stopped = ti["hostname"]
    (other,) = set(WORKERS) - {stopped}
    stack.script("stop", WORKERS[stopped])  # SIGTERM to the worker's process group, as systemd does
    try:
        tries = _assert_one_completed_job_and_a_reattaching_retry(stack, dag_id, run, handle, before)
    finally:
        stack.script("start", WORKERS[stopped])
    assert [t["hostname"] for t in tries] == [stopped, other]
    _assert_retry_took_over(stack.log(dag_id, run, "train", 2), handle)


def test_stopping_the_worker_a_deferred_task_resumes_on_leaves_the_job_for_the_retry(stack, faults):
    dag_id = "celery_reattach_deferred"
    before = set(jobs_from(stack.home))
    run = stack.trigger(dag_id, {"seconds": 12})
    stack.wait_ti(dag_id, run, "train", ("deferred",), timeout=300)
    handle = wait_until(lambda: _handle(stack, dag_id, run, "train"), "train's app_handle", 120)
    faults.hold_tasks(120)  # the resume's first query of Slurm waits: the task is caught resuming
    wait_until(lambda: any(c.startswith("held") for c in faults.calls()), "the resume querying Slurm", 180)
    ti = stack.ti(dag_id, run, "train")
    assert ti["state"] == "running" and ti["hostname"] in WORKERS, ti
    stopped = ti["hostname"]
    (other,) = set(WORKERS) - {stopped}
    stack.script("stop", WORKERS[stopped])
    faults.clear()
    try:
        tries = _assert_one_completed_job_and_a_reattaching_retry(stack, dag_id, run, handle, before)
    finally:
        stack.script("start", WORKERS[stopped])
    assert [t["hostname"] for t in tries][-1] == other


# A sweep on Slurm's two nodes, a worker SIGKILLed while a rung's segments run (celery_sweep in
# tests/dags: 9 configurations, rungs at 1, 3 and 9 epochs; each segment a job of 2 CPUs in the
# partition ``multi``, whose two nodes hold one each). The trials' loss curves make the choices known:
# after one epoch t7 (lr 0.1, width 16), t4 (0.03, 16) and t3 (0.03, 8) lead; after three, t4.
SWEEP = "celery_sweep"
SWEEP_CHOICES = [[f"t{i}" for i in range(9)], ["t3", "t4", "t7"], ["t4"]]


def _mapped(stack: AirflowStack, dag_id: str, run: str, task_id: str) -> list[dict]:
    """The expanded task instances of a mapped task (none before its plan ran)."""
    path = f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run)}/taskInstances/{task_id}/listMapped"
    try:
        tis = stack.api("GET", path)["task_instances"]
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        return []
    return [ti for ti in tis if ti["map_index"] >= 0]


def _mapped_tries(stack: AirflowStack, dag_id: str, run: str, task_id: str, map_index: int) -> list[dict]:
    path = f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run)}/taskInstances/{task_id}/{map_index}/tries"
    return stack.api("GET", path)["task_instances"]


def _held_segments(stack: AirflowStack, run: str) -> list[tuple[dict, str]]:
    """Rung 1's segments running in a worker whose Slurm job runs (held at its gate), with their
    handles, once both workers run one."""
    state = stack.run_state(SWEEP, run)
    if state in TERMINAL_RUN_STATES:
        raise AssertionError(f"{SWEEP} run {run} ended ({state}) before a segment of rung 1 was held")
    held = []
    for ti in _mapped(stack, SWEEP, run, "sweep.rung_1"):
        if ti["state"] != "running" or ti["hostname"] not in WORKERS:
            continue
        handle = _handle(stack, SWEEP, run, "sweep.rung_1", ti["map_index"])
        if handle and job_state(handle).startswith("RUNNING"):
            held.append((ti, handle))
    return held if len(held) == len(WORKERS) else []


def _reattached(stack: AirflowStack, run: str, map_index: int, handle: str) -> bool:
    tries = _mapped_tries(stack, SWEEP, run, "sweep.rung_1", map_index)
    if not any(t["try_number"] == 2 and t["state"] == "running" for t in tries):
        return False
    retry = stack.log(SWEEP, run, "sweep.rung_1", 2, map_index)
    assert "Submitted TorchX app" not in retry, retry[-3000:]  # a second job for the segment
    return f"Reattached to TorchX app {handle} from an earlier try" in retry


def test_a_sweep_on_two_slurm_nodes_survives_a_worker_sigkilled_mid_rung_with_one_job_per_segment(
    stack, tmp_path
):
    reason = multinode_absent()
    if reason:
        pytest.skip(reason)
    nodes = set(
        subprocess.run(
            ["sinfo", "-h", "-N", "-p", "multi", "-o", "%N"], capture_output=True, text=True
        ).stdout.split()
    )
    out = tmp_path / "sweep"
    hold = out / "hold"
    hold.mkdir(parents=True)
    for trial in SWEEP_CHOICES[0]:  # every segment of rung 1 runs until the test lets it end
        (hold / f"{trial}-r1").touch()
    before = set(jobs_from(stack.home))
    run = stack.trigger(SWEEP, {"out": str(out)})
    killed = None
    try:
        held = wait_until(
            lambda: _held_segments(stack, run), "rung 1's segments RUNNING on both workers", 600
        )
        planned = [p["trial"]["id"] for p in stack.xcom(SWEEP, run, "sweep.plan_1", "return_value")]
        # the winner's segment when it is held: rung 2 then continues from what its retry recorded
        victim, handle = next((h for h in held if planned[h[0]["map_index"]] == "t4"), held[0])
        index, killed = victim["map_index"], victim["hostname"]
        trial = planned[index]
        stack.script("stop", WORKERS[killed], "--kill")  # the whole worker: Celery, supervisor and task
        for gate in hold.iterdir():  # the rest of the rung goes on
            if gate.name != f"{trial}-r1":
                gate.unlink()
        stack.script("start", WORKERS[killed])
        killed = None
        # the heartbeat timeout fails try 1; try 2 finds the job still running and waits on it
        wait_until(lambda: _reattached(stack, run, index, handle), f"segment {trial} reattached", 300)
        assert job_state(handle).startswith("RUNNING")
        (hold / f"{trial}-r1").unlink()
        assert stack.wait_run(SWEEP, run, timeout=420) == "success"
    finally:
        shutil.rmtree(hold, ignore_errors=True)  # no job stays held, whatever happened
        if killed is not None:
            stack.script("start", WORKERS[killed])

    # the choices the loss curves make, and the winner's model after 9 epochs, resumed at 3
    plans = [stack.xcom(SWEEP, run, f"sweep.plan_{k}", "return_value") for k in range(3)]
    assert [[p["trial"]["id"] for p in plan] for plan in plans] == SWEEP_CHOICES
    results = [
        [stack.xcom(SWEEP, run, f"sweep.rung_{k}", "return_value", i) for i in range(len(plan))]
        for k, plan in enumerate(plans)
    ]
    assert all(r["state"] == "SUCCEEDED" for rung in results for r in rung)
    for k, (resumed_at, trained) in enumerate(((0, 1), (1, 2), (3, 6))):
        assert [(r["metadata"]["resumed_at"], r["metadata"]["epochs_trained"]) for r in results[k]] == [
            (resumed_at, trained)
        ] * len(plans[k])
    # the last segment continues t4's segment of rung 1 (the killed one, when it was held): its own record
    (last,) = plans[2]
    assert last["trial"]["source"] == results[1][SWEEP_CHOICES[1].index("t4")]["app_handle"]
    assert last["trial"]["resume_from"] == str(out / "t4" / "r1" / "checkpoint.json")
    assert results[2][0]["sources"] == [last["trial"]["source"]]
    assert stack.xcom(SWEEP, run, "sweep.promote", "return_value")["path"] == str(
        out / "t4" / "r2" / "model.txt"
    )

    # every task ran once but the killed segment, whose retry reattached to its one job
    tis = _tis(stack, SWEEP, run)
    assert len(tis) == 3 + 13 + 1 and {ti["state"] for ti in tis} == {"success"}, tis
    tries = {(ti["task_id"], ti["map_index"]): ti["try_number"] for ti in tis}
    assert tries.pop(("sweep.rung_1", index)) == 2
    assert set(tries.values()) == {1}, tries
    segment_tries = _mapped_tries(stack, SWEEP, run, "sweep.rung_1", index)
    assert [(t["try_number"], t["state"]) for t in segment_tries] == [(1, "failed"), (2, "success")]
    assert segment_tries[0]["hostname"] == victim["hostname"]
    assert f"Submitted TorchX app {handle}" in stack.log(SWEEP, run, "sweep.rung_1", 1, index)
    assert "Submitted TorchX app" not in stack.log(SWEEP, run, "sweep.rung_1", 2, index)
    assert results[1][index]["app_handle"] == handle

    # Slurm: one job per segment (its comment names it), COMPLETED, spread over both nodes
    handles = [
        _handle(stack, SWEEP, run, f"sweep.rung_{k}", i)
        for k, plan in enumerate(plans)
        for i in range(len(plan))
    ]
    jobs = {
        j: r for j, r in job_records(stack.home, ["State", "Comment", "NodeList"]).items() if j not in before
    }
    assert sorted(jobs) == sorted(_job_id(h) for h in handles), jobs
    assert {r["State"] for r in jobs.values()} == {"COMPLETED"}, jobs
    segments = sorted(r["Comment"].split()[0] for r in jobs.values())
    assert segments == sorted(
        f"celery-sweep:{t}-r{k}" for k, choice in enumerate(SWEEP_CHOICES) for t in choice
    )  # each segment once: 9 + 3 + 1 jobs
    assert {r["NodeList"] for r in jobs.values()} == nodes, jobs
