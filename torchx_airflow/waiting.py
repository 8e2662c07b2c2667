"""Waiting for a TorchX app in the worker: status polls under the one retry policy, logs streamed.

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


def poll_status(hook: TorchXHook, app_handle: str, poll_interval: float) -> AppStatus | None:
    """The app's status (None: unknown to its scheduler), retried with ``retry.status_retrying``."""
    from torchx_airflow.retry import status_retrying

    retrying = status_retrying(f"Status of {app_handle}", max_wait=poll_interval)
    return retrying(hook.status, app_handle)


def wait_for_app(
    hook: TorchXHook,
    app_handle: str,
    replicas: Mapping[str, int],
    poll_interval: float,
    task_log: Any,
    stream_logs: bool = True,
) -> AppStatus:
    """Poll until the app is terminal, writing its replicas' log lines to ``task_log`` meanwhile.

    Raises ``TorchXAppLostError`` when the scheduler stops knowing the app.
    """
    from torchx_airflow.logs import AppLogStreamer

    with AppLogStreamer(hook, app_handle, replicas, task_log, enabled=stream_logs) as streamer:
        while True:
            status = poll_status(hook, app_handle, poll_interval)
            if status is None:
                raise TorchXAppLostError(app_handle)
            if status.is_terminal():
                return status
            streamer.drain(timeout=poll_interval)
