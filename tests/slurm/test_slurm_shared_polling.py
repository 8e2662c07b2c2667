"""Shared polling against the real Slurm cluster: many ``TorchXAppTrigger`` runs in one event loop,
as the triggerer runs them, cost one batched query per interval; each trigger still gets its own
app's end (released and completed, cancelled outside Airflow, unknown); failing queries are retried
once for all. Queries are counted by command shims first on PATH (tests/faults.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest

from tests.faults import STATUS_COMMANDS, CommandFaults
from torchx_airflow.triggers.torchx import TorchXAppTrigger

pytestmark = pytest.mark.integration
CONN = "torchx_shared_slurm"
WAITS = 12


@pytest.fixture
def faults(slurm_cluster, tmp_path, monkeypatch) -> CommandFaults:
    faults = CommandFaults(tmp_path / "faults")
    monkeypatch.setenv("PATH", faults.path(os.environ["PATH"]))
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN.upper()}", json.dumps({"conn_type": "torchx", "extra": {"scheduler": "slurm"}})
    )
    return faults


def held_jobs(count: int) -> list[str]:
    return [
        subprocess.run(
            [
                "sbatch",
                "--parsable",
                "--hold",
                "-J",
                "torchx-shared-poll",
                "-o",
                "/dev/null",
                "--wrap",
                "true",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for _ in range(count)
    ]


def queries(faults: CommandFaults) -> int:
    return sum(1 for line in faults.calls() if line.split()[0] in STATUS_COMMANDS)


def test_many_deferred_waits_share_one_query_per_interval_and_each_gets_its_own_end(faults):
    job_ids = held_jobs(WAITS)
    released, cancelled = job_ids[0], job_ids[1]
    handles = [f"slurm://torchx/{job_id}" for job_id in job_ids] + ["slurm://torchx/987654321"]
    interval = 2.0

    async def main() -> tuple[dict[str, dict], int]:
        async def wait(handle: str) -> dict:
            async for event in TorchXAppTrigger(handle, CONN, poll_interval=interval).run():
                return event.payload
            raise AssertionError("no event")

        tasks = {h: asyncio.ensure_future(wait(h)) for h in handles}
        await asyncio.sleep(interval * 0.5)
        faults.clear()  # count from here: every trigger is waiting
        await asyncio.sleep(interval * 3)
        steady = queries(faults)
        await asyncio.to_thread(subprocess.run, ["scontrol", "release", released], check=True)
        await asyncio.to_thread(subprocess.run, ["scancel", cancelled], check=True)
        ended = {}
        for handle in (f"slurm://torchx/{released}", f"slurm://torchx/{cancelled}", handles[-1]):
            ended[handle] = await asyncio.wait_for(tasks[handle], timeout=120)
        still_waiting = [h for h, t in tasks.items() if not t.done()]
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        assert len(still_waiting) == WAITS - 2
        return ended, steady

    try:
        ended, steady = asyncio.run(main())
    finally:
        subprocess.run(["scancel", *job_ids], check=False)
    # 13 waits over 3 intervals: a handful of queries, not 13 per interval
    assert steady <= 3 * 2, faults.calls()
    assert ended[f"slurm://torchx/{released}"]["state"] == "SUCCEEDED"
    assert ended[f"slurm://torchx/{cancelled}"]["state"] == "CANCELLED"  # scancel outside Airflow
    assert ended["slurm://torchx/987654321"]["status"] == "not_found"


def test_a_failing_query_is_retried_once_for_every_waiting_trigger(faults):
    job_ids = held_jobs(4)
    handles = [f"slurm://torchx/{job_id}" for job_id in job_ids]

    async def main() -> list[dict]:
        async def wait(handle: str) -> dict:
            async for event in TorchXAppTrigger(handle, CONN, poll_interval=1).run():
                return event.payload
            raise AssertionError("no event")

        tasks = [asyncio.ensure_future(wait(h)) for h in handles]
        await asyncio.sleep(1.5)
        faults.fail_status(3)
        await asyncio.sleep(4)
        failed = sum(1 for line in faults.calls() if line.split()[0] in STATUS_COMMANDS)
        assert failed >= 3
        await asyncio.to_thread(subprocess.run, ["scancel", *job_ids], check=True)
        return await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)

    try:
        events = asyncio.run(main())
    finally:
        subprocess.run(["scancel", *job_ids], check=False)
    assert [e["status"] for e in events] == ["terminal"] * 4  # nobody saw the three failures
    assert {e["state"] for e in events} == {"CANCELLED"}
