"""Lineage-based caching on a real Slurm cluster through a real Airflow (scheduler, triggerer, API
server): the three cached steps of ``tx_cache_slurm`` wait in the triggerer (deferred); run again
unchanged, the pipeline submits no Slurm job (``sacct``, filtered to this stack's own working
directory) and every task returns the first run's result; a changed argument of ``b`` re-runs ``b``
and ``c`` only. The keys are written after a deferred wait, when the resumed task finishes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore

from tests.slurm.accounting import jobs_from
from tests.slurm.conftest import REPO
from tests.stack import AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
DAG = "tx_cache_slurm"
STEPS = ("a", "b", "c")


@pytest.fixture(scope="module")
def cache_stack(slurm_cluster, tmp_path_factory):
    home = tmp_path_factory.mktemp("cache-airflow")
    conn = {"conn_type": "torchx", "extra": {"scheduler": "slurm", "trackers": ["cache_fs"], "cache": True}}
    stack = AirflowStack(
        home=home,
        dags_folder=REPO / "tests" / "dags",
        env_extra={
            "AIRFLOW_CONN_TORCHX_SLURM": json.dumps(conn),
            "AIRFLOW_CONN_CACHE_FS": json.dumps(
                {"conn_type": "torchx_fsspec", "extra": {"root": str(home / "store")}}
            ),
            "AIRFLOW__CORE__PARALLELISM": "4",
        },
    )
    with stack.running():
        yield stack


class Runs:
    def __init__(self, stack: AirflowStack, tmp: Path) -> None:
        self.stack = stack
        self.ledger = tmp / "ledger"
        self.ledger.touch()
        self.conf = {"output_dir": str(tmp / "out"), "ledger": str(self.ledger)}
        self.seconds: list[float] = []

    def run(self, **changes) -> tuple[str, list[str], dict[str, str]]:
        """Trigger one run; returns its id, the steps whose jobs ran, and the stack's new Slurm jobs."""
        jobs_before, ledger_before = jobs_from(self.stack.home), self.ledger.read_text().split()
        started = time.monotonic()
        run_id = self.stack.trigger(DAG, {**self.conf, **changes})
        assert self.stack.wait_run(DAG, run_id, timeout=600) == "success"
        self.seconds.append(time.monotonic() - started)
        new_jobs = {j: s for j, s in jobs_from(self.stack.home).items() if j not in jobs_before}
        return run_id, self.ledger.read_text().split()[len(ledger_before) :], new_jobs

    def result(self, run_id: str, step: str) -> dict:
        return self.stack.xcom(DAG, run_id, step, "return_value")


@pytest.fixture(scope="module")
def runs(cache_stack, tmp_path_factory):
    runs = Runs(cache_stack, tmp_path_factory.mktemp("cache-slurm"))
    first, ran, jobs = runs.run()
    assert sorted(ran) == ["a", "b", "c"]
    assert sorted(jobs.values()) == ["COMPLETED"] * 3
    return runs, first


def test_first_run_waits_in_the_triggerer_and_records_its_keys_after_resuming(runs):
    runs_, first = runs
    store = FsspecStore(str(runs_.stack.home / "store"))
    for step in STEPS:
        result = runs_.result(first, step)
        assert result["cache_hit"] is False and result["app_handle"].startswith("slurm://")
        assert store.cache_records.get(result["cache_key"])["app_handle"] == result["app_handle"]
        log = runs_.stack.log(DAG, first, step, 1)
        assert f"Waiting for TorchX app {result['app_handle']} in the triggerer" in log


def test_an_unchanged_second_run_submits_no_slurm_job(runs):
    runs_, first = runs
    second, ran, jobs = runs_.run()
    assert ran == [] and jobs == {}
    for step in STEPS:
        earlier, now = runs_.result(first, step), runs_.result(second, step)
        assert now["cache_hit"] is True and now["cached_from"] == earlier["app_handle"]
        assert now["artifacts"] == earlier["artifacts"]
        assert "TorchX cache hit" in runs_.stack.log(DAG, second, step, 1)
    print(f"first run {runs_.seconds[0]:.1f} s, unchanged second run {runs_.seconds[1]:.1f} s")


def test_a_changed_argument_reruns_that_step_and_downstream_on_slurm(runs):
    runs_, first = runs
    changed, ran, jobs = runs_.run(b_value="2")
    assert sorted(ran) == ["b", "c"] and sorted(jobs.values()) == ["COMPLETED"] * 2
    hits = {step: runs_.result(changed, step)["cache_hit"] for step in STEPS}
    assert hits == {"a": True, "b": False, "c": False}
