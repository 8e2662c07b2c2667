"""Jobs the cluster ends are resubmitted by the task, resumed from their checkpoint, without a retry.

On a private multi-node cluster (two slurmd in network namespaces, partitions ``multi`` and
``urgent`` that preempts it; ``scripts/slurm/cluster.sh up --private --multinode``), the example
training (dags/jobs/train.py: a checkpoint every epoch) runs through ``TorchXOperator`` with
``retries=0`` (tests/dags/torchx_resubmit_dags.py):

- the node of a running job is taken down (``scontrol update ... state=down``): the job ends
  ``NODE_FAIL``, the task (deferred: the real triggerer) submits it again, the new job runs on the
  other node from the last checkpoint, the task succeeds on its first try; two jobs in ``sacct``;
- a higher-priority job preempts a running one (waiting in the worker): the same, ``PREEMPTED``;
- a job that exits 1, and one that hits its time limit, fail the task with one job each;
- a preempted job whose resubmission would bring the try's attempts together over ``max_cost`` is
  not resubmitted: the task fails with one job, naming what the first attempt spent.
- two jobs preempted together, each with a ``checkpoint`` artifact (tests/jobs/checkpoint_where_job.py):
  the one under the task's output roots (here its ``out`` argument) is handed to the next attempt, the
  one elsewhere (a file no argument names, as any job tracking to the store could record) is not:
  that attempt starts with no ``TORCHX_AIRFLOW_RESUME_FROM``, and the log says why.

Each test prints its figures (attempts, epochs resumed from, seconds lost) for docs/failure-behaviour.md.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore

from tests.polling import wait_until
from tests.slurm.accounting import jobs_named
from tests.slurm.conftest import REPO
from tests.slurm.private_cluster import PrivateSlurm, private_slurm
from tests.stack import AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]
JOB = "train-0"  # the Slurm job name of dist.ddp's one replica of train.py
JOB_OF_USER_FAILURE = "python-0"  # utils.python's


@pytest.fixture(scope="module")
def cluster(slurm_cluster):
    with private_slurm("full", multinode=True) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def stack(cluster, tmp_path_factory):
    home = tmp_path_factory.mktemp("resubmit-airflow")
    stack = AirflowStack(
        home=home,
        dags_folder=REPO / "tests" / "dags",
        env_extra={
            "SLURM_CONF": cluster.slurm_conf,
            "AIRFLOW_CONN_TORCHX_MULTI": json.dumps(
                {"conn_type": "torchx", "extra": {"scheduler": "slurm", "cfg": {"partition": "multi"}}}
            ),
            "AIRFLOW_CONN_TORCHX_MULTI_PRICED": json.dumps(
                {
                    "conn_type": "torchx",
                    "extra": {
                        "scheduler": "slurm",
                        "cfg": {"partition": "multi"},
                        "prices": {"cpu_hour": 3600},
                    },
                }
            ),
            "AIRFLOW_CONN_RESUB_FS": json.dumps(
                {"conn_type": "torchx_fsspec", "extra": {"root": str(home / "store")}}
            ),
            "AIRFLOW__CORE__PARALLELISM": "4",
        },
    )
    with stack.running():
        yield stack


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("resubmit-data")
    subprocess.run(
        [sys.executable, str(REPO / "dags" / "jobs" / "prepare.py"), "--out", str(out), "--rows", "200"],
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    return str(out / "data.csv")


def jobs(cluster: PrivateSlurm, name: str, since: str) -> list[dict[str, str]]:
    """The cluster's jobs named ``name`` submitted since ``since``: id, state, nodes, exit code."""
    rows = jobs_named(name, since, "JobID,State,NodeList,ExitCode", slurm_conf=cluster.slurm_conf)
    return [dict(zip(("id", "state", "nodes", "exit_code"), row, strict=False)) for row in rows]


def checkpoint_epoch(store_root: Path, handle: str) -> int:
    artifact = FsspecStore(str(store_root)).artifacts(handle).get("checkpoint")
    return int((artifact.metadata or {}).get("epoch", 0)) if artifact is not None else 0


def running_with_checkpoint(stack: AirflowStack, dag_id: str, run_id: str, epoch: int) -> tuple[str, str]:
    """``(app_handle, node)`` once the task's job runs and recorded a checkpoint of ``epoch`` or later."""

    def ready() -> tuple[str, str] | None:
        handle = stack.xcom(dag_id, run_id, "train", "app_handle")
        if not handle or checkpoint_epoch(stack.home / "store", handle) < epoch:
            return None
        return handle, handle.rsplit("/", 1)[1]

    handle, job_id = wait_until(
        ready, f"a checkpoint of epoch {epoch} from {dag_id}", timeout=300, interval=1
    )
    return handle, job_id


def node_of(cluster: PrivateSlurm, job_id: str) -> str:
    return cluster.run(["squeue", "-h", "-j", job_id, "-o", "%N"]).stdout.strip()


def check_resumed(
    stack: AirflowStack,
    cluster: PrivateSlurm,
    dag_id: str,
    run_id: str,
    since: str,
    first_node: str,
    ended: str,
) -> dict[str, object]:
    """The task succeeded on try 1 with two jobs: the first ended ``ended`` on ``first_node``, the
    second completed elsewhere resuming from the first's checkpoint. Returns the figures."""
    assert stack.wait_run(dag_id, run_id, timeout=600) == "success"
    assert stack.ti(dag_id, run_id, "train")["try_number"] == 1  # no Airflow retry was involved
    rows = jobs(cluster, JOB, since)
    assert [r["state"].split()[0] for r in rows] == [ended, "COMPLETED"], rows
    assert rows[0]["nodes"] == first_node, rows
    if ended == "NODE_FAIL":  # a preempted job may run again where it was once the urgent one is done
        assert rows[1]["nodes"] != first_node, rows
    result = stack.xcom(dag_id, run_id, "train", "return_value")
    attempts = result["attempts"]
    assert [(a["attempt"], a["app_handle"].rsplit("/", 1)[1]) for a in attempts] == [
        (1, rows[0]["id"]),
        (2, rows[1]["id"]),
    ]
    assert attempts[0]["reason"] == ended and attempts[1]["state"] == "SUCCEEDED"
    assert attempts[1]["resumed_from"].endswith("checkpoint.pt")
    log = stack.log(dag_id, run_id, "train", 1)
    resumed = re.search(r"attempt 2: resuming from epoch (\d+) of (\S+)", log)
    assert resumed, log[-3000:]
    # the first job's last checkpoint is where the second started: no finished epoch is trained twice
    last_checkpoint = checkpoint_epoch(stack.home / "store", attempts[0]["app_handle"])
    assert int(resumed.group(1)) == last_checkpoint >= 3
    assert "epoch 1/" not in log.split("attempt 2:")[1]  # the second job did not start over
    assert re.search(rf"epoch {last_checkpoint + 1}/10 lr=", log.split("attempt 2:")[1])
    figures = {
        "attempts": len(attempts),
        "resumed_from_epoch": last_checkpoint,
        "epochs_trained_again": 0,
        "seconds_first_job": attempts[0]["elapsed_s"],
    }
    print(f"\n{dag_id} {ended}: {figures}")
    return figures


def since_now(cluster: PrivateSlurm) -> str:
    time.sleep(1)  # sacct's -S has second resolution
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def test_jobs_that_fail_for_their_own_reasons_are_not_resubmitted(stack, cluster):
    since = since_now(cluster)
    exit_1 = stack.trigger("resubmit_user_failure", {"exit_code": 1, "seconds": 2})
    timeout = stack.trigger("resubmit_user_failure", {"seconds": 150, "time": "1"})
    for run_id, state in ((exit_1, "FAILED"), (timeout, "TIMEOUT")):
        assert stack.wait_run("resubmit_user_failure", run_id, timeout=400) == "failed"
        log = stack.log("resubmit_user_failure", run_id, "run", 1)
        assert "--no-requeue" in log  # the request as submitted: Slurm leaves infrastructure ends to the task
        handle = stack.xcom("resubmit_user_failure", run_id, "run", "app_handle")
        assert [
            r["state"] for r in jobs(cluster, JOB_OF_USER_FAILURE, since) if handle.endswith(f"/{r['id']}")
        ] == [state], log[-3000:]
        assert "Resubmitting" not in log and state in log
    assert len(jobs(cluster, JOB_OF_USER_FAILURE, since)) == 2  # one job each, none resubmitted


def test_a_failed_node_costs_no_retry_and_the_job_resumes_on_the_other_node(stack, cluster, data, tmp_path):
    dag_id = "resubmit_train_deferred"
    since = since_now(cluster)
    run_id = stack.trigger(dag_id, {"data": data, "out": str(tmp_path), "epochs": 10, "epoch_seconds": 3})
    _, job_id = running_with_checkpoint(stack, dag_id, run_id, epoch=3)
    node = node_of(cluster, job_id)
    cluster.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=test-node-failure"])
    try:
        check_resumed(stack, cluster, dag_id, run_id, since, node, "NODE_FAIL")
    finally:
        cluster.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False)


def test_a_preempted_job_costs_no_retry_and_resumes_once_the_urgent_job_is_done(
    stack, cluster, data, tmp_path
):
    dag_id = "resubmit_train_sync"
    since = since_now(cluster)
    run_id = stack.trigger(dag_id, {"data": data, "out": str(tmp_path), "epochs": 10, "epoch_seconds": 3})
    _, job_id = running_with_checkpoint(stack, dag_id, run_id, epoch=3)
    node = node_of(cluster, job_id)
    # every CPU of both nodes, in the partition that preempts `multi`
    urgent = cluster.run(
        ["sbatch", "--parsable", "-o", "/dev/null", "-p", "urgent", "-N", "2", "-c", "2", "-J", "urgent"]
        + ["--wrap", "sleep 15"]
    ).stdout.strip()
    check_resumed(stack, cluster, dag_id, run_id, since, node, "PREEMPTED")
    assert [r["state"] for r in jobs(cluster, "urgent", since)] == ["COMPLETED"], urgent


def test_a_resubmission_that_would_bring_the_attempts_over_max_cost_is_not_submitted(
    stack, cluster, data, tmp_path
):
    """Each job is estimated at 20 under max_cost 30 (tests/dags/torchx_resubmit_dags.py): the first
    fits; once it ran 10 s or more (its actual cost, from sacct's allocation) and was preempted, a
    second would bring the try over 30, so nothing more is submitted and the task fails."""
    dag_id = "resubmit_train_capped"
    since = since_now(cluster)
    run_id = stack.trigger(dag_id, {"data": data, "out": str(tmp_path), "epochs": 10, "epoch_seconds": 3})
    running_with_checkpoint(stack, dag_id, run_id, epoch=3)
    cluster.run(
        ["sbatch", "--parsable", "-o", "/dev/null", "-p", "urgent", "-N", "2", "-c", "2", "-J", "urgent"]
        + ["--wrap", "sleep 15"]
    )
    assert stack.wait_run(dag_id, run_id, timeout=600) == "failed"
    assert stack.ti(dag_id, run_id, "train")["try_number"] == 1
    assert [r["state"].split()[0] for r in jobs(cluster, JOB, since)] == ["PREEMPTED"]
    log = stack.log(dag_id, run_id, "train", 1)
    spent = re.search(r"plus (\d+\.\d+) USD already spent by this try's earlier attempts", log)
    assert spent, log[-3000:]
    assert float(spent.group(1)) >= 18.0  # at least 9 s of 2 allocated CPUs at 1 per CPU-second
    assert "Submitted TorchX app" in log and log.count("Submitted TorchX app") == 1


def test_only_a_checkpoint_under_the_output_roots_is_handed_to_the_next_attempt(stack, cluster, tmp_path):
    """One DAG, two runs preempted together by one urgent job: the job that recorded its checkpoint in
    its output root (the directory its ``out`` argument names) resumes from it; the one whose artifact names a
    file beside it, which no argument names, starts fresh. Each attempt wrote what it was given."""
    dag_id, started = "resubmit_checkpoint_where", time.monotonic()
    since = since_now(cluster)
    outs = {where: tmp_path / where for where in ("inside", "outside")}
    for out in outs.values():
        out.mkdir()  # an existing directory is an output root itself (a missing one: its parent)
    runs = {where: stack.trigger(dag_id, {"out": str(out), "where": where}) for where, out in outs.items()}
    store = FsspecStore(str(stack.home / "store"))

    def recorded(run_id: str) -> str | None:
        handle = stack.xcom(dag_id, run_id, "run", "app_handle")
        artifact = store.artifacts(handle).get("checkpoint") if handle else None
        return str(artifact.path) if artifact is not None else None

    paths = {
        where: wait_until(partial(recorded, run_id), f"the {where} checkpoint", timeout=300, interval=1)
        for where, run_id in runs.items()
    }
    assert paths == {
        "inside": str(outs["inside"] / "checkpoint.pt"),
        "outside": str(tmp_path / "outside-elsewhere" / "checkpoint.pt"),
    }
    cluster.run(  # every CPU of both nodes, in the partition that preempts `multi`
        ["sbatch", "--parsable", "-o", "/dev/null", "-p", "urgent", "-N", "2", "-c", "2", "-J", "urgent"]
        + ["--wrap", "sleep 5"]
    )
    handed_on = {"inside": paths["inside"], "outside": None}
    for where, run_id in runs.items():
        assert stack.wait_run(dag_id, run_id, timeout=400) == "success"
        log = stack.log(dag_id, run_id, "run", 1)
        attempts = stack.xcom(dag_id, run_id, "run", "return_value")["attempts"]
        assert [a.get("reason") for a in attempts] == ["PREEMPTED", None], attempts
        assert attempts[1]["state"] == "SUCCEEDED", attempts
        assert attempts[1]["resumed_from"] == handed_on[where], log[-3000:]
        # what the second job found in its environment, as it wrote it
        seen = json.loads((outs[where] / "seen-2.json").read_text())
        assert seen == {"attempt": "2", "resume_from": handed_on[where]}, log[-3000:]
        assert f"attempt 2: TORCHX_AIRFLOW_RESUME_FROM={handed_on[where]!r}" in log
    log = stack.log(dag_id, runs["outside"], "run", 1)
    refused = next(
        (line for line in log.splitlines() if "not under the task's output roots" in line), log[-3000:]
    )
    assert repr(paths["outside"]) in refused and str(outs["outside"]) in refused, refused
    assert "from the start: its 'checkpoint' artifact is outside the task's output roots" in log
    assert "resuming from" not in log
    assert f"resuming from {paths['inside']}" in stack.log(dag_id, runs["inside"], "run", 1)
    states = sorted(r["state"].split()[0] for r in jobs(cluster, JOB_OF_USER_FAILURE, since))
    assert states == ["COMPLETED", "COMPLETED", "PREEMPTED", "PREEMPTED"]
    print(f"\n{dag_id}: inside resumed, outside fresh, {time.monotonic() - started:.1f} s")
