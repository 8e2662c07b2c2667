"""The Slurm tests' cluster and Airflow: started by the project's own scripts, stopped afterwards.

As root, ``scripts/slurm/cluster.sh up`` installs (Debian packages) and starts a single-node cluster
with accounting when none answers; without root the tests skip, saying so. CI runs as root, so it
runs them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.stack import AirflowStack

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "scripts" / "slurm" / "cluster.sh"
SLURM_CONN = json.dumps({"conn_type": "torchx", "extra": {"scheduler": "slurm"}})


def _cluster_answers() -> bool:
    return subprocess.run(["bash", str(CLUSTER), "status"], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running Slurm cluster: the one that answers, or one started here (and stopped after)."""
    if shutil.which("sinfo") and _cluster_answers():
        yield
        return
    if os.geteuid() != 0:
        pytest.skip("no Slurm cluster answers and starting one needs root (scripts/slurm/cluster.sh up)")
    proc = subprocess.run(["bash", str(CLUSTER), "up"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"scripts/slurm/cluster.sh up failed:\n{proc.stdout}\n{proc.stderr}"
    try:
        yield
    finally:
        subprocess.run(["bash", str(CLUSTER), "down"], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def slurm_stack(slurm_cluster, tmp_path_factory):
    """Airflow's services on free loopback ports, with the test DAGs and the ``torchx_slurm`` connection."""
    stack = AirflowStack(
        home=tmp_path_factory.mktemp("slurm-airflow"),
        dags_folder=REPO / "tests" / "dags",
        env_extra={
            "AIRFLOW_CONN_TORCHX_SLURM": SLURM_CONN,
            "AIRFLOW__CORE__PARALLELISM": "4",
            # a SIGKILLed worker's task is noticed after 20 s instead of 5 min
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
        },
    )
    with stack.running():
        yield stack
