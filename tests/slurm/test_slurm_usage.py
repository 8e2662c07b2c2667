"""Usage and cost on the real Slurm cluster through a real Airflow (tests/dags/torchx_usage_dags.py):
every task's ``usage`` equals ``sacct``'s own figures for its job (elapsed, CPU time and allocated
TRES per allocation and step, exactly; MaxRSS to the byte), for a wait in the worker, one in the
triggerer and a job that fails; the cost from the price table; the same in the tracker's metadata;
the lineage view's header sum equals the sum of its runs; the second run's estimate uses the first
run's elapsed time; and an estimate over ``max_cost`` submits nothing, for a classic and a
``@task.torchx`` task."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore

from tests.slurm import accounting
from tests.slurm.conftest import REPO
from tests.stack import AirflowStack
from torchx_airflow.schedulers.slurm import sacct_window

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
PRICES = {"cpu_hour": 0.05, "gpu_hour": {"default": 1.0}, "mem_gb_hour": 0.01, "currency": "USD"}
DAG = "tx_usage_slurm"


@pytest.fixture(scope="module")
def stack(slurm_cluster, tmp_path_factory):
    """Airflow whose ``torchx_usage_slurm`` connection has a price table and tracks to an fsspec store."""
    home = tmp_path_factory.mktemp("usage-airflow")
    conn = {"scheduler": "slurm", "trackers": ["usage_fs"], "prices": PRICES}
    stack = AirflowStack(
        home=home,
        dags_folder=REPO / "tests" / "dags",
        env_extra={
            "AIRFLOW_CONN_TORCHX_USAGE_SLURM": json.dumps({"conn_type": "torchx", "extra": conn}),
            "AIRFLOW_CONN_USAGE_FS": json.dumps(
                {"conn_type": "torchx_fsspec", "extra": {"root": str(home / "store")}}
            ),
            "AIRFLOW__CORE__PARALLELISM": "4",
        },
    )
    with stack.running():
        yield stack


@pytest.fixture(scope="module")
def usage_run(stack):
    run = stack.trigger(DAG)
    assert stack.wait_run(DAG, run, timeout=420) == "failed"  # "fail" exits 3
    states = {t: stack.ti(DAG, run, t)["state"] for t in ("sync", "deferred", "fail")}
    assert states == {"sync": "success", "deferred": "success", "fail": "failed"}
    return run


def sacct(job_id: str, *options: str) -> list[dict[str, str]]:
    """sacct's own rows for a job (its allocation, then its steps), as sacct prints them."""
    fields = ["JobID", "ElapsedRaw", "CPUTimeRAW", "TotalCPU", "AllocTRES", "MaxRSS", "State"]
    out = subprocess.run(
        ["sacct", "-P", "-n", *options, "-j", job_id, "-o", ",".join(fields)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [dict(zip(fields, line.split("|"), strict=True)) for line in out.splitlines()]


def tres(text: str) -> dict[str, float]:
    """sacct's AllocTRES as printed by default (``mem=1G``, ``mem=512M``): the test's own reading."""
    units = {"M": 1, "G": 1024, "T": 1024 * 1024}
    values: dict[str, float] = {}
    for item in filter(None, text.split(",")):
        name, _, amount = item.partition("=")
        values[name] = float(amount[:-1]) * units[amount[-1]] if name == "mem" else float(amount)
    return values


def total_cpu(text: str) -> float:
    minutes, _, seconds = text.rpartition(":")
    return round(int(minutes.split(":")[-1] or 0) * 60 + float(seconds), 3)


def assert_usage_is_sacct(usage: dict, job_id: str) -> None:
    """Every figure of ``usage`` against sacct's: elapsed and TRES exact, MaxRSS to the byte."""
    rows = {row["JobID"]: row for row in sacct(job_id)}
    raw = {row["JobID"]: row for row in sacct(job_id, "--noconvert")}  # MaxRSS in bytes
    allocation = rows[job_id]
    assert usage["source"] == "sacct"
    assert usage["elapsed_s"] == int(allocation["ElapsedRaw"]) > 0
    assert usage["cpu_time_s"] == total_cpu(allocation["TotalCPU"])
    assert usage["totals"]["cpu_hours"] == int(allocation["CPUTimeRAW"]) / 3600
    alloc = tres(allocation["AllocTRES"])
    assert usage["allocated"] == {
        "cpu": alloc["cpu"],
        "mem_mb": alloc["mem"],
        "gpu": {},
        "node": alloc["node"],
    }
    assert usage["totals"]["mem_gb_hours"] == alloc["mem"] / 1024 * int(allocation["ElapsedRaw"]) / 3600
    (job,) = usage["jobs"]
    assert job["job_id"] == job_id and job["cpu_time_alloc_s"] == int(allocation["CPUTimeRAW"])
    assert [step["job_id"] for step in job["steps"]] == [j for j in rows if j != job_id]
    for step in job["steps"]:
        row = rows[step["job_id"]]
        assert step["elapsed_s"] == int(row["ElapsedRaw"])
        assert step["cpu_time_s"] == total_cpu(row["TotalCPU"])
        step_tres = tres(row["AllocTRES"])
        assert (step["alloc_tres"]["cpu"], step["alloc_tres"]["mem_mb"]) == (
            step_tres["cpu"],
            step_tres["mem"],
        )
        max_rss = raw[step["job_id"]]["MaxRSS"]
        assert step["max_rss_mb"] == (int(max_rss) / 1024 / 1024 if max_rss else None)


def _job_id(handle: str) -> str:
    assert handle.startswith("slurm://torchx/")
    return handle.rsplit("/", 1)[1]


def test_usage_equals_sacct_for_waits_in_the_worker_and_the_triggerer(stack, usage_run):
    for task_id in ("sync", "deferred"):
        result = stack.xcom(DAG, usage_run, task_id, "return_value")
        assert_usage_is_sacct(result["usage"], _job_id(result["app_handle"]))
    # the long job ran past Slurm's 30 s sampling: its step has a peak, the short one's may not
    sync = stack.xcom(DAG, usage_run, "sync", "return_value")["usage"]
    assert sync["max_rss_mb"] is not None and sync["max_rss_mb"] > 100  # its 100 MB buffer
    assert sync["cpu_time_s"] >= 2.0  # the job burns 2 s of CPU time


def test_the_cost_prices_what_sacct_says_the_job_held(stack, usage_run):
    result = stack.xcom(DAG, usage_run, "sync", "return_value")
    totals = result["usage"]["totals"]
    actual = result["cost"]["actual"]
    assert actual["total"] == pytest.approx(totals["cpu_hours"] * 0.05 + totals["mem_gb_hours"] * 0.01)
    assert actual["source"] == "sacct" and result["cost"]["currency"] == "USD"


def test_the_failed_jobs_usage_is_in_the_trackers_metadata_and_its_error(stack, usage_run):
    handle = stack.xcom(DAG, usage_run, "fail", "app_handle")
    metadata = FsspecStore(str(stack.home / "store")).metadata(handle)
    assert_usage_is_sacct(metadata["torchx_usage"], _job_id(handle))
    assert metadata["torchx_usage"]["jobs"][0]["exit_code"] == "3:0"
    usage = metadata["torchx_usage"]
    log = stack.log(DAG, usage_run, "fail", 1)
    assert f"usage (sacct): elapsed {usage['elapsed_s']} s, CPU time {usage['cpu_time_s']} s" in log
    for task_id in ("sync", "deferred"):  # and the succeeded ones', the same as their results
        result = stack.xcom(DAG, usage_run, task_id, "return_value")
        assert (
            FsspecStore(str(stack.home / "store")).metadata(result["app_handle"])["torchx_usage"]
            == (result["usage"])
        )


def test_the_lineage_views_header_sum_is_the_sum_of_its_runs(stack, usage_run):
    graph = stack._request("GET", f"/torchx/api/lineage/{DAG}/{urllib.parse.quote(usage_run, safe='')}")
    own = {run["airflow"]["task_id"]: run for run in graph["runs"] if run["in_dag_run"]}
    assert set(own) == {"sync", "deferred"}  # a failed task pushes no run id: not a run of the view
    for task_id, run in own.items():
        usage = stack.xcom(DAG, usage_run, task_id, "return_value")["usage"]
        assert (run["usage"]["elapsed_s"], run["usage"]["cpu_hours"]) == (
            usage["elapsed_s"],
            usage["totals"]["cpu_hours"],
        )
    total = graph["usage_total"]
    assert total["runs_with_usage"] == 2
    for key in ("elapsed_s", "cpu_time_s", "cpu_hours", "mem_gb_hours"):
        assert total[key] == pytest.approx(sum(run["usage"][key] for run in own.values()), rel=1e-12)
    assert total["cost"] == {"USD": pytest.approx(sum(run["usage"]["cost"] for run in own.values()))}


def test_the_second_runs_estimate_uses_the_first_runs_sacct_elapsed(stack):
    dag = "tx_usage_slurm_repeat"
    first = stack.trigger(dag)
    assert stack.wait_run(dag, first, timeout=300) == "success"
    second = stack.trigger(dag)
    assert stack.wait_run(dag, second, timeout=300) == "success"
    elapsed = stack.xcom(dag, first, "again", "return_value")["usage"]["elapsed_s"]
    assert elapsed >= 3  # the job sleeps 3 s
    estimate = stack.xcom(dag, second, "again", "return_value")["cost"]["estimate"]
    assert estimate["duration_s"] == elapsed
    assert estimate["total"] == pytest.approx(elapsed / 3600 * (1 * 0.05 + 1 * 0.01))  # 1 CPU, 1 GB
    assert estimate["duration_source"] == f"elapsed of the last successful run, DAG run {first!r} (sacct)"


def test_an_estimate_over_max_cost_submits_nothing(stack):
    dag = "tx_usage_slurm_over_budget"
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    run = stack.trigger(dag)
    assert stack.wait_run(dag, run, timeout=300) == "failed"
    for task_id in ("too_dear", "too_dear_decorated"):
        assert stack.ti(dag, run, task_id)["state"] == "failed"
        assert stack.xcom(dag, run, task_id, "app_handle") is None
        log = stack.log(dag, run, task_id, 1)
        # 8 CPUs and 16 GB for an hour: 8 x 0.05 + 16 x 0.01 = 0.56 USD
        assert "the estimated cost 0.5600 USD is over max_cost=0.01 USD, so nothing was submitted" in log
        assert "Submitted TorchX app" not in log
    # the apps' jobs would be named after their roles: Slurm accounted none of them
    names = [row[0] for row in accounting.sacct("-a", *sacct_window(since), "-o", "JobName")]
    assert not [name for name in names if name.startswith("too-dear")], names


def test_gpus_by_type_from_a_cluster_with_gpus(slurm_cluster, tmp_path, monkeypatch):
    """A private cluster whose node has two a100 GPUs (``cluster.sh --gpus``): the job's GPUs in its
    usage by type, as sacct records them, and priced at the a100 price."""
    from torchx.specs import AppDef, Resource, Role

    from tests.slurm.private_cluster import private_slurm
    from torchx_airflow.hooks.torchx import TorchXHook
    from torchx_airflow.policies.cost.pricing import actual_cost
    from torchx_airflow.settings.prices import PriceTable

    burn = str(REPO / "tests" / "dags" / "jobs" / "burn.py")
    role = Role("trainer", image=str(tmp_path), entrypoint="python", args=[burn, "--sleep", "3"])
    role.resource = Resource(cpu=2, gpu=2, memMB=1024)
    monkeypatch.chdir(tmp_path)  # the job's work dir, where its output files go
    conn = {"conn_type": "torchx", "extra": {"scheduler": "slurm"}}
    monkeypatch.setenv("AIRFLOW_CONN_TORCHX_GPUS", json.dumps(conn))
    with private_slurm(gpus="a100:2") as cluster:
        monkeypatch.setenv("SLURM_CONF", cluster.slurm_conf)
        hook = TorchXHook("torchx_gpus")
        try:
            handle = hook.schedule(hook.dryrun(AppDef("gpus", roles=[role])))
            status = hook.wait(handle, wait_interval=1)
            assert status is not None and status.state.name == "SUCCEEDED", status
            usage = hook.usage(handle)
        finally:
            hook.close()
        job_id = _job_id(handle)
        row = cluster.run(["sacct", "-P", "-n", "-X", "-j", job_id, "-o", "ElapsedRaw,AllocTRES"]).stdout
    elapsed, alloc = row.strip().split("|")
    assert "gres/gpu:a100=2" in alloc.split(",") and "gres/gpu=2" in alloc.split(",")
    assert usage is not None and usage["allocated"]["gpu"] == {"a100": 2}
    assert usage["elapsed_s"] == int(elapsed) >= 3
    assert usage["totals"]["gpu_hours"] == {"a100": 2 * int(elapsed) / 3600}
    prices = PriceTable(gpu_hour={"a100": 2.5, "default": 1.0})
    cost = actual_cost(usage, prices)
    assert cost is not None and cost["gpu"] == {"a100": pytest.approx(2 * int(elapsed) / 3600 * 2.5)}
