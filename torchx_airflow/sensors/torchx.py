"""TorchXAppSensor: wait on an app handle, typically pushed by an upstream TorchXOperator."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from torchx_airflow.apps import SUCCEEDED, check_app_handle, summarize_status
from torchx_airflow.exceptions import TorchXAppNotFoundError, TorchXAppTerminalError
from torchx_airflow.hooks.torchx import TorchXHook

if TYPE_CHECKING:
    from airflow.sdk import Context


class TorchXAppSensor(BaseSensorOperator):
    """Succeed when a TorchX app SUCCEEDED; fail when it ends otherwise or its scheduler does not know it.

    Works in ``poke`` and ``reschedule`` mode; ``soft_fail=True`` skips instead of failing. The
    return value (XCom) is the app's final status, as ``TorchXOperator`` returns it::

        TorchXAppSensor(
            task_id="wait_train",
            app_handle="{{ ti.xcom_pull(task_ids='train', key='app_handle') }}",
            mode="reschedule",
        )

    Apps on ``local_cwd`` are only visible from the process that launched them, so they cannot be
    waited on from a sensor; the sensor fails at once for them with a message saying so.

    :param app_handle: ``scheduler://session/app_id`` (templated).
    :param torchx_conn_id: the ``torchx`` connection (used for scheduler-side settings).
    """

    template_fields: Sequence[str] = ("app_handle", "torchx_conn_id")
    ui_color = "#ee4c2c"

    def __init__(self, *, app_handle: str, torchx_conn_id: str = TorchXHook.default_conn_name, **kwargs: Any):
        super().__init__(**kwargs)
        self.app_handle = app_handle
        self.torchx_conn_id = torchx_conn_id

    @cached_property
    def hook(self) -> TorchXHook:
        """The hook the sensor asks for the app's status."""
        return TorchXHook(self.torchx_conn_id)

    def poke(self, context: Context) -> PokeReturnValue:
        app_handle = check_app_handle(self.app_handle)
        try:
            status = self.hook.status(app_handle)
        finally:
            self.hook.close()
        if status is None:
            raise TorchXAppNotFoundError(app_handle)
        self.log.info("TorchX app %s is %s", app_handle, status.state.name)
        if not status.is_terminal():
            return PokeReturnValue(is_done=False)
        result = summarize_status(app_handle, status)
        if result["state"] != SUCCEEDED:
            raise TorchXAppTerminalError(
                app_handle, result["state"], result["msg"], result["structured_error_msg"], result["roles"]
            )
        return PokeReturnValue(is_done=True, xcom_value=result)
