"""A sync wait on local_cwd: every replica's lines reach the task log once, the wait's polls are the
only status calls, and no log reader thread outlives the wait (real TorchX local_cwd jobs)."""

from __future__ import annotations

import threading

import pytest
from torchx.specs import AppDef, Role, macros

from tests.fakes import ListLog
from tests.waits import worker_wait
from torchx_airflow.operators.torchx import TorchXOperator
from torchx_airflow.run.logs import READER_THREAD_PREFIX

pytestmark = pytest.mark.integration


class CollectingOperator(TorchXOperator):
    log = ListLog()  # type: ignore[assignment]


def _app(exit_code: int = 0) -> AppDef:
    replica = macros.replica_id  # TorchX fills in each replica's id
    script = f"for i in 1 2 3; do echo line-$i-of-{replica}; sleep 0.3; done; exit {exit_code}"
    return AppDef(
        name="follow",
        roles=[Role(name="worker", image="/tmp", entrypoint="bash", args=["-c", script], num_replicas=2)],
    )


def _status_callers(operator: TorchXOperator) -> list[str]:
    callers: list[str] = []
    status = operator.hook.status

    def counting(app_handle: str):
        callers.append(threading.current_thread().name)
        return status(app_handle)

    operator.hook.status = counting  # type: ignore[method-assign]
    return callers


@pytest.mark.parametrize("exit_code", [0, 3])
def test_a_sync_wait_streams_every_replica_once_and_its_readers_end_with_it(exit_code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    CollectingOperator.log = ListLog()  # type: ignore[assignment]
    app = _app(exit_code)
    operator = CollectingOperator(task_id="follow", app=app, poll_interval=0.2)
    app_handle = operator.hook.schedule(operator.hook.dryrun(app))
    callers = _status_callers(operator)
    try:
        status = worker_wait(operator, app_handle, app)
    finally:
        operator.hook.close()

    assert status.state.name == ("SUCCEEDED" if exit_code == 0 else "FAILED")
    logged = CollectingOperator.log.lines
    for k in (0, 1):
        for i in (1, 2, 3):
            assert logged.count(f"[worker/{k}] line-{i}-of-{k}") == 1, logged
    assert callers and not [c for c in callers if c.startswith(READER_THREAD_PREFIX)]
    assert not [t for t in threading.enumerate() if t.name.startswith(READER_THREAD_PREFIX)]
