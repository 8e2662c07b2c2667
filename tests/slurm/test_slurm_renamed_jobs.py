"""A Slurm job that renames itself cannot change what its task reads of it.

On the shared cluster, through ``airflow dags test`` (tests/dags/torchx_slurm_renamed_dags.py), a
job renames itself to a name holding ``|<claimed state>|0:0|...`` and a newline with a whole fake
status row of its own, then exits 3. Read at ``|`` and line ends, the claimed ``COMPLETED`` made the
task succeed while the job was still running, and a claimed ``NODE_FAIL`` made it submit the job
again. Now the task fails with the job's own exit, and submits exactly one job.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from tests.slurm.conftest import SLURM_CONN
from torchx_airflow.schedulers.slurm import sacct_window
from torchx_airflow.schedulers.slurm_fields import new_delimiter, split_records

pytestmark = pytest.mark.integration


def jobs_tagged(tag: str, since: str) -> list[tuple[str, str, str]]:
    """``(job id, state, name)`` of every job since ``since`` whose name holds ``tag``."""
    delimiter = new_delimiter()
    command = ["sacct", "-X", "-n", "-p", f"--delimiter={delimiter}", *sacct_window(since)]
    proc = subprocess.run([*command, "-o", "JobID,State,JobName"], capture_output=True, text=True, check=True)
    return [(i, s, n) for i, s, n in split_records(proc.stdout, delimiter, 3) if tag in n]


@pytest.mark.parametrize("claim", ["COMPLETED", "NODE_FAIL"])
def test_a_job_renamed_to_claim_a_state_fails_its_task_with_one_job(slurm_cluster, run_dag, claim):
    tag = uuid.uuid4().hex[:12]
    time.sleep(1)  # sacct's -S has second resolution
    since = time.strftime("%Y-%m-%dT%H:%M:%S")
    result = run_dag(
        "slurm_renamed_job", {"tag": tag, "claim": claim}, env={"AIRFLOW_CONN_TORCHX_SLURM": SLURM_CONN}
    )
    assert result.states == {"run": "failed"}, result.output[-4000:]
    jobs = jobs_tagged(tag, since)
    # renamed (the name holds the claim and a fake row) and failed for its own reason, once
    assert [(state, f"|{claim}|" in name and "\n" in name) for _, state, name in jobs] == [("FAILED", True)]
    assert "Resubmitting" not in result.output
    assert "exit code 3" in result.output, result.output[-4000:]
