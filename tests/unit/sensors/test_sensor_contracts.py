"""The sensor's contracts: a deferred sensor resumes as poke mode ends (timeout fails or skips), defers
with a trigger that never cancels, and judges failed and unknown apps. The scheduler is
``FakeSchedulerHook`` (tests/fakes.py)."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowSkipException, TaskDeferred
from torchx.specs import AppState

from tests.fakes import HANDLE, TRIGGER_PATH, FakeSchedulerHook, _context, _terminal
from torchx_airflow.exceptions import TorchXAppNotFoundError, TorchXAppTerminalError
from torchx_airflow.sensors.torchx import TorchXAppSensor


def _sensor(**kwargs: Any) -> TorchXAppSensor:
    sensor = TorchXAppSensor(task_id="wait", app_handle=HANDLE, poke_interval=0.01, **kwargs)
    return sensor


_SENSOR_TIMEOUT_EVENT = {"status": "timeout", "app_handle": HANDLE, "state": "RUNNING", "message": "deadline"}


@pytest.mark.parametrize(
    ("event", "soft_fail", "expected"),
    [
        (_SENSOR_TIMEOUT_EVENT, False, AirflowSensorTimeout),
        (_terminal("FAILED"), False, TorchXAppTerminalError),
        (_SENSOR_TIMEOUT_EVENT, True, AirflowSkipException),
        (_terminal("FAILED"), True, AirflowSkipException),
    ],
    ids=["timeout", "failed", "timeout-soft-fail", "failed-soft-fail"],
)
def test_sensor_resumes_like_poke_mode_timeout_fails_or_skips(event, soft_fail, expected):
    """Each event ends the resumed sensor with its own exception, exactly (not a subclass of another)."""
    sensor = _sensor(deferrable=True, soft_fail=soft_fail, timeout=5)
    with pytest.raises(BaseException) as raised:
        sensor.resume_execution("execute_complete", {"event": event}, _context())
    assert raised.type is expected, raised.getrepr()
    if expected is TorchXAppTerminalError:
        assert raised.value.state == "FAILED"  # type: ignore[attr-defined]


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
