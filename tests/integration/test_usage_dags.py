"""Usage and cost through real ``airflow dags test`` runs of real local_cwd jobs (tests/dags/
torchx_usage_dags.py): the replicas' CPU and wall time in the result, the cost from the connection's
price table, the same figures in the tracker's metadata (also for the job that failed), the
estimate from the last successful run, and ``max_cost`` failing classic and ``@task.torchx`` tasks
before anything is submitted. The same on Slurm: tests/slurm/test_slurm_usage.py."""

from __future__ import annotations

import json

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore

pytestmark = pytest.mark.integration

PRICES = {"cpu_hour": 0.04, "mem_gb_hour": 0.01, "currency": "EUR"}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("usage-store")
    conn = {"scheduler": "local_cwd", "trackers": ["usage_fs"], "prices": PRICES}
    return {
        "AIRFLOW_CONN_TORCHX_USAGE_LOCAL_CWD": json.dumps({"conn_type": "torchx", "extra": conn}),
        "AIRFLOW_CONN_USAGE_FS": json.dumps({"conn_type": "torchx_fsspec", "extra": {"root": str(root)}}),
        "root": str(root),
    }


@pytest.fixture(scope="module")
def usage_run(run_dag, env):
    result = run_dag("tx_usage_local_cwd", env={k: v for k, v in env.items() if k != "root"})
    assert result.states == {"sync": "success", "deferred": "success", "fail": "failed"}, result.output[
        -4000:
    ]
    return result


def test_the_result_has_the_replicas_process_usage_and_its_cost(usage_run):
    result = usage_run.xcom("sync")
    usage = result["usage"]
    assert usage["source"] == "process"
    (replica,) = usage["replicas"]
    assert (replica["role"], replica["replica"], replica["exit_code"]) == ("python", 0, 0)
    assert usage["cpu_time_s"] == replica["cpu_time_s"] >= 2.0  # the job burns 2 s of CPU time
    assert usage["elapsed_s"] == replica["wall_s"] >= 2.5  # and then sleeps 0.5 s
    # utils.python asks for 1 CPU and 1024 MB: CPU priced as used, memory as requested x elapsed
    totals = usage["totals"]
    assert totals["cpu_hours"] == pytest.approx(usage["cpu_time_s"] / 3600)
    assert totals["mem_gb_hours"] == pytest.approx(usage["elapsed_s"] / 3600)
    cost = result["cost"]
    assert cost["actual"]["total"] == pytest.approx(
        totals["cpu_hours"] * 0.04 + totals["mem_gb_hours"] * 0.01
    )
    assert cost["currency"] == cost["actual"]["currency"] == "EUR"
    assert cost["estimate"] is None  # no expected_duration, no earlier run
    assert "torchx_usage" not in result["metadata"]  # at the top of the result, not twice


def test_the_trackers_metadata_has_the_same_usage_also_for_the_failed_app(usage_run, env):
    store = FsspecStore(env["root"])
    ok = usage_run.xcom("sync")
    metadata = store.metadata(ok["app_handle"])
    assert metadata["torchx_usage"] == ok["usage"] and metadata["torchx_cost"] == ok["cost"]
    failed_handle = usage_run.xcom("fail", "app_handle")
    failed = store.metadata(failed_handle)["torchx_usage"]
    assert failed["source"] == "process" and failed["replicas"][0]["exit_code"] == 3
    assert failed["cpu_time_s"] >= 0.5
    assert f"TorchX app {failed_handle} finished in state FAILED" in usage_run.output
    assert f"usage (process): elapsed {failed['elapsed_s']} s, CPU time {failed['cpu_time_s']} s" in (
        usage_run.output
    )


def test_the_second_runs_estimate_uses_the_first_runs_elapsed(run_dag, env):
    conns = {k: v for k, v in env.items() if k != "root"}
    first = run_dag("tx_usage_local_cwd_repeat", env=conns)
    assert first.states == {"again": "success"}, first.output[-4000:]
    second = run_dag("tx_usage_local_cwd_repeat", env=conns)
    assert second.states == {"again": "success"}, second.output[-4000:]
    elapsed = first.xcom("again")["usage"]["elapsed_s"]
    estimate = second.xcom("again")["cost"]["estimate"]
    assert estimate["duration_s"] == elapsed
    assert estimate["duration_source"] == (
        f"elapsed of the last successful run, DAG run {first.run_id!r} (process)"
    )
    assert estimate["total"] == pytest.approx(elapsed / 3600 * (1 * 0.04 + 1 * 0.01))


def test_max_cost_fails_classic_and_decorated_tasks_before_submitting(run_dag, env):
    result = run_dag("tx_usage_local_cwd_over_budget", env={k: v for k, v in env.items() if k != "root"})
    assert result.states == {"too_dear": "failed", "too_dear_decorated": "failed"}, result.output[-4000:]
    for task_id in ("too_dear", "too_dear_decorated"):
        assert result.xcom(task_id, "app_handle") is None
        assert result.xcom(task_id, "torchx_run_id") is None
    # 8 CPUs and 16 GB for an hour: 8 x 0.04 + 16 x 0.01 = 0.48 EUR
    assert result.output.count("the estimated cost 0.4800 EUR is over max_cost=0.01 EUR") >= 2
    assert "requested 8 CPU, 0 GPU, 16384 MB memory" in result.output
    assert "for 3600 s (the task's expected_duration)" in result.output
    assert "Submitted TorchX app" not in result.output
