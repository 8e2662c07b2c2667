"""Waiting for a TorchX app in the worker: status polls within one outage budget, logs streamed.

A scheduler outage is waited out (``retry.StatusOutage``): the wait keeps asking at its interval
until the scheduler answers again or ``outage_timeout`` passes without a good answer.

The polls here are the only status queries of a worker's wait: log readers follow them
(``logs.AppLogStreamer``) and are stopped when the wait ends, however it ends. A deferred wait is
``triggers/``; both ask the scheduler through the same hook and policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXAppLostError, TorchXConfigError

if TYPE_CHECKING:
    from torchx.specs import AppStatus

    from torchx_airflow.hooks.torchx import TorchXHook


def waits_in_triggerer(
    hook: TorchXHook, scheduler: str, deferrable: bool, launched_here: bool, task_log: Any
) -> bool:
    """Where a wait on an app of ``scheduler`` happens: the triggerer (True) or the worker (False).

    The one rule for the operator and the sensor. Apps of a scheduler whose apps outlive the
    launching process (slurm, kubernetes, ...) wait where the author asked (``deferrable``). Apps of
    a scheduler that runs them as the launcher's child processes (local_cwd, local_docker) are
    visible only from that process: the task that launched them waits in the worker (with a
    warning when ``deferrable``), so one DAG runs on either kind; any other task cannot wait on them
    in the triggerer (``TorchXConfigError``).
    """
    if hook.apps_outlive_launcher(scheduler) or not deferrable:
        return deferrable
    if not launched_here:
        raise TorchXConfigError(
            f"deferrable=True cannot wait on an app of scheduler {scheduler!r}: its apps are only visible "
            "from the process that launched them. Wait in the launching TorchXOperator "
            "(wait_for_completion=True)."
        )
    task_log.warning(
        "deferrable=True, but scheduler %s runs apps as child processes of this worker, which the "
        "triggerer cannot see: waiting in the worker instead. Use a scheduler with its own state "
        "(slurm, kubernetes, ...) to wait in the triggerer.",
        scheduler,
    )
    return False


def check_leavable(hook: TorchXHook, scheduler: str, wait_for_completion: bool) -> None:
    """A task may return without waiting only on a scheduler whose apps outlive it."""
    if not wait_for_completion and not hook.apps_outlive_launcher(scheduler):
        raise TorchXConfigError(
            f"wait_for_completion=False cannot be used with scheduler {scheduler!r}: its apps "
            "live in the launching task's process and end with it. Keep wait_for_completion=True, or "
            "use a scheduler with its own state (slurm, kubernetes, ...) to wait from another task."
        )


#: an event's keys that are the trigger's bookkeeping, not the app's status
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


def resumed_app(event: Any) -> tuple[str, str, dict[str, Any]]:
    """``read_event`` for the task that launched the app: an app its scheduler no longer knows is
    ``TorchXAppLostError`` (retryable: the next try reattaches if it comes back, else submits anew)."""
    from torchx_airflow.exceptions import TorchXAppLostError, TorchXAppNotFoundError

    try:
        return read_event(event)
    except TorchXAppNotFoundError as e:
        raise TorchXAppLostError(e.app_handle) from e


class WorkerWait:
    """One task execution's status polls of its app: every poll of the same app shares one outage
    budget (``outage_timeout`` seconds counted from the scheduler's last good answer)."""

    def __init__(
        self,
        hook: TorchXHook,
        poll_interval: float,
        outage_timeout: float,
        task_log: Any,
        stream_logs: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from torchx_airflow.retry import StatusPolls

        self.hook = hook
        self.poll_interval = poll_interval
        self.outage_timeout = outage_timeout
        self.task_log = task_log
        self.stream_logs = stream_logs
        self.polls = StatusPolls(hook.status, poll_interval, outage_timeout, task_log, clock=clock)

    def status(self, app_handle: str) -> AppStatus | None:
        """The app's status (None: unknown to its scheduler), asked again every ``poll_interval``
        while the scheduler fails, within the outage budget (``retry.StatusPolls``)."""
        status: AppStatus | None = self.polls.status(app_handle)
        return status

    def until_terminal(self, app_handle: str, replicas: Mapping[str, int]) -> AppStatus:
        """Poll until the app is terminal, writing its replicas' log lines to the task log meanwhile.

        Raises ``TorchXAppLostError`` when the scheduler says it does not know the app, and
        ``TorchXSchedulerOutageError`` when it gave no answer for ``outage_timeout`` seconds.
        """
        from torchx_airflow.run.logs import AppLogStreamer

        with AppLogStreamer(
            self.hook, app_handle, replicas, self.task_log, enabled=self.stream_logs
        ) as streamer:
            while True:
                status = self.status(app_handle)
                if status is None:
                    raise TorchXAppLostError(app_handle)
                if status.is_terminal():
                    return status
                streamer.drain(timeout=self.poll_interval)
