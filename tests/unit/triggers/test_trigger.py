"""TorchXAppTrigger in-process with a fake scheduler (tests/fakes.py): primitives only, one
event, cancel rules."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from torchx.specs import AppState, AppStatus

from tests.fakes import FakeSchedulerHook
from tests.polling import wait_until
from torchx_airflow.exceptions import TorchXConfigError
from torchx_airflow.operators.torchx import TorchXOperator
from torchx_airflow.triggers.torchx import TorchXAppTrigger

HANDLE = "slurm://torchx/42"


def _events(trigger: TorchXAppTrigger, hook: FakeSchedulerHook) -> list[dict]:
    trigger._hook = lambda: hook  # type: ignore[method-assign]

    async def collect():
        return [event.payload async for event in trigger.run()]

    return asyncio.run(collect())


def test_serialize_holds_only_primitives_and_round_trips():
    trigger = TorchXAppTrigger(HANDLE, "conn", poll_interval=2, deadline=123.5, log_cursor={"a/0/all": 3})
    path, kwargs = trigger.serialize()
    assert path == "torchx_airflow.triggers.torchx.TorchXAppTrigger"
    assert json.loads(json.dumps(kwargs)) == kwargs
    assert TorchXAppTrigger(**kwargs).serialize() == (path, kwargs)


def test_one_event_with_the_final_status_and_calls_off_the_event_loop():
    hook = FakeSchedulerHook([AppState.PENDING, AppState.RUNNING, AppState.SUCCEEDED])
    events = _events(TorchXAppTrigger(HANDLE, poll_interval=0.01), hook)
    assert len(events) == 1
    assert events[0]["status"] == "terminal" and events[0]["state"] == "SUCCEEDED"
    assert events[0]["app_handle"] == HANDLE
    assert threading.main_thread().name not in hook.threads
    assert hook.closed and hook.cancelled == []


def test_unknown_app_is_one_not_found_event():
    events = _events(TorchXAppTrigger(HANDLE, poll_interval=0.01), FakeSchedulerHook([None]))
    assert [e["status"] for e in events] == ["not_found"]


def test_deadline_cancels_the_app_and_reports_timeout():
    hook = FakeSchedulerHook([AppState.RUNNING])
    events = _events(TorchXAppTrigger(HANDLE, poll_interval=0.05, deadline=time.time() + 0.2), hook)
    assert [e["status"] for e in events] == ["timeout"]
    assert events[0]["state"] == "CANCELLED"
    assert hook.cancelled == [HANDLE]


class DeferredTI:
    """The ``task_instance`` the triggerer gives a trigger (the fields on_kill needs)."""

    dag_id, run_id, task_id, map_index = "dag", "run", "run_task", -1


@pytest.mark.parametrize(
    ("state", "ti_state", "cancel_on_kill", "cancelled"),
    [
        (AppState.RUNNING, "failed", True, [HANDLE]),
        (AppState.RUNNING, None, True, [HANDLE]),  # cleared
        (AppState.SUCCEEDED, "failed", True, []),
        (AppState.RUNNING, "failed", False, []),
        (AppState.RUNNING, "deferred", True, []),  # the trigger moved to another triggerer
    ],
)
def test_on_kill_cancels_only_a_running_app_of_its_own_whose_task_was_killed(
    monkeypatch, state, ti_state, cancel_on_kill, cancelled
):
    # the API server's answer, which only a triggerer's supervisor can give (tests/slurm has the real one)
    async def answer(key):
        return ti_state, True

    monkeypatch.setattr("torchx_airflow.run.kills.aread_task_state", answer)
    hook = FakeSchedulerHook([state])
    trigger = TorchXAppTrigger(HANDLE, cancel_on_kill=cancel_on_kill)
    trigger.task_instance = DeferredTI()
    trigger._hook = lambda: hook  # type: ignore[method-assign]
    asyncio.run(trigger.on_kill())
    assert hook.cancelled == cancelled


def test_on_kill_outside_a_triggerer_cannot_read_the_state_and_cancels_nothing():
    hook = FakeSchedulerHook([AppState.RUNNING])
    trigger = TorchXAppTrigger(HANDLE)
    trigger._hook = lambda: hook  # type: ignore[method-assign]
    asyncio.run(trigger.on_kill())
    assert hook.cancelled == []


def test_a_cancelled_run_never_cancels_the_app():
    """A triggerer restart cancels run() without on_kill: the app must keep running."""
    hook = FakeSchedulerHook([AppState.RUNNING])
    trigger = TorchXAppTrigger(HANDLE, poll_interval=0.05)
    trigger._hook = lambda: hook  # type: ignore[method-assign]

    async def run_then_cancel():
        async def consume():
            async for _ in trigger.run():
                pass

        task = asyncio.ensure_future(consume())
        assert await asyncio.to_thread(hook.asked.wait, 30), "the trigger never polled"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run_then_cancel())
    assert hook.cancelled == []


def test_deferrable_on_a_local_scheduler_waits_in_the_worker_with_a_warning(capsys):
    from torchx_airflow.run.waiting import check_leavable, waits_in_triggerer

    op = TorchXOperator(task_id="t", component="utils.echo", deferrable=True)
    assert waits_in_triggerer(op.hook, op.hook.scheduler, op.deferrable, True, op.log) is False
    assert op.deferrable is True  # the author's choice stays as written
    out = capsys.readouterr()
    assert "triggerer cannot see: waiting in the worker instead" in out.out + out.err
    with pytest.raises(TorchXConfigError, match="only visible from the process that launched them"):
        waits_in_triggerer(op.hook, op.hook.scheduler, True, False, op.log)  # a sensor's wait
    op = TorchXOperator(task_id="t", component="utils.echo", wait_for_completion=False)
    with pytest.raises(TorchXConfigError, match="wait_for_completion=False cannot be used"):
        check_leavable(op.hook, op.hook.scheduler, op.wait_for_completion)


def test_an_event_waits_for_the_settle_time_after_the_trigger_started(monkeypatch):
    """A task resumed within seconds of deferring can be failed by Airflow 3.3 (apache/airflow#72716)."""
    monkeypatch.setattr("torchx_airflow.triggers.torchx.SETTLE_SECONDS", 0.5)
    hook = FakeSchedulerHook([AppState.SUCCEEDED])
    started = time.monotonic()
    events = _events(TorchXAppTrigger(HANDLE, poll_interval=0.01), hook)
    assert [e["status"] for e in events] == ["terminal"]
    assert time.monotonic() - started >= 0.5


def test_triggers_ask_their_state_once_per_process_before_any_kill(monkeypatch):
    """The triggerer's supervisor builds its Execution API on the first question (18 s on a loaded
    host): the triggers ask once when they start, so that on_kill's question is answered at once."""
    asked: list[str] = []

    async def answer(key):
        asked.append(key.task_id)
        return "deferred", True

    monkeypatch.setattr("torchx_airflow.run.kills.aread_task_state", answer)
    hook = FakeSchedulerHook([AppState.RUNNING, AppState.SUCCEEDED])

    async def two_triggers():
        triggers = [TorchXAppTrigger(f"slurm://torchx/{n}", poll_interval=0.01) for n in (1, 2)]
        for trigger in triggers:
            trigger.task_instance = DeferredTI()
            trigger._hook = lambda: hook  # type: ignore[method-assign]

        async def drain(trigger):
            return [event async for event in trigger.run()]

        await asyncio.gather(*(drain(trigger) for trigger in triggers))

    monkeypatch.setattr("torchx_airflow.triggers.torchx.SETTLE_SECONDS", 0.0)
    asyncio.run(two_triggers())
    assert asked == ["run_task"]


class OutageHook(FakeSchedulerHook):
    """Fake scheduler whose queries fail (its controller is down) while ``down`` is set."""

    def __init__(self, answers: list[AppState | None]) -> None:
        super().__init__(answers)
        self.down = threading.Event()
        self.failed = 0

    def status(self, handle: str) -> AppStatus | None:
        if self.down.is_set():
            self.failed += 1
            raise RuntimeError("squeue: error: Unable to contact slurm controller (connect failure)")
        return super().status(handle)


def test_a_scheduler_outage_is_waited_out_and_logged_once_at_each_end(capsys):
    hook = OutageHook([AppState.RUNNING])
    hook.down.set()
    trigger = TorchXAppTrigger(HANDLE, poll_interval=0.01, outage_timeout=60)

    def controller_back():
        # 30 failed polls in a row, far more than the old 5 attempts
        wait_until(lambda: hook.failed >= 30, "30 failed polls", timeout=60, interval=0.005)
        hook.answers = [AppState.SUCCEEDED]
        hook.down.clear()

    threading.Thread(target=controller_back, daemon=True).start()
    events = _events(trigger, hook)
    assert [e["status"] for e in events] == ["terminal"] and events[0]["state"] == "SUCCEEDED"
    outage_logs = [line for line in capsys.readouterr().out.splitlines() if f"Status of {HANDLE}" in line]
    assert len(outage_logs) == 2, outage_logs  # once when it started, once when it ended
    assert "waiting the outage out" in outage_logs[0] and "answers again" in outage_logs[1]


def test_an_outage_longer_than_outage_timeout_ends_the_wait_with_an_error_saying_so():
    hook = OutageHook([AppState.RUNNING])
    hook.down.set()
    events = _events(TorchXAppTrigger(HANDLE, poll_interval=0.01, outage_timeout=0.3), hook)
    assert [e["status"] for e in events] == ["error"]
    assert "TorchXSchedulerOutageError" in events[0]["message"]
    assert "outage_timeout (0.3 s)" in events[0]["message"] and "Raise outage_timeout" in events[0]["message"]
    assert hook.cancelled == []  # the app itself is never touched


def test_outage_timeout_defaults_to_the_torchx_config_section(monkeypatch):
    from torchx_airflow.settings.resolve import resolve

    def resolve_outage_timeout(task: float | None, connection: float | None) -> float:
        return float(resolve("outage_timeout", task, connection))

    assert resolve_outage_timeout(None, None) == 600.0
    monkeypatch.setenv("AIRFLOW__TORCHX__OUTAGE_TIMEOUT", "1234")
    assert resolve_outage_timeout(None, None) == 1234.0
    assert resolve_outage_timeout(None, 99) == 99.0 and resolve_outage_timeout(7, 99) == 7.0


def test_live_logs_of_a_scheduler_without_log_files_are_left_to_the_resumed_task():
    """Kubernetes logs come through the scheduler, not files the triggerer reads: the trigger shows
    none and does not fail (it did, reading the cursor of a follower it never made)."""
    import asyncio
    from types import SimpleNamespace

    from torchx_airflow.triggers.torchx import TorchXAppTrigger

    trigger = TorchXAppTrigger("kubernetes://torchx/default:job-1", log_replicas={"trainer": 2})
    support = SimpleNamespace(follows_files=lambda app_id: False)
    hook = SimpleNamespace(support=lambda scheduler: support)
    asyncio.run(trigger._show_new_log_lines(hook, final=False))
    assert trigger.log_replicas is None and trigger.log_cursor == {}
