"""TorchXAppTrigger: wait for a TorchX app in the triggerer, without holding a worker slot.

Every TorchX call runs in a thread (``asyncio.to_thread``), so a slow scheduler command (``sacct``,
a Kubernetes API call) never blocks the triggerer's event loop. The trigger yields exactly one event:

    {"status": "terminal", "app_handle", "state", "msg", "structured_error_msg", "num_restarts",
     "ui_url", "roles": {role: [replica states]}, "log_cursor"}
    {"status": "not_found", "app_handle", "message"}          the scheduler does not know the app
    {"status": "timeout", "app_handle", "state", "message"}    the deadline passed (the app was
                                                               cancelled only with cancel_on_kill)
    {"status": "error", "app_handle", "message"}               the scheduler gave no answer for
                                                               outage_timeout (retry policy), or
                                                               the handle's own query keeps failing

Killing the task (marking it failed or success, clearing it) calls ``on_kill``, which cancels the
app after checking it is not already terminal. A triggerer restart never cancels anything: the next
triggerer picks the trigger up from its serialized form. A trigger moved to another triggerer (this
one's heartbeat went stale) gets ``on_kill`` too, with the message of a user's kill: ``on_kill``
asks the API server for the task instance's state and cancels only if the task was really killed
(``torchx_airflow.run.kills``).
A trigger with ``cancel_on_kill=False`` (a sensor's: it watches an app it did not launch) never
cancels anything, neither when the task is killed nor when its deadline passes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from torchx_airflow.apps import AppHandle, summarize_status
from torchx_airflow.exceptions import TorchXSchedulerOutageError
from torchx_airflow.hooks.torchx import TorchXHook
from torchx_airflow.retry import StatusOutage, async_status_retrying, is_retryable
from torchx_airflow.settings.resolve import outage_budget

# A trigger's event comes no sooner than this after the trigger started. Airflow 3.3 can fail a task
# whose trigger fires within seconds of its deferral: the worker's exit from deferring is reported
# late and taken for the end of the resumed try (apache/airflow#72716). The task checks the app once
# before deferring, so only an app that ends in those first seconds waits for the rest of them.
SETTLE_SECONDS = 8.0
# After the deadline the app's state is only informative: asked for this long at most.
_DEADLINE_STATUS_BUDGET = 30.0


class TorchXAppTrigger(BaseTrigger):
    """Poll a TorchX app until it is terminal.

    :param app_handle: ``scheduler://session/app_id``.
    :param torchx_conn_id: the ``torchx`` connection the app was launched with.
    :param poll_interval: seconds between status checks.
    :param deadline: epoch seconds; when it passes a ``timeout`` event is sent (and the app is
        cancelled if ``cancel_on_kill``).
    :param log_cursor: per replica (``"role/k"``), the log lines the task has already shown.
    :param cancel_on_kill: cancel the app when the task is killed or its deadline passes (off for
        sensors, which watch apps they did not launch).
    :param log_replicas: role -> number of replicas whose logs the trigger shows as they arrive
        (schedulers whose logs are files, such as Slurm); None shows none (the task prints them
        when it resumes).
    :param tracker_conn_ids: the task's tracker connections: their secrets are masked in the log
        lines the trigger shows, as the worker masks them.
    :param outage_timeout: seconds the wait goes on while the scheduler gives no answer, counted
        from the last good one (``retry.StatusOutage``); None: ``[torchx] outage_timeout``.
    :param log_offsets: per replica stream, the byte offset of its log file up to which the lines
        in ``log_cursor`` were read: a trigger re-created after a triggerer restart reads on from
        there instead of from byte 0.
    """

    def __init__(
        self,
        app_handle: str,
        torchx_conn_id: str = TorchXHook.default_conn_name,
        poll_interval: float = 5.0,
        deadline: float | None = None,
        log_cursor: dict[str, int] | None = None,
        cancel_on_kill: bool = True,
        log_replicas: dict[str, int] | None = None,
        tracker_conn_ids: list[str] | None = None,
        outage_timeout: float | None = None,
        log_offsets: dict[str, int] | None = None,
    ) -> None:
        super().__init__()
        self.app_handle = app_handle
        self.torchx_conn_id = torchx_conn_id
        self.poll_interval = float(poll_interval)
        self.deadline = float(deadline) if deadline is not None else None
        self.log_cursor = {str(k): int(v) for k, v in (log_cursor or {}).items()}
        self.cancel_on_kill = bool(cancel_on_kill)
        self.log_replicas = {str(r): int(n) for r, n in log_replicas.items()} if log_replicas else None
        self.tracker_conn_ids = list(tracker_conn_ids or [])
        self.outage_timeout = float(outage_timeout) if outage_timeout is not None else None
        self.log_offsets = {str(k): int(v) for k, v in (log_offsets or {}).items()}
        self._follower: Any = None

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
                "log_replicas": self.log_replicas,
                "tracker_conn_ids": self.tracker_conn_ids,
                "outage_timeout": self.outage_timeout,
                "log_offsets": dict(self.log_offsets),
            },
        )

    def _hook(self) -> TorchXHook:
        return TorchXHook(self.torchx_conn_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from torchx_airflow.triggers.poller import shared_poller

        if self.cancel_on_kill:  # so that on_kill's question about the task instance is answered at once
            from torchx_airflow.run.kills import TaskInstanceKey, warm_state_channel

            warm_state_channel(TaskInstanceKey.of(getattr(self, "task_instance", None)))
        # Every trigger of this process waiting on the same connection and scheduler shares one
        # batched status query per interval (triggers/poller.py).
        started = time.monotonic()
        poller = shared_poller(self.torchx_conn_id, AppHandle.parse(self.app_handle).scheduler, self._hook)
        # the task resolved its budget (settings.resolve.outage_budget) when it deferred
        outage = StatusOutage(
            f"Status of {self.app_handle}", outage_budget(self.outage_timeout, None), self.log
        )
        async with poller.subscribe(self.app_handle, self.poll_interval) as subscription:
            while True:
                try:
                    answer = await asyncio.wait_for(subscription.answers.get(), self._seconds_left())
                except asyncio.TimeoutError:
                    yield TriggerEvent(await self._deadline_event())
                    return
                if isinstance(answer, Exception):
                    if outage.failed(answer):  # an outage within budget: wait for the next answer
                        continue
                    if is_retryable(answer):
                        answer = TorchXSchedulerOutageError(outage.give_up_message(answer))
                else:
                    outage.answered()
                terminal = answer is not None and not isinstance(answer, Exception) and answer.is_terminal()
                await self._show_new_log_lines(poller.hook, final=terminal)
                event = self._event_for(answer)
                if event is not None:
                    await asyncio.sleep(max(0.0, started + SETTLE_SECONDS - time.monotonic()))
                    yield TriggerEvent(event)
                    return

    async def _show_new_log_lines(self, hook: Any, final: bool) -> None:
        """Write the job's new log lines to this trigger's log, which Airflow shows in the task's."""
        if not self.log_replicas or hook is None:
            return
        try:
            lines = await asyncio.to_thread(self._read_new_log_lines, hook, final)
        except Exception as e:  # logs are best effort: the task prints what is left when it resumes
            self.log.debug("Live logs of %s unavailable: %s", self.app_handle, e)
            return
        from torchx_airflow.secrets import redact_text

        for prefix, line in lines:
            self.log.info("%s %s", prefix, redact_text(line))
        if self._follower is None:  # logs read through the scheduler (Kubernetes): when the task resumes
            return
        self.log_cursor = dict(self._follower.cursor)
        self.log_offsets = dict(self._follower.offsets)

    def _read_new_log_lines(self, hook: Any, final: bool) -> list[tuple[str, str]]:
        from torchx_airflow.schedulers.log_files import LogFileFollower

        handle = AppHandle.parse(self.app_handle)
        support, app_id = hook.support(handle.scheduler), handle.app_id
        if not support.follows_files(app_id):
            self.log_replicas = None  # read through the scheduler when the task resumes
            return []
        if self._follower is None:
            if self.tracker_conn_ids:  # register their secrets with this process's masker
                from torchx_airflow.hooks.tracker import trackers_for

                trackers_for(self.tracker_conn_ids)
            streams = [
                (role, k, stream)
                for role, count in (self.log_replicas or {}).items()
                for k in range(count)
                for stream in support.log_streams()
            ]
            self._follower = LogFileFollower(streams, self.log_cursor, self.log_offsets)
        # while the app runs the work dir comes from the shared poller's last query: no query here
        return self._follower.read_new(lambda r, k, st: support.log_file(app_id, r, k, st, ask=final), final)

    def _seconds_left(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.time())

    def _event_for(self, answer: Any) -> dict[str, Any] | None:
        """The event a status answer ends the wait with, or None while the app runs."""
        if isinstance(answer, Exception):  # past outage_timeout, or an error retrying cannot fix
            return {
                "status": "error",
                "app_handle": self.app_handle,
                "message": f"{type(answer).__name__}: {answer}",
            }
        if answer is None:
            return {
                "status": "not_found",
                "app_handle": self.app_handle,
                "message": f"Scheduler does not know app {self.app_handle}",
            }
        if answer.is_terminal():
            return {
                "status": "terminal",
                **summarize_status(self.app_handle, answer),
                "log_cursor": self.log_cursor,
            }
        return None

    async def _status(self, hook: Any) -> Any:
        """The app's status off the event loop, retried with the shared status policy."""
        outage = StatusOutage(f"Status of {self.app_handle}", _DEADLINE_STATUS_BUDGET, self.log)
        retrying = async_status_retrying(outage, self.poll_interval)
        return await retrying(asyncio.to_thread, hook.status, self.app_handle)

    async def _deadline_event(self) -> dict[str, Any]:
        hook = self._hook()
        try:
            return await self._deadline_event_with(hook)
        finally:
            await asyncio.to_thread(hook.close)

    async def _deadline_event_with(self, hook: Any) -> dict[str, Any]:
        if self.cancel_on_kill:
            self.log.info("Deadline passed: cancelling TorchX app %s", self.app_handle)
            await asyncio.to_thread(hook.cancel, self.app_handle)
            message = "The task's execution_timeout passed: the app was cancelled."
        else:
            self.log.info("Deadline passed: TorchX app %s is left as it is", self.app_handle)
            message = "The deadline passed before the app was done; the app was left running."
        try:
            status = await self._status(hook)
        except Exception as e:  # the deadline decides the outcome; the state is only informative
            self.log.warning("Status of %s after the deadline failed: %s", self.app_handle, e)
            status = None
        return {
            "status": "timeout",
            "app_handle": self.app_handle,
            "state": status.state.name if status is not None else "UNKNOWN",
            "message": message,
        }

    async def on_kill(self) -> None:
        """Cancel the app if the task was really killed (marked failed or success, cleared) and the app
        is not already terminal.

        Airflow 3.3 calls this also for a trigger that moved to another triggerer (this one's
        heartbeat went stale): the task instance is then still ``deferred`` and another triggerer
        waits on the app, so it is left alone; so it is when the state cannot be read within
        ``[triggerer] on_kill_timeout`` less 5 s (``torchx_airflow.run.kills``). ``run`` asked the state
        once already, so the triggerer's supervisor has its Execution API built and answers at once.
        """
        if not self.cancel_on_kill:
            return
        from torchx_airflow.run.kills import TaskInstanceKey, akill_verdict

        verdict = await akill_verdict(TaskInstanceKey.of(getattr(self, "task_instance", None)))
        if not verdict.cancel:
            self.log.warning(
                "Trigger cancelled, but not cancelling TorchX app %s: %s. It is left running for the "
                "trigger or try that waits on it now.",
                self.app_handle,
                verdict.reason,
            )
            return
        self.log.info("Task killed (%s)", verdict.reason)
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
