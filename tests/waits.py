"""A worker's wait on an app, as ``TorchXOperator`` runs it (``run.waiting.WorkerWait``), for tests
that watch what the wait does (its status queries, its log readers) on a real scheduler."""

from __future__ import annotations

from typing import Any

from torchx_airflow.apps import role_replicas
from torchx_airflow.run.waiting import WorkerWait


def worker_wait(operator: Any, app_handle: str, app: Any, outage_timeout: float = 600.0) -> Any:
    """Poll ``app_handle`` until terminal with ``operator``'s hook, interval, logger and log streaming."""
    wait = WorkerWait(
        operator.hook, operator.poll_interval, outage_timeout, operator.log, operator.stream_logs
    )
    return wait.until_terminal(app_handle, role_replicas(app))
