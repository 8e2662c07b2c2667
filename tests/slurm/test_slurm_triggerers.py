"""A trigger moved to another triggerer does not cancel its job: two triggerers, the one waiting on a
Slurm job SIGSTOPped past the triggerer heartbeat threshold (a long GC pause, CPU starvation), the
other takes the trigger over; on SIGCONT, Airflow 3.3 runs the first one's ``on_kill`` with the
message of a user's kill (``update_triggers`` -> ``cancel_triggers``). The job keeps running, the wait
completes on the other triggerer, the task succeeds on its first try, and no job is CANCELLED.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time

import pytest

from tests.e2e.test_celery_rest import _consecutive_free_ports
from tests.polling import wait_until
from tests.slurm.accounting import job_state
from tests.slurm.conftest import REPO, SLURM_CONN
from tests.slurm.test_slurm_reliability import jobs_after, last_job_id, wait_handle
from tests.stack import AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
HEARTBEAT_THRESHOLD = 6  # seconds without a heartbeat before a triggerer's triggers move


@pytest.fixture(scope="module")
def stack(slurm_cluster, tmp_path_factory):
    """Airflow with one triggerer (``triggerer-2`` is started by the test) beating every second."""
    stack = AirflowStack(
        home=tmp_path_factory.mktemp("triggerers-airflow"),
        dags_folder=REPO / "tests" / "dags",
        log_port=_consecutive_free_ports(3, set()),  # the executor's, triggerer's, triggerer-2's
        env_extra={
            "AIRFLOW_CONN_TORCHX_SLURM": SLURM_CONN,
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": str(HEARTBEAT_THRESHOLD),
        },
    )
    with stack.running():
        yield stack


def _trigger_owner(stack: AirflowStack) -> int | None:
    with sqlite3.connect(stack.home / "airflow.db") as db:
        rows = db.execute("SELECT triggerer_id FROM trigger").fetchall()
    owners = {row[0] for row in rows}
    assert len(owners) <= 1, owners  # this module's stack waits on one trigger at a time
    return owners.pop() if owners else None


def _logged(stack: AirflowStack, text: str) -> bool:
    """Whether any log of the stack (services' and tasks', triggers' included) holds ``text``."""
    for root in (stack.home / "stack", stack.home / "logs"):
        for path in root.rglob("*.log"):
            if text in path.read_text(errors="replace"):
                return True
    return False


def _trigger_logged(stack: AirflowStack, triggerer_id: int, text: str) -> bool:
    """Whether the log of a trigger run by the triggerer ``triggerer_id`` holds ``text``."""
    return any(
        text in path.read_text(errors="replace")
        for path in (stack.home / "logs").rglob(f"*.log.trigger.{triggerer_id}.log")
    )


def test_a_trigger_moved_off_a_stalled_triggerer_keeps_its_job_and_completes_on_the_other(stack):
    before = last_job_id()
    run = stack.trigger("slurm_deferred", {"seconds": 40})
    stack.wait_ti("slurm_deferred", run, "run", ("deferred",), timeout=120)
    handle = wait_handle(stack, "slurm_deferred", run)
    stalled = wait_until(lambda: _trigger_owner(stack), "the triggerer picking up the trigger", 60)
    # stall it mid-wait: its trigger runs and shows the job's log lines
    wait_until(
        lambda: _trigger_logged(stack, stalled, "[python/0] line"), "the trigger waiting on the job", 120
    )
    stack.script("start", "triggerer-2")
    pgid = int((stack.home / "stack" / "triggerer.pid").read_text())
    os.killpg(pgid, signal.SIGSTOP)  # the whole triggerer: its supervisor and its trigger runner
    try:
        wait_until(
            lambda: _trigger_owner(stack) not in (None, stalled), "triggerer-2 taking the trigger over", 90
        )
    finally:
        os.killpg(pgid, signal.SIGCONT)
    # Airflow runs on_kill on the resumed triggerer as for a user's kill; the trigger asks the task
    # instance's state, which is still deferred, and leaves the job alone
    wait_until(
        lambda: _logged(stack, "Trigger cancelled by user action, invoking on_kill"), "on_kill on SIGCONT", 60
    )
    wait_until(
        lambda: _logged(stack, f"not cancelling TorchX app {handle}: the task instance is still 'deferred'"),
        "the trigger's verdict",
        40,  # on_kill may wait [triggerer] on_kill_timeout less 5 s for the answer (kills.py)
    )
    time.sleep(2)
    assert job_state(handle).startswith(("RUNNING", "PENDING", "COMPLETED")), job_state(handle)

    assert stack.wait_run("slurm_deferred", run, timeout=240) == "success"
    assert stack.ti("slurm_deferred", run, "run")["try_number"] == 1
    jobs = jobs_after(before, stack.home)
    assert [(row[0], row[1]) for row in jobs] == [(handle.rsplit("/", 1)[1], "COMPLETED")], jobs
