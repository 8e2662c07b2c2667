"""A finished TorchX app as the task's result: its return value, its XComs and its asset events.

``finish_run`` turns a terminal (or, without waiting, a current) status summary into what the task
returns: the summary plus the run's ``metadata``, ``artifacts`` and ``sources`` read from the first
tracker; it pushes XComs ``ui_url`` and ``torchx_run_id`` and emits the asset events of
``artifact_assets``, or raises ``TorchXAppFailedError`` for an app that ended other than SUCCEEDED.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torchx_airflow.apps import SUCCEEDED, json_safe, summarize_status
from torchx_airflow.assets import emit_asset_events
from torchx_airflow.dag_lineage import XCOM_RUN_ID
from torchx_airflow.exceptions import TorchXAppFailedError, TorchXAppNotFoundError
from torchx_airflow.links.torchx import XCOM_UI_URL
from torchx_airflow.secrets import strip_userinfo

if TYPE_CHECKING:
    from airflow.sdk import Asset, AssetAlias, Context
    from torchx.specs import AppDef, AppStatus
    from torchx.tracker.api import TrackerBase

    from torchx_airflow.trackers import TrackerSet

log = logging.getLogger(__name__)

NO_RESULTS: dict[str, Any] = {"metadata": {}, "artifacts": {}, "sources": []}


def run_results(store: TrackerBase, run_id: str) -> dict[str, Any]:
    """The run's metadata, artifacts and sources from ``store``, JSON-safe, for XCom.

    The job writes the paths: a URL's user info (``https://bob:pw@host/x``) is taken out of every
    artifact path and source id, since XComs, asset events and lineage are read by people.
    """
    try:
        metadata = dict(store.metadata(run_id))
        artifacts = {
            name: {"name": a.name, "path": strip_userinfo(str(a.path)), "metadata": dict(a.metadata or {})}
            for name, a in store.artifacts(run_id).items()
        }
        sources = sorted({strip_userinfo(s.source_run_id) for s in store.sources(run_id)})
    except Exception as e:
        log.warning("Could not read the results of %s from %r: %s: %s", run_id, store, type(e).__name__, e)
        return {key: type(value)() for key, value in NO_RESULTS.items()}
    return json_safe({"metadata": metadata, "artifacts": artifacts, "sources": sources})


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
) -> dict[str, Any]:
    """The task's return value from the app's status ``summary``; raises unless it SUCCEEDED.

    Tracker results are read within ``tracker_timeout`` (past it, a warning and empty results: the
    app's outcome never waits on a tracker).
    """
    result = dict(summary)
    ti = context["ti"]
    if result.get("ui_url"):
        ti.xcom_push(key=XCOM_UI_URL, value=result["ui_url"])
    task_log.info("TorchX app %s is %s %s", app_handle, result["state"], result["msg"])
    if terminal and result["state"] != SUCCEEDED:
        raise TorchXAppFailedError(
            app_handle, result["state"], result["msg"], result["structured_error_msg"], result["roles"]
        )
    result.update({key: type(value)() for key, value in NO_RESULTS.items()})
    if trackers:
        from torchx_airflow.retry import call_within

        done, results = call_within(
            tracker_timeout,
            f"Reading the results of {app_handle}",
            lambda: run_results(trackers.stores[0], app_handle),
        )
        if done:
            result.update(results)
    ti.xcom_push(key=XCOM_RUN_ID, value=app_handle)
    emit_asset_events(context, artifact_assets, result)
    return result
