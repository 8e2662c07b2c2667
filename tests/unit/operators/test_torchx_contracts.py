"""The operator's contracts, pinned the way Airflow's own providers pin theirs: the deferral
hand-off, ``execute_complete`` fed literal events of every kind, the worker's status retry policy, and
template fields kept verbatim until rendering.

The scheduler is replaced here by ``FakeSchedulerHook`` (tests/fakes.py, a fake, named as such):
these tests pin what the operator does with the answers. The same paths run against the real Slurm
cluster in tests/slurm. The trigger's, the sensor's and the durable submission's contracts are in
tests/unit/triggers/test_trigger_contracts.py, tests/unit/sensors/test_sensor_contracts.py and
tests/unit/run/test_durable.py.
"""

from __future__ import annotations

import datetime

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from torchx.specs import AppState

from tests.fakes import (
    HANDLE,
    TI,
    TRIGGER_PATH,
    FakeSchedulerHook,
    TaskStateStore,
    _context,
    _operator,
    _terminal,
    handle_keys,
)
from torchx_airflow.exceptions import (
    TorchXAppFailedError,
    TorchXAppLostError,
    TorchXError,
    TorchXSchedulerOutageError,
)
from torchx_airflow.operators.torchx import TorchXDryRunOperator, TorchXOperator


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
    assert handle_keys(store) == {"torchx_app_handle": HANDLE}
    assert context["ti"].pushed["app_handle"] == HANDLE


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
    assert handle_keys(store) == {"torchx_app_handle": HANDLE}


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
