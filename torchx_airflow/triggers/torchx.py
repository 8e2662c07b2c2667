"""TorchXAppTrigger: wait for a TorchX app in the triggerer, without holding a worker slot.

Every TorchX call runs in a thread (``asyncio.to_thread``), so a slow scheduler command (``sacct``,
a Kubernetes API call) never blocks the triggerer's event loop. The trigger yields exactly one event:

    {"status": "terminal", "app_handle", "state", "msg", "structured_error_msg", "num_restarts",
     "ui_url", "roles": {role: [replica states]}, "log_cursor"}
    {"status": "not_found", "app_handle", "message"}          the scheduler does not know the app
    {"status": "timeout", "app_handle", "state", "message"}    the deadline passed; the app was cancelled
    {"status": "error", "app_handle", "message"}               a TorchX call failed repeatedly

Killing the task (marking it failed or cleared) calls ``on_kill``, which cancels the app after
checking it is not already terminal. A triggerer restart or reassignment does not call ``on_kill``
and never cancels anything: the next triggerer picks the trigger up from its serialized form.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from torchx_airflow.apps import summarize_status

_MAX_CONSECUTIVE_ERRORS = 5
_BOOKKEEPING = ("status", "log_cursor")


def read_event(event: Any) -> tuple[str, str, dict[str, Any]]:
    """``(kind, app_handle, status)`` of a ``TorchXAppTrigger`` event, for the task that resumes.

    ``kind`` is ``terminal`` or ``timeout``; ``status`` is the event without its bookkeeping keys.
    A malformed event or a failed wait raises ``TorchXError``, an unknown app ``TorchXAppNotFoundError``.
    """
    from torchx_airflow.exceptions import TorchXAppNotFoundError, TorchXError

    if not isinstance(event, dict) or "status" not in event or "app_handle" not in event:
        raise TorchXError(f"Unexpected event from TorchXAppTrigger: {event!r}")
    kind, app_handle = event["status"], str(event["app_handle"])
    if kind == "not_found":
        raise TorchXAppNotFoundError(app_handle)
    if kind not in ("terminal", "timeout"):
        raise TorchXError(f"Waiting for TorchX app {app_handle} failed: {event.get('message', event)}")
    return kind, app_handle, {k: v for k, v in event.items() if k not in _BOOKKEEPING}


class TorchXAppTrigger(BaseTrigger):
    """Poll a TorchX app until it is terminal.

    :param app_handle: ``scheduler://session/app_id``.
    :param torchx_conn_id: the ``torchx`` connection the app was launched with.
    :param poll_interval: seconds between status checks.
    :param deadline: epoch seconds; when it passes the app is cancelled and a ``timeout`` event sent.
    :param log_cursor: per replica (``"role/k"``), the log lines the task has already shown.
    :param cancel_on_kill: cancel the app when the task is killed (off for sensors, which watch
        apps they did not launch).
    """

    def __init__(
        self,
        app_handle: str,
        torchx_conn_id: str = "torchx_default",
        poll_interval: float = 5.0,
        deadline: float | None = None,
        log_cursor: dict[str, int] | None = None,
        cancel_on_kill: bool = True,
    ) -> None:
        super().__init__()
        self.app_handle = app_handle
        self.torchx_conn_id = torchx_conn_id
        self.poll_interval = float(poll_interval)
        self.deadline = float(deadline) if deadline is not None else None
        self.log_cursor = {str(k): int(v) for k, v in (log_cursor or {}).items()}
        self.cancel_on_kill = bool(cancel_on_kill)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "app_handle": self.app_handle,
                "torchx_conn_id": self.torchx_conn_id,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "log_cursor": dict(self.log_cursor),
                "cancel_on_kill": self.cancel_on_kill,
            },
        )

    def _hook(self) -> Any:
        from torchx_airflow.hooks.torchx import TorchXHook

        return TorchXHook(self.torchx_conn_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self._hook()
        errors = 0
        try:
            while True:
                if self.deadline is not None and time.time() >= self.deadline:
                    yield TriggerEvent(await self._cancel_for_deadline(hook))
                    return
                try:
                    status = await asyncio.to_thread(hook.status, self.app_handle)
                    errors = 0
                except Exception as e:
                    errors += 1
                    self.log.warning("Status of %s failed (%d in a row): %s", self.app_handle, errors, e)
                    if errors >= _MAX_CONSECUTIVE_ERRORS:
                        yield TriggerEvent(
                            {
                                "status": "error",
                                "app_handle": self.app_handle,
                                "message": f"{type(e).__name__}: {e}",
                            }
                        )
                        return
                    await asyncio.sleep(self.poll_interval)
                    continue
                if status is None:
                    yield TriggerEvent(
                        {
                            "status": "not_found",
                            "app_handle": self.app_handle,
                            "message": f"Scheduler does not know app {self.app_handle}",
                        }
                    )
                    return
                if status.is_terminal():
                    event = summarize_status(self.app_handle, status)
                    yield TriggerEvent({"status": "terminal", **event, "log_cursor": self.log_cursor})
                    return
                self.log.debug("App %s is %s", self.app_handle, status.state.name)
                await asyncio.sleep(self._sleep_seconds())
        finally:
            await asyncio.to_thread(hook.close)

    def _sleep_seconds(self) -> float:
        if self.deadline is None:
            return self.poll_interval
        return max(0.0, min(self.poll_interval, self.deadline - time.time()))

    async def _cancel_for_deadline(self, hook: Any) -> dict[str, Any]:
        self.log.info("Deadline passed: cancelling TorchX app %s", self.app_handle)
        await asyncio.to_thread(hook.cancel, self.app_handle)
        status = await asyncio.to_thread(hook.status, self.app_handle)
        return {
            "status": "timeout",
            "app_handle": self.app_handle,
            "state": status.state.name if status is not None else "UNKNOWN",
            "message": "The task's execution_timeout passed: the app was cancelled.",
        }

    async def on_kill(self) -> None:
        """The user killed the task: cancel the app unless it is already terminal."""
        if not self.cancel_on_kill:
            return
        hook = self._hook()
        try:
            status = await asyncio.to_thread(hook.status, self.app_handle)
            if status is None or status.is_terminal():
                self.log.info(
                    "Task killed; app %s is already %s", self.app_handle, status and status.state.name
                )
                return
            self.log.info("Task killed: cancelling TorchX app %s", self.app_handle)
            await asyncio.to_thread(hook.cancel, self.app_handle)
        finally:
            await asyncio.to_thread(hook.close)
