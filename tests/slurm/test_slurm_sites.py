"""Slurm sites as they are configured in the wild, each a private cluster of its own
(tests/slurm/private_cluster.py): one with no ``slurmdbd`` at all (no ``sacct``), one whose
accounting keeps no job comments (Slurm's default). And poison handles among many shared waits on
the shared cluster.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from tests.fakes import TaskStateStore
from tests.polling import wait_until
from tests.slurm.private_cluster import PrivateSlurm, private_slurm
from tests.slurm.test_slurm_shared_polling import held_jobs
from torchx_airflow.exceptions import TorchXConfigError
from torchx_airflow.hooks.torchx import TorchXHook
from torchx_airflow.run.durable import DurableSubmission
from torchx_airflow.run.state import SUBMISSION_KEY
from torchx_airflow.schedulers.slurm import submission_mark
from torchx_airflow.triggers.torchx import TorchXAppTrigger

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
CONN = "torchx_site"


@pytest.fixture(scope="module", params=["none", "no_job_comment"])
def site(request, slurm_cluster):
    with private_slurm(request.param) as cluster:
        yield cluster


@pytest.fixture
def hook(site: PrivateSlurm, monkeypatch) -> TorchXHook:
    monkeypatch.setenv("SLURM_CONF", site.slurm_conf)
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN.upper()}", json.dumps({"conn_type": "torchx", "extra": {"scheduler": "slurm"}})
    )
    hook = TorchXHook(CONN)
    yield hook
    hook.close()


def sbatch(site: PrivateSlurm, script: str, *args: str) -> str:
    return site.run(
        ["sbatch", "--parsable", "-J", "trainer-0", "-o", "/dev/null", *args, "--wrap", script]
    ).stdout.strip()


def test_status_of_running_finished_and_unknown_jobs_and_waits_complete(site, hook):
    if site.accounting == "none":
        assert site.run(["sacct", "-n", "-X"], check=False).returncode != 0  # really no accounting
    ok, failing = sbatch(site, "sleep 6"), sbatch(site, "sleep 2; exit 3")
    handle, failing_handle = f"slurm://torchx/{ok}", f"slurm://torchx/{failing}"
    wait_until(
        lambda: (s := hook.status(handle)) is not None and s.state.name == "RUNNING", "job running", 60
    )

    async def deferred_wait() -> dict:
        async for event in TorchXAppTrigger(handle, CONN, poll_interval=1).run():
            return event.payload
        raise AssertionError("no event")

    event = asyncio.run(asyncio.wait_for(deferred_wait(), timeout=120))
    assert (event["status"], event["state"]) == ("terminal", "SUCCEEDED")
    assert hook.wait(handle, wait_interval=1).state.name == "SUCCEEDED"  # the worker's wait
    wait_until(lambda: hook.status(failing_handle).is_terminal(), "failing job ended", 60)
    assert hook.status(failing_handle).state.name == "FAILED"
    assert hook.status("slurm://torchx/987654") is None  # neither squeue nor (if any) sacct has it


def test_a_job_in_squeue_is_found_by_its_mark(site, hook):
    token = uuid.uuid4().hex
    job_id = sbatch(site, "sleep 30", f"--comment={submission_mark(token)}")
    try:
        assert hook.find_submission("slurm", token, time.time() - 60) == f"slurm://torchx/{job_id}"
    finally:
        site.run(["scancel", job_id], check=False)


def test_an_untrustworthy_lookup_fails_the_try_saying_what_to_configure_and_submits_nothing(site, hook):
    """The job of that mark may have ended and left squeue: accounting has no comment to find it by."""
    store = TaskStateStore(
        {SUBMISSION_KEY: {"token": uuid.uuid4().hex, "scheduler": "slurm", "since": time.time()}}
    )
    with pytest.raises(TorchXConfigError, match="AccountingStoreFlags=job_comment"):
        DurableSubmission(hook, store, "torchx_app_handle", "train", outage_timeout=30).recover()
    assert SUBMISSION_KEY in store.values  # kept: the next try asks again, nothing was submitted


def test_on_a_site_that_keeps_job_comments_the_same_lookup_says_not_found(slurm_cluster, monkeypatch):
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN.upper()}", json.dumps({"conn_type": "torchx", "extra": {"scheduler": "slurm"}})
    )
    store = TaskStateStore(
        {SUBMISSION_KEY: {"token": uuid.uuid4().hex, "scheduler": "slurm", "since": time.time()}}
    )
    hook = TorchXHook(CONN)
    try:
        DurableSubmission(hook, store, "torchx_app_handle", "train", outage_timeout=30).recover()
    finally:
        hook.close()
    assert store.values == {}  # trusted "not found": the try submits


@pytest.mark.parametrize("poison", ["slurm://torchx/١٢٣", "slurm://torchx/99999999999999999999"])
def test_poison_handles_among_many_shared_waits_end_only_their_own_wait(slurm_cluster, monkeypatch, poison):
    """``sacct -j 100,١٢٣`` and ``squeue -j 100,99999999999999999999`` fail for every id."""
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN.upper()}", json.dumps({"conn_type": "torchx", "extra": {"scheduler": "slurm"}})
    )
    job_ids = held_jobs(20)
    handles = [f"slurm://torchx/{job_id}" for job_id in job_ids]

    async def main() -> tuple[dict, list[bool]]:
        async def wait(handle: str) -> dict:
            async for event in TorchXAppTrigger(handle, CONN, poll_interval=1).run():
                return event.payload
            raise AssertionError("no event")

        tasks = [asyncio.ensure_future(wait(h)) for h in handles]
        poisoned = await asyncio.wait_for(wait(poison), timeout=60)
        await asyncio.sleep(3)  # a few more shared queries with the poison gone: nobody else ended
        still = [not t.done() for t in tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return poisoned, still

    try:
        poisoned, still = asyncio.run(main())
    finally:
        import subprocess

        subprocess.run(["scancel", *job_ids], check=False)
    assert poisoned["status"] == "not_found"
    assert all(still)
