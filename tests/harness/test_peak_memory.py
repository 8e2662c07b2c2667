"""tests/peak_memory.py, the peak-memory line at the end of `make test`: it counts what left the
command's process tree (as scripts/airflow-stack.sh's services do) and never changes the run's result."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO

# The command starts a helper that starts an orphan holding 256 MiB for 3 s and exits at once (the
# orphan is no longer the command's descendant), waits for the orphan to end, and exits with 3.
COMMAND = r"""
import os, subprocess, sys, time
holder = "import time; memory = bytearray(256 * 2**20); time.sleep(3)"
helper = f"import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', {holder!r}]).pid)"
orphan = int(subprocess.run([sys.executable, "-c", helper], capture_output=True, text=True).stdout)
def running(pid):
    try:
        return open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
while running(orphan):
    time.sleep(0.1)
sys.exit(3)
"""


def test_the_peak_counts_processes_that_left_the_tree_and_the_exit_status_is_kept() -> None:
    run = subprocess.run(
        [sys.executable, str(REPO / "tests" / "peak_memory.py"), sys.executable, "-c", COMMAND],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 3, run.stdout + run.stderr
    found = re.search(r"Peak memory of the suite's processes: ([0-9.]+) GiB \(([0-9.]+) GB;", run.stdout)
    assert found, run.stdout + run.stderr
    assert float(found.group(1)) >= 0.25, run.stdout
    # the target is in GB (10^9 bytes): both units of one figure
    assert abs(float(found.group(2)) - float(found.group(1)) * 2**30 / 1e9) < 0.002, run.stdout
    # the orphan is named among the largest groups, with its 256 MiB
    largest = re.search(r"Largest at the peak \(GiB of PSS\): (.*)", run.stdout)
    assert largest, run.stdout
    holders = re.findall(r"python[0-9.]* -c x(\d+) ([0-9.]+)", largest.group(1))
    assert holders and float(holders[0][1]) >= 0.25, run.stdout


def test_a_command_that_cannot_start_is_its_own_error() -> None:
    run = subprocess.run(
        [sys.executable, str(REPO / "tests" / "peak_memory.py")], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2 and "COMMAND" in run.stderr
