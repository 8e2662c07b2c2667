"""Waiting for a TorchX app in the worker: status polls under the one retry policy, logs streamed.

A scheduler outage is waited out (``retry.StatusOutage``): the wait keeps asking at its interval
until the scheduler answers again or ``outage_timeout`` passes without a good answer.

The polls here are the only status queries of a worker's wait: log readers follow them
(``logs.AppLogStreamer``) and are stopped when the wait ends, however it ends. A deferred wait is
``triggers/``; both ask the scheduler through the same hook and policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXAppLostError

if TYPE_CHECKING:
    from torchx.specs import AppStatus

    from torchx_airflow.hooks.torchx import TorchXHook
    from torchx_airflow.retry import StatusOutage


def poll_status(
    hook: TorchXHook, app_handle: str, poll_interval: float, outage: StatusOutage
) -> AppStatus | None:
    """The app's status (None: unknown to its scheduler), asked again every ``poll_interval`` while
    the scheduler fails, within ``outage``'s budget (``retry.call_status``)."""
    from torchx_airflow.retry import call_status

    return call_status(outage, poll_interval, hook.status, app_handle)


def wait_for_app(
    hook: TorchXHook,
    app_handle: str,
    replicas: Mapping[str, int],
    poll_interval: float,
    task_log: Any,
    outage: StatusOutage,
    stream_logs: bool = True,
) -> AppStatus:
    """Poll until the app is terminal, writing its replicas' log lines to ``task_log`` meanwhile.

    Raises ``TorchXAppLostError`` when the scheduler says it does not know the app, and
    ``TorchXSchedulerOutageError`` when it gave no answer for ``outage.budget`` seconds.
    """
    from torchx_airflow.logs import AppLogStreamer

    with AppLogStreamer(hook, app_handle, replicas, task_log, enabled=stream_logs) as streamer:
        while True:
            status = poll_status(hook, app_handle, poll_interval, outage)
            if status is None:
                raise TorchXAppLostError(app_handle)
            if status.is_terminal():
                return status
            streamer.drain(timeout=poll_interval)
