"""TorchXAppSensor in-process: it judges real finished local_cwd apps and refuses malformed handles."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from tests.dags.torchx_test_dags import HELLO
from torchx_airflow.exceptions import TorchXAppHandleError, TorchXAppTerminalError
from torchx_airflow.hooks.torchx import TorchXHook
from torchx_airflow.operators.torchx import TorchXOperator
from torchx_airflow.sensors.torchx import TorchXAppSensor


def _finished_app(hook: TorchXHook, *args: str) -> str:
    op = TorchXOperator(
        task_id="launch", component="utils.python", component_args=["--script", HELLO, "--", *args]
    )
    op.__dict__["hook"] = hook
    info, _ = op.dryrun(op.build_app())
    handle = hook.schedule(info)
    hook.wait(handle, wait_interval=0.2)
    return handle


def test_sensor_succeeds_on_a_succeeded_app_and_returns_its_status():
    hook = TorchXHook()
    handle = _finished_app(hook, "--steps", "1")
    sensor = TorchXAppSensor(task_id="wait", app_handle=handle)
    sensor.__dict__["hook"] = hook  # local_cwd apps are only visible to the runner that launched them
    result = sensor.poke({})
    assert result.is_done
    assert result.xcom_value["state"] == "SUCCEEDED"
    assert result.xcom_value["app_handle"] == handle


def test_sensor_fails_without_retry_on_a_failed_app():
    hook = TorchXHook()
    handle = _finished_app(hook, "--steps", "1", "--fail")
    sensor = TorchXAppSensor(task_id="wait", app_handle=handle)
    sensor.__dict__["hook"] = hook
    with pytest.raises(TorchXAppTerminalError, match="finished in state FAILED") as err:
        sensor.poke({})
    assert err.value.state == "FAILED"
    assert isinstance(err.value, AirflowFailException)  # honours soft_fail


@pytest.mark.parametrize("handle", ["not-a-handle", "local_cwd:/x/y", "", 42])
def test_sensor_rejects_malformed_handles(handle):
    with pytest.raises(TorchXAppHandleError, match="Malformed TorchX app handle"):
        TorchXAppSensor(task_id="wait", app_handle=handle).poke({})
