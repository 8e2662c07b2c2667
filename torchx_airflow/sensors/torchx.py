"""TorchXAppSensor: wait on an app handle, typically pushed by an upstream TorchXOperator.

The hook and the app helpers (``apps``) are imported where the sensor runs: a DAG file that imports
this module loads neither.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from torchx_airflow_tracker.compat import cached_property

from torchx_airflow.exceptions import (
    TorchXAppNotFoundError,
    TorchXAppTerminalError,
)
from torchx_airflow.hooks import TORCHX_DEFAULT_CONN_ID

if TYPE_CHECKING:
    from airflow.sdk import Context

    from torchx_airflow.hooks.torchx import TorchXHook
    from torchx_airflow.retry import StatusPolls


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

    With ``deferrable=True`` (default: ``[operators] default_deferrable``) the wait happens in the
    triggerer (``TorchXAppTrigger``), holding no worker slot; ``timeout`` becomes its deadline.

    The sensor only watches: it did not launch the app, so neither killing it nor its ``timeout``
    ever cancels or changes the app. In every mode (poke, reschedule, deferrable) the timeout fails
    the sensor with ``AirflowSensorTimeout``, an app that ended other than SUCCEEDED fails it with
    ``TorchXAppTerminalError``, and ``soft_fail=True`` turns both into a skip. A status query that
    fails is asked again at every ``poke_interval`` while the scheduler is down, for up to
    ``outage_timeout`` seconds after its last good answer (``torchx_airflow.retry``); the app is
    "not found" only when the scheduler says it does not know it. In reschedule mode the budget
    counts from the poke's start (a poke has no memory of the ones before it).

    :param app_handle: ``scheduler://session/app_id`` (templated).
    :param torchx_conn_id: the ``torchx`` connection (used for scheduler-side settings).
    :param deferrable: wait in the triggerer. The triggerer's shared status query runs at most
        every ``[torchx] min_poll_interval`` seconds (1 s), whatever ``poke_interval`` says.
    :param outage_timeout: seconds the wait goes on while the scheduler gives no answer; None: the
        connection's ``outage_timeout`` extra, else ``[torchx] outage_timeout`` (600 s).
    """

    template_fields: Sequence[str] = ("app_handle", "torchx_conn_id")
    ui_color = "#ee4c2c"

    def __init__(
        self,
        *,
        app_handle: str,
        torchx_conn_id: str = TORCHX_DEFAULT_CONN_ID,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        outage_timeout: float | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        from torchx_airflow.settings.checks import check_outage_timeout

        self.app_handle = app_handle
        self.torchx_conn_id = torchx_conn_id
        self.deferrable = deferrable
        self.outage_timeout = check_outage_timeout(outage_timeout, f"Sensor {self.task_id!r}")

    def _outage_budget(self) -> float:
        from torchx_airflow.settings.resolve import outage_budget

        return outage_budget(self.outage_timeout, self.hook.settings)

    @cached_property
    def _polls(self) -> StatusPolls:
        """This execution's status queries: in poke mode the outage budget spans pokes, counted from
        the last good answer."""
        from torchx_airflow.retry import StatusPolls

        return StatusPolls(self.hook.status, self.poke_interval, self._outage_budget(), self.log)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from torchx_airflow.apps import check_app_handle, scheduler_of
        from torchx_airflow.triggers.torchx import TorchXAppTrigger

        app_handle = check_app_handle(self.app_handle)
        from torchx_airflow.run.waiting import waits_in_triggerer

        waits_in_triggerer(self.hook, scheduler_of(app_handle), True, launched_here=False, task_log=self.log)
        try:
            result = self.poke(context)  # done already, or a bad handle: no need to defer
        except AirflowFailException as e:  # as BaseSensorOperator.execute treats it in poke mode
            if self.soft_fail:
                raise AirflowSkipException("Skipping due to soft_fail is set to True.") from e
            raise
        if result.is_done:
            return result.xcom_value
        self.defer(
            trigger=TorchXAppTrigger(
                app_handle=app_handle,
                torchx_conn_id=self.torchx_conn_id,
                poll_interval=self.poke_interval,
                deadline=time.time() + self.timeout if self.timeout else None,
                cancel_on_kill=False,
                outage_timeout=self._outage_budget(),
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger's event: succeed on SUCCEEDED, fail (or skip with soft_fail) otherwise."""
        from airflow.sdk.exceptions import AirflowSensorTimeout

        from torchx_airflow.apps import SUCCEEDED
        from torchx_airflow.run.waiting import read_event

        kind, app_handle, result = read_event(event)
        if kind == "timeout":
            raise AirflowSensorTimeout(f"TorchX app {app_handle} was not done before the sensor's timeout.")
        if result["state"] != SUCCEEDED:
            raise TorchXAppTerminalError(
                app_handle, result["state"], result["msg"], result["structured_error_msg"], result["roles"]
            )
        return result

    @cached_property
    def hook(self) -> TorchXHook:
        """The hook the sensor asks for the app's status."""
        from torchx_airflow.hooks.torchx import TorchXHook

        return TorchXHook(self.torchx_conn_id)

    def poke(self, context: Context) -> PokeReturnValue:
        from torchx_airflow.apps import SUCCEEDED, check_app_handle, scheduler_of, summarize_status

        app_handle = check_app_handle(self.app_handle)
        try:
            status = self._polls.status(app_handle)
        finally:
            self.hook.close()
        if status is None:
            local = not self.hook.apps_outlive_launcher(scheduler_of(app_handle))
            raise TorchXAppNotFoundError(app_handle, launcher_bound=local)
        self.log.info("TorchX app %s is %s", app_handle, status.state.name)
        if not status.is_terminal():
            return PokeReturnValue(is_done=False)
        result = summarize_status(app_handle, status)
        if result["state"] != SUCCEEDED:
            raise TorchXAppTerminalError(
                app_handle, result["state"], result["msg"], result["structured_error_msg"], result["roles"]
            )
        return PokeReturnValue(is_done=True, xcom_value=result)
