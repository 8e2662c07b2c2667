"""A scheduler control-plane outage, performed for real: ``slurmctld`` and ``slurmdbd`` are stopped
for 40 s while a worker-mode wait and a deferred wait (the real triggerer) wait on running jobs,
then started again. Both tasks succeed on their first try with one completed job each: the waits
are waited out (``retry.StatusOutage``), the jobs kept running on their node meanwhile.

The daemons stopped are those of a private cluster (tests/slurm/private_cluster.py) that the
Airflow services reach through ``SLURM_CONF``: the shared cluster, used by every other test, is
never touched.
"""

from __future__ import annotations

import datetime
import time

import pytest

from tests.slurm.accounting import jobs_named
from tests.slurm.conftest import REPO, SLURM_CONN
from tests.slurm.private_cluster import PrivateSlurm, private_slurm
from tests.stack import AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
OUTAGE_SECONDS = 40
# dag id -> its job's name (tests/dags/torchx_fault_dags.py)
WAITS = {"fault_status_sync": "faultstat-0", "fault_status_deferred": "faultstatdef-0"}


@pytest.fixture(scope="module")
def cluster(slurm_cluster):
    with private_slurm("full") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def stack(cluster, tmp_path_factory):
    stack = AirflowStack(
        home=tmp_path_factory.mktemp("outage-airflow"),
        dags_folder=REPO / "tests" / "dags",
        env_extra={
            "SLURM_CONF": cluster.slurm_conf,  # every Slurm command of every service: the private cluster
            "AIRFLOW_CONN_TORCHX_SLURM": SLURM_CONN,
            "AIRFLOW__CORE__PARALLELISM": "4",
        },
    )
    with stack.running():
        yield stack


def wait_running(cluster: PrivateSlurm, name: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = cluster.run(["squeue", "-h", "--name", name, "-o", "%T"], check=False).stdout
        if "RUNNING" in out:
            return
        time.sleep(0.5)
    raise AssertionError(f"no RUNNING job {name!r} within {timeout} s")


def test_a_controller_and_accounting_outage_is_waited_out_by_worker_and_deferred_waits(stack, cluster):
    since = (datetime.datetime.now() - datetime.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S")
    runs = {dag_id: stack.trigger(dag_id, {"seconds": 75}) for dag_id in WAITS}
    for name in WAITS.values():
        wait_running(cluster, name)
    stack.wait_ti("fault_status_deferred", runs["fault_status_deferred"], "run", ("deferred",))
    time.sleep(3)  # both waits have polled a running job

    cluster.stop("slurmctld", "slurmdbd")
    assert cluster.run(["squeue", "-h"], check=False).returncode != 0  # the control plane is down
    time.sleep(OUTAGE_SECONDS)
    cluster.start()

    for dag_id, run in runs.items():
        state = stack.wait_run(dag_id, run, timeout=300)
        log = stack.log(dag_id, run, "run", 1)
        assert state == "success", log[-3000:]
        assert stack.ti(dag_id, run, "run")["try_number"] == 1  # no retry: the wait went on
        handle = stack.xcom(dag_id, run, "run", "app_handle")
        assert jobs_named(WAITS[dag_id], since, slurm_conf=cluster.slurm_conf) == [
            (handle.rsplit("/", 1)[1], "COMPLETED")
        ]
        # the outage is logged once when it starts and once when it ends, not once per poll
        assert log.count("waiting the outage out") == 1, log[-3000:]
        assert log.count("answers again after") == 1, log[-3000:]
