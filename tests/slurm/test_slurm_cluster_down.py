"""A cluster that goes down takes its jobs with it (scripts/slurm/cluster.sh down): a job step's
``slurmstepd`` outlives ``slurmd`` by design, so a suite that stopped its cluster with a job still
running (a killed test worker's, a cancelled run's) left the job's processes behind. Worst case
here: the controller is already gone, so nothing can be cancelled and the steps are killed."""

from __future__ import annotations

import random
import subprocess

import pytest

from tests.polling import wait_until
from tests.slurm.private_cluster import private_slurm

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _running(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return out.split()


def test_a_running_jobs_processes_end_with_the_cluster_even_without_its_controller():
    marker = f"sleep {random.randint(700_000, 799_999)}"
    with private_slurm(accounting="none") as cluster:
        cluster.run(["sbatch", "--parsable", "--output=/dev/null", "--wrap", f"exec {marker}"])
        wait_until(lambda: _running(marker), "the job's process running", 120, interval=0.5)
        cluster.stop("slurmctld")  # no scancel possible: only the steps are left to end
    assert _running(marker) == []
