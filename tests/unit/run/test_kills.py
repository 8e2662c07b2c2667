"""Which kills cancel the app (torchx_airflow.run.kills): the task instance's state decides."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.fakes import ListLog
from torchx_airflow.run import kills
from torchx_airflow.run.kills import TaskInstanceKey, kill_verdict, verdict_for_state

KEY = TaskInstanceKey("dag", "run", "train", -1)


@pytest.mark.parametrize(
    "state", ["failed", "success", "skipped", "restarting", None, "removed", "upstream_failed"]
)
def test_a_person_or_airflow_ending_the_task_cancels(state):
    assert verdict_for_state(state).cancel


@pytest.mark.parametrize("state", ["running", "deferred", "up_for_retry", "scheduled", "queued"])
def test_the_waiting_process_going_away_or_a_coming_try_never_cancels(state):
    verdict = verdict_for_state(state)
    assert not verdict.cancel and repr(state) in verdict.reason


def test_a_deleted_task_instance_cancels():
    assert verdict_for_state(None, found=False).cancel


def test_mapped_task_instances_are_keyed_as_the_api_server_answers():
    assert TaskInstanceKey("d", "r", "train", 3).state_key == "train_3"
    assert KEY.state_key == "train"


def test_outside_airflow_the_state_cannot_be_read_and_nothing_is_cancelled():
    verdict = kill_verdict(KEY, timeout=5)  # no supervisor in this process
    assert not verdict.cancel and "could not be read" in verdict.reason
    assert not kill_verdict(None).cancel


def test_a_state_query_that_never_answers_is_given_up_in_time(monkeypatch):
    """In a SIGTERM handler the interrupted task may hold the supervisor channel: never wait forever."""
    blocked = threading.Event()
    monkeypatch.setattr(kills, "read_task_state", lambda key: blocked.wait())
    started = time.monotonic()
    verdict = kill_verdict(KEY, timeout=0.3)
    assert time.monotonic() - started < 20  # given up, not waiting for ever (margin for a busy machine)
    assert not verdict.cancel and "within 0.3 s" in verdict.reason
    blocked.set()


def test_a_trigger_waits_for_the_state_as_long_as_airflows_on_kill_timeout_allows(monkeypatch):
    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", "60")
    assert kills.trigger_state_timeout() == 60 - kills.CANCEL_SECONDS
    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", "2")
    assert kills.trigger_state_timeout() == 1.0


def test_a_guard_cancels_an_app_that_ends_with_its_process_without_asking_the_state(monkeypatch):
    """local_cwd, local_docker: no try can reattach, so a SIGTERM cancels cleanly."""
    monkeypatch.setattr(kills, "read_task_state", lambda key: pytest.fail("asked the state"))
    guard, cancelled, log = kills.KillGuard(), [], ListLog()
    guard.key = KEY
    guard.on_kill("local_cwd://torchx/echo-1", cancelled.append, log, outlives_launcher=False)
    assert cancelled == ["local_cwd://torchx/echo-1"]
    assert log.lines == [
        "Task killed (its app ends with this process): cancelling TorchX app local_cwd://torchx/echo-1"
    ]


def test_a_guard_leaves_an_app_that_outlives_its_process_and_ends_only_the_wait(monkeypatch):
    from torchx_airflow.exceptions import TorchXWaitInterruptedError

    monkeypatch.setattr(kills, "read_task_state", lambda key: ("running", True))
    guard, cancelled = kills.KillGuard(), []
    guard.key = KEY
    with guard.only_waiting(), pytest.raises(TorchXWaitInterruptedError):
        guard.on_kill("slurm://torchx/42", cancelled.append, ListLog())
    assert cancelled == []
    guard.on_kill("slurm://torchx/42", cancelled.append, ListLog())  # not waiting any more: no raise
    assert cancelled == []


class SupervisorChannel:
    """Stand-in for a task's supervisor channel (no Airflow API server in the fast tier): answers
    ``GetTaskStates`` as the API server's ``/states`` route does (``execution_api/routes/
    task_instances.py``): the task instances of the asked runs, filtered by ``map_index`` when one is
    asked, each keyed ``task_id`` when unmapped and ``task_id_<map_index>`` when mapped (index 0 too)."""

    def __init__(self, states: dict[tuple[str, int], str | None]) -> None:
        self.states = states  # (task_id, map_index) -> state
        self.asked: list[Any] = []

    def send(self, message: Any) -> Any:
        from airflow.sdk.execution_time.comms import TaskStatesResult

        self.asked.append(message)
        found = {
            (task_id if map_index < 0 else f"{task_id}_{map_index}"): state
            for (task_id, map_index), state in self.states.items()
            if task_id in (message.task_ids or [])
            and (message.map_index is None or map_index == message.map_index)
        }
        return TaskStatesResult(task_states={run_id: dict(found) for run_id in message.run_ids or []})


class _TI:
    dag_id, run_id, task_id, map_index = "etl", "manual__2026-11-25", "train", -1


def _kill(monkeypatch, states: dict[tuple[str, int], str | None], map_index: int = -1) -> tuple[Any, Any]:
    """``on_kill`` of a ``train`` task (``map_index``) waiting on slurm://torchx/7, through the operator
    and the real state query; returns the scheduler and the channel."""
    from airflow.sdk.execution_time import task_runner

    from tests.fakes import FakeSchedulerHook, _operator

    channel = SupervisorChannel(states)
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", channel, raising=False)
    hook = FakeSchedulerHook([])
    op = _operator(hook)
    ti = _TI()
    ti.map_index = map_index
    execution = op._start({"ti": ti})
    execution.app_handle = "slurm://torchx/7"  # the job this execution waits on
    with execution.kills.running(ti):
        op.on_kill()
    return hook, channel


@pytest.mark.parametrize(
    ("state", "cancelled"),
    [("running", False), ("deferred", False), ("up_for_retry", False), ("failed", True), ("skipped", True)],
)
def test_on_kill_cancels_exactly_when_the_api_server_says_the_task_was_ended(monkeypatch, state, cancelled):
    """Through the operator's on_kill and the real state query, answered by run id as the server does."""
    hook, channel = _kill(monkeypatch, {("train", -1): state})
    assert hook.cancelled == (["slurm://torchx/7"] if cancelled else [])
    assert [m.run_ids for m in channel.asked] == [["manual__2026-11-25"]]


@pytest.mark.parametrize("map_index", [0, 1, 12])
def test_a_deploys_sigterm_leaves_the_job_of_every_mapped_instance_index_0_too(monkeypatch, map_index):
    """The mapped instance's own state decides: ``train_0`` is the key of index 0 as of any other, so a
    deploy (the instance still running) cancels nothing, and a person marking it failed cancels it."""
    others = {("train", i): "failed" for i in range(3) if i != map_index}
    hook, _ = _kill(monkeypatch, {**others, ("train", map_index): "running"}, map_index)
    assert hook.cancelled == []
    hook, channel = _kill(monkeypatch, {**others, ("train", map_index): "failed"}, map_index)
    assert hook.cancelled == ["slurm://torchx/7"]
    assert [m.map_index for m in channel.asked] == [map_index]


class _TimedOutHook:
    """A scheduler whose second status query is where Airflow's ``execution_timeout`` alarm lands."""

    def __new__(cls, *args: Any) -> Any:
        from airflow.sdk.exceptions import AirflowTaskTimeout
        from torchx.specs import AppState

        from tests.fakes import FakeSchedulerHook

        hook = FakeSchedulerHook([AppState.RUNNING])
        asked = hook.status

        def status(handle: str) -> Any:
            if hook.calls >= 1:
                raise AirflowTaskTimeout("Timeout, PID: 1")
            return asked(handle)

        hook.status = status  # type: ignore[method-assign]
        return hook


def test_execution_timeout_cancels_the_job_without_asking_the_task_instances_state(monkeypatch):
    """Airflow raises ``AirflowTaskTimeout`` in the task's frame, then calls ``on_kill``: the job is
    cancelled whatever the API server would say (here it cannot be asked at all)."""
    from airflow.sdk.exceptions import AirflowTaskTimeout

    from tests.fakes import HANDLE, TaskStateStore, _context, _operator

    monkeypatch.setattr(kills, "read_task_state", lambda key: pytest.fail("asked the state"))
    hook = _TimedOutHook()
    op = _operator(hook)
    with pytest.raises(AirflowTaskTimeout):
        op.execute(_context(TaskStateStore()))
    op.on_kill()  # as task_runner._execute_task does after the timeout
    assert hook.cancelled == [HANDLE]
