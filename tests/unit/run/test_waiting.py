"""The worker's wait (torchx_airflow/run/waiting.py): one outage budget, counted from the last good answer."""

from __future__ import annotations

from typing import Any

import pytest
from torchx.specs import AppState, AppStatus

from torchx_airflow.exceptions import TorchXSchedulerOutageError
from torchx_airflow.run.waiting import WorkerWait

HANDLE = "slurm://torchx/42"


class ClockedHook:
    """A scheduler that answers from a script, each query taking 0.3 s on the wait's clock: a
    ``RuntimeError`` in the script is an unanswered query (a controller restarting)."""

    def __init__(self, script: list[AppState | Exception]) -> None:
        self.script = list(script)
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def status(self, handle: str) -> AppStatus:
        self.now += 0.3
        answer = self.script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return AppStatus(state=answer)

    def log_streams(self, *args: Any) -> tuple:
        return ()


DOWN = RuntimeError("slurmctld restarting")


def _wait(hook: ClockedHook, budget: float) -> WorkerWait:
    import logging

    return WorkerWait(hook, 0.001, budget, logging.getLogger("t"), stream_logs=False, clock=hook.clock)  # type: ignore[arg-type]


def test_two_outages_each_within_the_budget_are_waited_out_whatever_their_sum():
    """0.9 s without an answer twice, 1.0 s allowed: the budget restarts at every good answer."""
    running, succeeded = AppState.RUNNING, AppState.SUCCEEDED
    hook = ClockedHook([running, DOWN, DOWN, DOWN, running, DOWN, DOWN, DOWN, succeeded])
    status = _wait(hook, budget=1.0).until_terminal(HANDLE, {})
    assert status.state == AppState.SUCCEEDED and hook.script == []


def test_an_outage_past_the_budget_ends_the_wait():
    hook = ClockedHook([AppState.RUNNING, DOWN, DOWN, DOWN, DOWN, AppState.SUCCEEDED])
    with pytest.raises(TorchXSchedulerOutageError, match="outage_timeout"):
        _wait(hook, budget=1.0).until_terminal(HANDLE, {})
    assert hook.script == [AppState.SUCCEEDED]  # gave up at the fourth unanswered query


def test_being_asked_to_stop_during_a_status_query_ends_the_wait_at_once():
    """A deploy's SIGTERM lands while a status query runs (the kill guard raises in that frame): the
    wait ends there, for the next try to reattach; it is not an outage to wait out until the job ends."""
    from torchx_airflow.exceptions import TorchXWaitInterruptedError

    stop = TorchXWaitInterruptedError(HANDLE, "the task instance is still 'running'")
    hook = ClockedHook([AppState.RUNNING, stop, AppState.RUNNING, AppState.SUCCEEDED])
    with pytest.raises(TorchXWaitInterruptedError):
        _wait(hook, budget=60.0).until_terminal(HANDLE, {})
    assert hook.script == [AppState.RUNNING, AppState.SUCCEEDED]  # no query after the interruption
