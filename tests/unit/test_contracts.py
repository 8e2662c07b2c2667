"""The provider's contracts, pinned the way Airflow's own providers pin theirs: the trigger's exact
serialized form, the deferral hand-off, ``execute_complete`` fed literal events of every kind,
template fields kept verbatim until rendering, and the one status retry policy.

The scheduler is replaced here by ``FakeSchedulerHook`` (a fake, named as such): these tests pin what
the operator and sensor do with the answers. The same paths run against the real Slurm cluster in
tests/slurm.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

import pytest
from airflow.sdk.exceptions import (
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    TaskDeferred,
)
from torchx.specs import AppState, AppStatus

from torchx_airflow.apps import mapping_param
from torchx_airflow.exceptions import (
    TorchXAppFailedError,
    TorchXAppLostError,
    TorchXAppNotFoundError,
    TorchXAppTerminalError,
    TorchXConfigError,
    TorchXError,
    TorchXSchedulerOutageError,
)
from torchx_airflow.hooks.settings import TorchXConnectionSettings
from torchx_airflow.hooks.torchx import TorchXDryRun
from torchx_airflow.operators.torchx import TorchXDryRunOperator, TorchXOperator
from torchx_airflow.sensors.torchx import TorchXAppSensor
from torchx_airflow.triggers.torchx import TorchXAppTrigger

HANDLE = "slurm://torchx/4242"
TRIGGER_PATH = "torchx_airflow.triggers.torchx.TorchXAppTrigger"


class FakeSchedulerHook:
    """Fake scheduler: answers ``status`` from a script (an exception in it is raised once)."""

    scheduler = "slurm"
    cfg: dict[str, Any] = {}
    settings = TorchXConnectionSettings(scheduler="slurm")

    def __init__(self, answers: list[Any]) -> None:
        self.answers = list(answers)
        self.calls = 0
        self.cancelled: list[str] = []

    def status(self, handle: str) -> AppStatus | None:
        self.calls += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return None if answer is None else AppStatus(state=answer, msg=answer.name)

    def statuses(self, handles: list[str]) -> dict[str, AppStatus | None]:
        return {handle: self.status(handle) for handle in handles}

    def cancel(self, handle: str) -> None:
        self.cancelled.append(handle)

    #: what find_submission answers (a handle, None, or an exception raised every time); the tokens
    #: schedule was given; set False for a scheduler that cannot find a job by its mark
    finds = True
    found: Any = None

    def apps_outlive_launcher(self, scheduler: str | None = None) -> bool:
        return True

    def finds_submissions(self, scheduler: str) -> bool:
        return self.finds

    def find_submission(self, scheduler: str, token: str, since: float) -> str | None:
        self.searched = (scheduler, token)
        if isinstance(self.found, Exception):
            raise self.found
        return self.found

    def schedule(self, info: Any, token: str | None = None) -> str:
        self.tokens = [*getattr(self, "tokens", []), token]
        return HANDLE

    def resolve_cfg(self, scheduler: str, cfg: dict) -> dict:
        return {}

    def dryrun(self, app: Any, scheduler: Any = None, cfg: Any = None, **kwargs: Any) -> TorchXDryRun:
        return TorchXDryRun("sbatch --parsable torchx-sbatch.sh", self.scheduler)  # type: ignore[arg-type]

    def log_streams(self, handle: str) -> tuple:
        return ()

    def close(self) -> None:
        pass


class TaskStateStore:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.writes: list[tuple[str, str]] = []  # ("set" | "delete", key), in order

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def set(self, key: str, value: Any) -> None:
        self.writes.append(("set", key))
        self.values[key] = value

    def delete(self, key: str) -> None:
        self.writes.append(("delete", key))
        self.values.pop(key, None)


class TI:
    stats_tags: dict[str, str] = {}
    start_date = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def _context(store: TaskStateStore | None = None) -> dict[str, Any]:
    return {"ti": TI(), "task_state_store": store if store is not None else TaskStateStore()}


def _operator(hook: FakeSchedulerHook, **kwargs: Any) -> TorchXOperator:
    kwargs.setdefault("tracker_conn_ids", [])
    op = TorchXOperator(
        task_id="train", component="utils.echo", poll_interval=0.01, stream_logs=False, **kwargs
    )
    op.__dict__["hook"] = hook
    return op


def test_trigger_serializes_to_its_class_path_and_exact_primitive_kwargs():
    trigger = TorchXAppTrigger(
        app_handle=HANDLE,
        torchx_conn_id="torchx_slurm",
        poll_interval=3,
        deadline=1700000000.5,
        log_cursor={"trainer/0/stdout": 7},
        cancel_on_kill=False,
        log_replicas={"trainer": 2},
        tracker_conn_ids=["mlflow_default"],
        outage_timeout=1800,
        log_offsets={"trainer/0/stdout": 4096},
    )
    assert trigger.serialize() == (
        TRIGGER_PATH,
        {
            "app_handle": HANDLE,
            "torchx_conn_id": "torchx_slurm",
            "poll_interval": 3.0,
            "deadline": 1700000000.5,
            "log_cursor": {"trainer/0/stdout": 7},
            "cancel_on_kill": False,
            "log_replicas": {"trainer": 2},
            "tracker_conn_ids": ["mlflow_default"],
            "outage_timeout": 1800.0,
            "log_offsets": {"trainer/0/stdout": 4096},
        },
    )


def test_deferrable_execute_submits_persists_the_handle_then_defers_to_the_trigger():
    hook = FakeSchedulerHook([AppState.RUNNING])
    op = _operator(hook, deferrable=True, execution_timeout=datetime.timedelta(minutes=10))
    store = TaskStateStore()
    context = _context(store)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.trigger.serialize() == (
        TRIGGER_PATH,
        {
            "app_handle": HANDLE,
            "torchx_conn_id": "torchx_default",
            "poll_interval": 0.01,
            "deadline": TI.start_date.timestamp() + 600,
            "log_cursor": {},
            "cancel_on_kill": True,
            "log_replicas": None,  # stream_logs=False
            "tracker_conn_ids": [],
            "outage_timeout": 600.0,  # [torchx] outage_timeout: neither task nor connection sets one
            "log_offsets": {},
        },
    )
    assert store.values == {"torchx_app_handle": HANDLE}
    assert context["ti"].pushed["app_handle"] == HANDLE


def test_a_trigger_serialized_before_live_logs_existed_is_still_re_created():
    old_kwargs = {"app_handle": HANDLE, "torchx_conn_id": "c", "poll_interval": 5.0, "deadline": None,
                  "log_cursor": {}, "cancel_on_kill": True}  # fmt: skip
    assert TorchXAppTrigger(**old_kwargs).serialize()[1] == {
        **old_kwargs,
        "log_replicas": None,
        "tracker_conn_ids": [],
        "outage_timeout": None,
        "log_offsets": {},
    }


def test_a_retry_with_a_running_app_reattaches_and_defers_without_submitting():
    hook = FakeSchedulerHook([AppState.RUNNING])
    hook.schedule = None  # type: ignore[assignment]  # any submission would fail the test
    store = TaskStateStore()
    store.set("torchx_app_handle", HANDLE)
    with pytest.raises(TaskDeferred):
        _operator(hook, deferrable=True).execute(_context(store))


def test_a_submission_is_marked_in_the_store_before_it_reaches_the_scheduler():
    hook = FakeSchedulerHook([AppState.RUNNING])
    store = TaskStateStore()
    marks = []
    schedule = hook.schedule

    def schedule_and_look(info: Any, token: str | None = None) -> str:
        marks.append(dict(store.values))  # what a retry would find if this process died now
        return schedule(info, token)

    hook.schedule = schedule_and_look  # type: ignore[method-assign]
    with pytest.raises(TaskDeferred):
        _operator(hook, deferrable=True).execute(_context(store))
    (mark,) = marks
    assert mark["torchx_submission"]["token"] == hook.tokens[0] and hook.tokens[0]
    assert mark["torchx_submission"]["scheduler"] == "slurm"
    # the mark goes only once the handle is stored
    assert store.writes[:3] == [("set", "torchx_submission"), ("set", "torchx_app_handle"),
                                ("delete", "torchx_submission")]  # fmt: skip
    assert store.values == {"torchx_app_handle": HANDLE}


def test_a_scheduler_that_cannot_find_a_job_by_its_mark_gets_no_mark():
    hook = FakeSchedulerHook([AppState.RUNNING])
    hook.finds = False
    store = TaskStateStore()
    with pytest.raises(TaskDeferred):
        _operator(hook, deferrable=True).execute(_context(store))
    assert hook.tokens == [None]
    assert ("set", "torchx_submission") not in store.writes


def test_a_retry_finds_the_job_a_try_submitted_but_died_before_recording_and_reattaches():
    hook = FakeSchedulerHook([AppState.RUNNING])
    hook.found = HANDLE
    hook.schedule = None  # type: ignore[assignment]  # any submission would fail the test
    store = TaskStateStore()
    store.set("torchx_submission", {"token": "t0k3n", "scheduler": "slurm", "since": 1.0})
    with pytest.raises(TaskDeferred):
        _operator(hook, deferrable=True).execute(_context(store))
    assert hook.searched == ("slurm", "t0k3n")
    assert store.values == {"torchx_app_handle": HANDLE}


def test_a_retry_whose_earlier_submission_never_reached_the_scheduler_submits():
    hook = FakeSchedulerHook([AppState.RUNNING])
    store = TaskStateStore()
    store.set("torchx_submission", {"token": "t0k3n", "scheduler": "slurm", "since": 1.0})
    with pytest.raises(TaskDeferred):
        _operator(hook, deferrable=True).execute(_context(store))
    assert hook.searched == ("slurm", "t0k3n")
    assert len(hook.tokens) == 1 and hook.tokens[0] != "t0k3n"
    assert store.values == {"torchx_app_handle": HANDLE}


def test_a_scheduler_that_cannot_tell_fails_the_try_submitting_nothing_and_keeps_the_mark(monkeypatch):
    monkeypatch.setattr("torchx_airflow.durable._LOOKUP_INTERVAL", 0.01)
    hook = FakeSchedulerHook([AppState.RUNNING])
    hook.found = RuntimeError("squeue failed (exit code 1): slurm_load_jobs error")
    hook.schedule = None  # type: ignore[assignment]
    store = TaskStateStore()
    mark = {"token": "t0k3n", "scheduler": "slurm", "since": 1.0}
    store.set("torchx_submission", mark)
    with pytest.raises(TorchXError, match="could not say whether that job exists") as error:
        _operator(hook, deferrable=True, outage_timeout=0.2).execute(_context(store))
    assert "squeue failed" in str(error.value) and "state-store/torchx_submission" in str(error.value)
    assert store.values == {"torchx_submission": mark}


def test_a_mark_that_cannot_be_removed_after_the_handle_is_stored_only_warns():
    hook = FakeSchedulerHook([AppState.RUNNING])
    store = TaskStateStore()

    def delete(key: str) -> None:
        raise RuntimeError("API server unavailable")

    store.delete = delete  # type: ignore[method-assign]
    context = _context(store)
    with pytest.raises(TaskDeferred):  # the wait goes on
        _operator(hook, deferrable=True).execute(context)
    assert store.values["torchx_app_handle"] == HANDLE
    assert context["ti"].pushed["app_handle"] == HANDLE


def _terminal(state: str) -> dict[str, Any]:
    return {
        "status": "terminal",
        "app_handle": HANDLE,
        "state": state,
        "msg": state,
        "structured_error_msg": "",
        "num_restarts": 0,
        "ui_url": None,
        "roles": {"echo": [state]},
        "log_cursor": {},
    }


def test_execute_complete_returns_the_result_of_a_succeeded_app():
    context = _context()
    result = _operator(FakeSchedulerHook([None])).execute_complete(context, _terminal("SUCCEEDED"))
    assert result["state"] == "SUCCEEDED" and result["app_handle"] == HANDLE
    assert result["roles"] == {"echo": ["SUCCEEDED"]}
    assert (result["metadata"], result["artifacts"], result["sources"]) == ({}, {}, [])
    assert context["ti"].pushed["torchx_run_id"] == HANDLE


@pytest.mark.parametrize(
    ("event", "error", "retryable"),
    [
        (_terminal("FAILED"), TorchXAppFailedError, True),
        (_terminal("CANCELLED"), TorchXAppFailedError, True),
        (
            {"status": "timeout", "app_handle": HANDLE, "state": "CANCELLED", "message": "deadline"},
            TorchXAppFailedError,
            True,
        ),
        ({"status": "not_found", "app_handle": HANDLE, "message": "unknown"}, TorchXAppLostError, True),
        ({"status": "error", "app_handle": HANDLE, "message": "sacct: timeout"}, TorchXError, True),
        ({"unexpected": 1}, TorchXError, True),
    ],
)
def test_execute_complete_raises_on_every_other_event(event, error, retryable):
    with pytest.raises(error) as raised:
        _operator(FakeSchedulerHook([None])).execute_complete(_context(), event)
    assert isinstance(raised.value, AirflowFailException) is not retryable


def test_an_app_the_scheduler_stops_knowing_mid_wait_is_a_retryable_error():
    hook = FakeSchedulerHook([AppState.RUNNING, AppState.RUNNING, None])
    with pytest.raises(TorchXAppLostError) as raised:
        _operator(hook).execute(_context())
    assert not isinstance(raised.value, AirflowFailException)


def test_status_errors_while_waiting_in_the_worker_are_retried_with_backoff():
    boom = RuntimeError("sacct: Unable to contact slurm controller")
    hook = FakeSchedulerHook([AppState.RUNNING, boom, boom, boom, AppState.SUCCEEDED])
    result = _operator(hook).execute(_context())
    assert result["state"] == "SUCCEEDED"
    assert hook.calls == 5


def test_status_errors_past_the_policy_fail_the_try_but_keep_the_handle_for_the_retry():
    hook = FakeSchedulerHook([AppState.RUNNING, RuntimeError("down")])
    hook.answers = [AppState.RUNNING] + [RuntimeError("down")] * 10
    store = TaskStateStore()
    with pytest.raises(TorchXSchedulerOutageError, match="has not answered for .* RuntimeError: down"):
        _operator(hook, outage_timeout=0.1).execute(_context(store))
    assert store.values == {"torchx_app_handle": HANDLE}


def test_the_trigger_follows_the_same_retry_policy():
    boom = RuntimeError("sacct: timeout")
    hook = FakeSchedulerHook([boom, boom, AppState.SUCCEEDED])
    trigger = TorchXAppTrigger(HANDLE, poll_interval=0.01)
    trigger._hook = lambda: hook  # type: ignore[method-assign]

    async def collect():
        return [event.payload async for event in trigger.run()]

    events = asyncio.run(collect())
    assert [e["status"] for e in events] == ["terminal"] and hook.calls == 3
    hook = FakeSchedulerHook([boom])
    trigger = TorchXAppTrigger(HANDLE, poll_interval=0.01, outage_timeout=0.1)
    trigger._hook = lambda: hook  # type: ignore[method-assign]
    events = asyncio.run(collect())
    assert [e["status"] for e in events] == ["error"] and "outage_timeout" in events[0]["message"]


def test_a_sensor_trigger_deadline_reports_timeout_and_cancels_nothing():
    hook = FakeSchedulerHook([AppState.RUNNING])
    trigger = TorchXAppTrigger(HANDLE, poll_interval=0.02, deadline=time.time() + 0.1, cancel_on_kill=False)
    trigger._hook = lambda: hook  # type: ignore[method-assign]

    async def collect():
        return [event.payload async for event in trigger.run()]

    (event,) = asyncio.run(collect())
    assert event["status"] == "timeout" and event["state"] == "RUNNING"
    assert hook.cancelled == []


def _sensor(**kwargs: Any) -> TorchXAppSensor:
    sensor = TorchXAppSensor(task_id="wait", app_handle=HANDLE, poke_interval=0.01, **kwargs)
    return sensor


@pytest.mark.parametrize("soft_fail", [False, True])
@pytest.mark.parametrize(
    "event",
    [
        {"status": "timeout", "app_handle": HANDLE, "state": "RUNNING", "message": "deadline"},
        _terminal("FAILED"),
    ],
)
def test_sensor_resumes_like_poke_mode_timeout_fails_or_skips(event, soft_fail):
    sensor = _sensor(deferrable=True, soft_fail=soft_fail, timeout=5)
    expected = AirflowSkipException if soft_fail else (AirflowSensorTimeout, TorchXAppTerminalError)
    with pytest.raises(expected):
        sensor.resume_execution("execute_complete", {"event": event}, _context())


def test_sensor_resume_on_success_returns_the_status():
    result = _sensor(deferrable=True).resume_execution(
        "execute_complete", {"event": _terminal("SUCCEEDED")}, _context()
    )
    assert result["state"] == "SUCCEEDED"


def test_deferrable_sensor_defers_with_a_trigger_that_never_cancels():
    sensor = _sensor(deferrable=True, timeout=60)
    sensor.__dict__["hook"] = FakeSchedulerHook([AppState.RUNNING])
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(_context())
    path, kwargs = deferred.value.trigger.serialize()
    assert path == TRIGGER_PATH and deferred.value.method_name == "execute_complete"
    assert kwargs["cancel_on_kill"] is False and kwargs["app_handle"] == HANDLE


@pytest.mark.parametrize("deferrable", [False, True])
def test_sensor_on_an_app_that_already_failed_skips_with_soft_fail_in_both_modes(deferrable):
    sensor = _sensor(deferrable=deferrable, soft_fail=True)
    sensor.__dict__["hook"] = FakeSchedulerHook([AppState.FAILED])
    with pytest.raises(AirflowSkipException):
        sensor.execute(_context())


def test_sensor_unknown_app_fails_without_retry():
    sensor = _sensor()
    sensor.__dict__["hook"] = FakeSchedulerHook([None])
    with pytest.raises(TorchXAppNotFoundError):
        sensor.execute(_context())


# template fields are stored verbatim in __init__ and only normalised after rendering

TEMPLATED = {
    "component": "{{ params.component }}",
    "component_args": "{{ params.args }}",
    "scheduler": "{{ params.scheduler }}",
    "cfg": "{{ params.cfg }}",
    "env": "{{ params.env }}",
    "torchx_conn_id": "{{ params.conn }}",
    "tracker_conn_ids": "{{ params.trackers }}",
    "app_name": "{{ params.name }}",
}


@pytest.mark.parametrize("operator", [TorchXDryRunOperator, TorchXOperator])
def test_template_fields_are_assigned_verbatim(operator):
    op = operator(task_id="t", **TEMPLATED)
    for field, value in TEMPLATED.items():
        assert field in op.template_fields
        assert getattr(op, field) == value, field


@pytest.mark.parametrize(
    ("rendered", "expected"),
    [
        ('{"partition": "gpu", "nodes": 2}', {"partition": "gpu", "nodes": 2}),
        ("{'partition': 'gpu', 'exclusive': True}", {"partition": "gpu", "exclusive": True}),
        ({"a": 1}, {"a": 1}),
        (None, {}),
        ("", {}),
    ],
)
def test_a_rendered_mapping_parameter_is_read_as_json_or_a_python_literal(rendered, expected):
    assert mapping_param("t", "cfg", rendered) == expected


@pytest.mark.parametrize("rendered", ["partition=gpu", "[1, 2]", 7])
def test_a_rendered_mapping_parameter_that_is_not_a_mapping_is_named(rendered):
    with pytest.raises(TorchXConfigError) as err:
        mapping_param("train", "cfg", rendered)
    message = str(err.value)
    assert "'train'" in message and "'cfg'" in message and repr(rendered) in message
    assert "params.cfg" in message  # the fix
