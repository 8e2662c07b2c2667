"""A finished TorchX app as the task's result: its return value, its XComs and its asset events.

``finish_run`` turns a terminal (or, without waiting, a current) status summary into what the task
returns: the summary plus the run's ``metadata``, ``artifacts`` and ``sources`` read from the first
tracker; it pushes XComs ``ui_url`` and ``torchx_run_id`` and emits the asset events of
``artifact_assets``, or raises ``TorchXAppFailedError`` for an app that ended other than SUCCEEDED.
What policies add when the app ends (``usage``, ``cost``, ``attempts``) comes in the summary.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchx_airflow.apps import SUCCEEDED, summarize_status
from torchx_airflow.exceptions import TorchXAppFailedError, TorchXAppNotFoundError
from torchx_airflow.lineage.assets import emit_asset_events
from torchx_airflow.lineage.keys import COST_KEY, USAGE_KEY, XCOM_RUN_ID, XCOM_UI_URL
from torchx_airflow.lineage.recorded import NO_RESULTS, run_results

if TYPE_CHECKING:
    from airflow.sdk import Asset, AssetAlias, Context
    from torchx.specs import AppDef, AppStatus

    from torchx_airflow.lineage.stores import TrackerSet

log = logging.getLogger(__name__)


def status_summary(
    app_handle: str, status: AppStatus | None, app: AppDef | None, launcher_bound: bool = False
) -> dict[str, Any]:
    """The JSON-safe summary of the app's status; ``TorchXAppNotFoundError`` when there is none
    (``launcher_bound``: the scheduler's apps end with the process that launched them)."""
    if status is None:
        raise TorchXAppNotFoundError(app_handle, launcher_bound)
    return summarize_status(app_handle, status, app)


def finish_run(
    context: Context,
    app_handle: str,
    summary: Mapping[str, Any],
    terminal: bool,
    trackers: TrackerSet,
    tracker_timeout: float,
    artifact_assets: Mapping[str, Asset | AssetAlias],
    task_log: Any = log,
    output_roots: Sequence[str] = (),
) -> dict[str, Any]:
    """The task's return value from the app's status ``summary``; raises unless it SUCCEEDED.

    ``summary`` carries what the policies added when the app ended (its ``usage`` goes into the
    error of an app that failed). Tracker results are read within ``tracker_timeout`` (past it, a
    warning and empty results: the app's outcome never waits on a tracker).
    """
    from torchx_airflow.retry import call_within

    result = dict(summary)
    ti = context["ti"]
    if result.get("ui_url"):
        ti.xcom_push(key=XCOM_UI_URL, value=result["ui_url"])
    task_log.info("TorchX app %s is %s %s", app_handle, result["state"], result["msg"])
    if terminal and result["state"] != SUCCEEDED:
        raise TorchXAppFailedError(
            app_handle,
            result["state"],
            result["msg"],
            result["structured_error_msg"],
            result["roles"],
            result.get("usage"),
        )
    result.update({key: type(value)() for key, value in NO_RESULTS.items()})
    if trackers:
        done, results = call_within(
            tracker_timeout,
            f"Reading the results of {app_handle}",
            lambda: run_results(trackers.stores[0], app_handle),
        )
        if done:
            result.update(results)
            for key in (USAGE_KEY, COST_KEY):  # the result has them at the top
                result["metadata"].pop(key, None)
    ti.xcom_push(key=XCOM_RUN_ID, value=app_handle)
    emit_asset_events(context, artifact_assets, result, output_roots)
    return result
