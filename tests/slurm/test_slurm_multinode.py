"""Multi-node Slurm: the test cluster's two compute nodes, each a ``slurmd`` in a network and UTS
namespace of this machine (scripts/slurm/nodes.sh), and TorchX apps spread over them.

On the cluster the tests use (the shared one, or the one ``SLURM_CONF`` names): the namespace nodes
idle in partition ``multi`` with addresses of their own, ``srun -N2`` on both, and through a real
Airflow the example DDP training (``dist.ddp -j 2x1``, gloo between the nodes) waiting in the
triggerer and in the worker, an app of two roles, and four ranks over two nodes. On private
clusters (tests/slurm/private_cluster.py), because they set a node down or preempt a job: the states
``sacct`` reports then, and the fallback to one node where no namespace can be made.

Without the namespace nodes (``cluster.sh up`` could not create them, or was told not to) the tests
that need them skip, saying why.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore

from tests.polling import wait_until
from tests.slurm.conftest import REPO
from tests.slurm.private_cluster import PrivateSlurm, private_slurm
from tests.stack import AirflowStack

pytestmark = pytest.mark.timeout(600)
DAG = "multinode"
RANK_LINE = re.compile(r"rank (\d)/(\d): (\d+) samples, backend gloo, device cpu, host (\S+)")
WHERE_LINE = re.compile(r"(\S+) rank=(\S+) local_rank=(\S+) host=(\S+)")


def slurm(cmd: Sequence[str], env: dict[str, str] | None = None) -> str:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=True, env=env).stdout


def multinode_absent(run=slurm) -> str | None:
    """Why the cluster has no two nodes in partition ``multi`` (None when it has them): the reason
    ``cluster.sh up`` wrote to ``$SLURM_STATE/multinode`` when it fell back to one node."""
    if len(set(run(["sinfo", "-h", "-N", "-p", "multi", "-o", "%N"]).split())) >= 2:
        return None
    config = run(["scontrol", "show", "config"])
    state_save = re.search(r"^StateSaveLocation\s*=\s*(\S+)", config, re.M)
    record = Path(state_save.group(1)).parent / "multinode" if state_save else None
    why = record.read_text().strip() if record and record.exists() else "no record of why"
    return (
        f"the Slurm cluster has no partition 'multi' with two nodes ({why}); scripts/slurm/cluster.sh up "
        "creates them as root where network namespaces can be made (ip netns add)"
    )


@pytest.fixture(scope="module")
def nodes(slurm_cluster) -> list[str]:
    """The namespace nodes of partition ``multi``; the test skips, saying why, without them."""
    reason = multinode_absent()
    if reason:
        pytest.skip(reason)
    return sorted(set(slurm(["sinfo", "-h", "-N", "-p", "multi", "-o", "%N"]).split()))


def test_namespace_nodes_idle_with_addresses_of_their_own(nodes):
    out = slurm(["sinfo", "-h", "-N", "-p", "multi", "-o", "%N %T %n %c %o"])
    facts = {name: rest for name, *rest in (line.split() for line in out.splitlines())}
    assert sorted(facts) == nodes
    for name, (state, hostname, cpus, _) in facts.items():
        assert (state, hostname, cpus) == ("idle", name, "2")
    addresses = {address for *_, address in facts.values()}
    assert len(addresses) == len(nodes) and not any(a.startswith("127.") for a in addresses)
    assert sorted(set(slurm(["sinfo", "-h", "-N", "-p", "urgent", "-o", "%N"]).split())) == nodes
    # this host's node stays alone in the default partition: every other test's jobs run there
    debug = slurm(["sinfo", "-h", "-N", "-p", "debug", "-o", "%N"]).split()
    assert debug == [socket.gethostname().split(".")[0]]
    assert slurm(["sinfo", "-h", "-o", "%P"]).split()[0] == "debug*"


def test_srun_runs_a_step_on_both_nodes(nodes):
    out = slurm(["srun", "-p", "multi", "-N2", "hostname"])
    assert sorted(out.split()) == nodes
    assert socket.gethostname() not in nodes  # the nodes' hostnames live in their own UTS namespaces


@pytest.fixture(scope="module")
def multinode_stack(nodes, tmp_path_factory) -> Iterator[AirflowStack]:
    """Airflow with the test DAGs; ``torchx_slurm`` tracks to a local fsspec store."""
    home = tmp_path_factory.mktemp("multinode-airflow")
    store = home / "store"
    conn = {"conn_type": "torchx", "extra": {"scheduler": "slurm", "trackers": ["mn_fs"]}}
    stack = AirflowStack(
        home=home,
        dags_folder=REPO / "tests" / "dags",
        env_extra={
            "AIRFLOW_CONN_TORCHX_SLURM": json.dumps(conn),
            "AIRFLOW_CONN_MN_FS": json.dumps({"conn_type": "torchx_fsspec", "extra": {"root": str(store)}}),
            "AIRFLOW__CORE__PARALLELISM": "4",
        },
    )
    with stack.running():
        yield stack


@pytest.fixture(scope="module")
def multinode_run(multinode_stack, tmp_path_factory):
    data = tmp_path_factory.mktemp("multinode-data")
    subprocess.run(
        [sys.executable, str(REPO / "dags" / "jobs" / "prepare.py"), "--out", str(data), "--rows", "60"],
        check=True,
        capture_output=True,
        cwd=data,
    )
    run = multinode_stack.trigger(DAG, {"data": str(data / "data.csv"), "out": str(data)})
    state = multinode_stack.wait_run(DAG, run, timeout=420)
    return multinode_stack, run, state


def components(app_handle: str) -> dict[str, str]:
    """``{job name: node}`` of every component of the Slurm job behind ``app_handle``."""
    job_id = app_handle.rsplit("/", 1)[1]
    out = slurm(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobName,State,NodeList"])
    rows = [line.split("|") for line in out.splitlines()]
    assert {state for _, state, _ in rows} == {"COMPLETED"}, rows
    return {name: node for name, _, node in rows}


def trigger_logs(stack: AirflowStack, run: str) -> set[str]:
    logs = stack.home / "logs" / f"dag_id={DAG}" / f"run_id={run}"
    return {p.relative_to(logs).parts[0] for p in logs.rglob("*.log.trigger.*.log")}


@pytest.mark.parametrize("wait", ["deferred", "worker"])
def test_ddp_ranks_on_both_nodes_through_airflow(multinode_run, nodes, wait):
    stack, run, state = multinode_run
    assert state == "success"
    task = f"ddp_{wait}"
    handle = stack.xcom(DAG, run, task, "app_handle")
    assert sorted(components(handle).values()) == nodes  # one replica per node
    log = stack.log(DAG, run, task, 1)
    ranks = {int(m[1]): (int(m[2]), int(m[3]), m[4]) for m in RANK_LINE.finditer(log)}
    assert len(RANK_LINE.findall(log)) == 2, log  # every rank's line, once
    assert sorted(ranks) == [0, 1] and {world for world, _, _ in ranks.values()} == {2}
    assert sorted(host for _, _, host in ranks.values()) == nodes
    assert "model loss=" in log
    triggered = f"Waiting for TorchX app {handle} in the triggerer" in log
    assert triggered == (wait == "deferred")
    assert (f"task_id={task}" in trigger_logs(stack, run)) == (wait == "deferred")
    # every rank recorded itself in the one run of the app
    store = FsspecStore(str(stack.home / "store"))
    md = store.metadata(handle)
    assert sorted([md["rank0_host"], md["rank1_host"]]) == nodes
    assert (md["rank0_samples"], md["rank1_samples"], md["world_size"]) == (30, 30, 2)
    job_id = handle.rsplit("/", 1)[1]
    assert [r for r in store.run_ids() if job_id in r] == [handle]


def test_two_roles_one_per_node(multinode_run, nodes):
    stack, run, _ = multinode_run
    handle = stack.xcom(DAG, run, "roles", "app_handle")
    placed = components(handle)
    assert sorted(placed) == ["mnrole_a-0", "mnrole_b-0"] and sorted(placed.values()) == nodes
    said = {m[1]: m[4] for m in WHERE_LINE.finditer(stack.log(DAG, run, "roles", 1))}
    assert said == {"mnrole_a": placed["mnrole_a-0"], "mnrole_b": placed["mnrole_b-0"]}


def test_four_ranks_over_two_nodes(multinode_run, nodes):
    stack, run, _ = multinode_run
    handle = stack.xcom(DAG, run, "ranks", "app_handle")
    assert sorted(components(handle).values()) == nodes
    lines = [m.groups() for m in WHERE_LINE.finditer(stack.log(DAG, run, "ranks", 1))]
    assert sorted(int(rank) for _, rank, _, _ in lines) == [0, 1, 2, 3]
    assert Counter(host for _, _, _, host in lines) == dict.fromkeys(nodes, 2)


# Disruptive: a private cluster with namespace nodes of its own.


@pytest.fixture(scope="module")
def private(slurm_cluster) -> Iterator[PrivateSlurm]:
    with private_slurm(multinode=True) as cluster:
        reason = multinode_absent(lambda cmd: cluster.run(cmd).stdout)
        if reason:
            pytest.skip(reason)
        yield cluster


def sbatch(cluster: PrivateSlurm, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        ["sbatch", "--parsable", "-o", "/dev/null", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {}), "SLURM_CONF": cluster.slurm_conf},
        cwd=cluster.state,
    )
    return proc.stdout.strip()


Row = tuple[str, str, str]


def rows(cluster: PrivateSlurm, job_id: str, duplicates: bool = False) -> list[Row]:
    """``(JobID, State, NodeList)`` of the job, of each component of a heterogeneous one; with
    ``duplicates`` also the records of its earlier runs (``sacct -D``: a requeued job's NODE_FAIL)."""
    cmd = ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,NodeList"]
    cmd += ["-D"] if duplicates else []
    fields = (line.split("|") for line in cluster.run(cmd).stdout.splitlines())
    return sorted((job, state, nodes) for job, state, nodes in fields)


def running(cluster: PrivateSlurm, job_id: str) -> list[Row]:
    def all_running() -> list[Row] | None:
        now = rows(cluster, job_id)
        return now if now and all(state == "RUNNING" for _, state, _ in now) else None

    return wait_until(all_running, f"job {job_id} running", timeout=60)


def settled(cluster: PrivateSlurm, job_id: str, count: int) -> list[Row]:
    """The job's ``sacct -D`` records once there are ``count`` of them and none is RUNNING."""

    def done() -> list[Row] | None:
        now = rows(cluster, job_id, duplicates=True)
        return now if len(now) == count and all(state != "RUNNING" for _, state, _ in now) else None

    return wait_until(done, f"job {job_id}: {count} records, none running", timeout=60)


def node_state(cluster: PrivateSlurm, node: str) -> str:
    return cluster.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"]).stdout.split()[0]


@contextlib.contextmanager
def node_down(cluster: PrivateSlurm, node: str) -> Iterator[None]:
    """``node`` set down for the block (it stays down: ReturnToService=1), then resumed and idle."""
    cluster.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=multinode-test"])
    try:
        yield
        assert node_state(cluster, node) == "down"
    finally:
        cluster.run(["scontrol", "update", f"nodename={node}", "state=resume"])
    wait_until(lambda: node_state(cluster, node) == "idle", f"{node} idle again", timeout=60)


HET = """#!/bin/bash
#SBATCH --job-name=mn_a-0 --requeue --ntasks-per-node=1 --cpus-per-task=2 --mem=512 -p multi
#SBATCH hetjob
#SBATCH --job-name=mn_b-0 --requeue --ntasks-per-node=1 --cpus-per-task=2 --mem=512 -p multi
srun sleep 300 : sleep 300
"""  # the shape of TorchX's batch script: one component per replica, each with --requeue


@pytest.fixture
def het_script(private: PrivateSlurm) -> str:
    path = private.state / "het.sh"
    path.write_text(HET)
    return str(path)


def test_node_down_ends_a_job_node_fail(private):
    job = sbatch(private, "-p", "multi", "-N2", "-c2", "--wrap", "srun sleep 300")
    both = f"{private.name}-n[1-2]"
    assert running(private, job) == [(job, "RUNNING", both)]
    with node_down(private, private.nodes[1]):
        assert settled(private, job, 1) == [(job, "NODE_FAIL", both)]  # ended, not requeued


def test_node_down_requeues_a_torchx_shaped_job_unless_no_requeue(private, het_script):
    """TorchX's --requeue outweighs JobRequeue=0: every component fails and is requeued under its id;
    SBATCH_NO_REQUEUE=1 in the submitter's environment outweighs the script's --requeue."""
    job = sbatch(private, het_script)
    placed = running(private, job)
    assert sorted(node for _, _, node in placed) == private.nodes
    failed = [(job_id, "NODE_FAIL", node) for job_id, _, node in placed]
    with node_down(private, private.nodes[1]):
        records = settled(private, job, 4)
    # both components, also the one on the node that did not fail; then pending again, same ids
    assert [r for r in records if r[1] == "NODE_FAIL"] == failed
    pending = [(f"{job}+0", "PENDING"), (f"{job}+1", "PENDING")]
    assert [r[:2] for r in records if r[1] != "NODE_FAIL"] == pending
    private.run(["scancel", job])

    job = sbatch(private, het_script, env={"SBATCH_NO_REQUEUE": "1"})
    placed = running(private, job)
    with node_down(private, private.nodes[1]):
        records = settled(private, job, 2)
    assert records == [(job_id, "NODE_FAIL", node) for job_id, _, node in placed]  # ended, not requeued


def test_urgent_preempts_multi(private, het_script):
    job = sbatch(private, het_script)
    placed = running(private, job)
    urgent = sbatch(private, "-p", "urgent", "-N1", "-c2", "--wrap", "sleep 300")
    running(private, urgent)
    # the whole heterogeneous job, also the component on the node urgent did not take; not requeued
    assert settled(private, job, 2) == [(job_id, "PREEMPTED", node) for job_id, _, node in placed]
    private.run(["scancel", urgent])


def test_fallback_to_one_node_says_why(slurm_cluster):
    cluster = PrivateSlurm(accounting="none", multinode=True)
    cluster.env["SLURM_MULTINODE"] = "0"  # what `up --single-node` asks; as when ip netns add fails
    try:
        out = cluster.up()
        assert "WARNING: no multi-node partitions" in out and "SLURM_MULTINODE=0" in out
        assert cluster.run(["sinfo", "-h", "-o", "%P"]).stdout.split() == ["debug*"]
        reason = multinode_absent(lambda cmd: cluster.run(cmd).stdout)
        assert reason is not None and "SLURM_MULTINODE=0 or --single-node asked for one node" in reason
        assert not Path(f"/run/netns/{cluster.name}-n1").exists()
    finally:
        cluster.down()
