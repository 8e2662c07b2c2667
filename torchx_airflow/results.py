"""A finished TorchX app as the task's result: its return value, its XComs and its asset events.

``finish_run`` turns a terminal (or, without waiting, a current) status summary into what the task
returns: the summary plus the run's ``metadata``, ``artifacts`` and ``sources`` read from the first
tracker; it pushes XComs ``ui_url`` and ``torchx_run_id`` and emits the asset events of
``artifact_assets``, or raises ``TorchXAppFailedError`` for an app that ended other than SUCCEEDED.
The run's ``usage`` (and ``cost``) go into the result and the trackers' metadata either way.
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
from torchx_airflow.usage import COST_KEY, USAGE_KEY

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
    usage: Mapping[str, Any] | None = None,
    cost: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The task's return value from the app's status ``summary``; raises unless it SUCCEEDED.

    ``usage`` and ``cost`` (``torchx_airflow.usage``) become the result's ``usage`` and ``cost`` and,
    for an ended app, the run's tracker metadata, also when the app failed (the error carries the
    usage too). Tracker results are read within ``tracker_timeout`` (past it, a warning and empty
    results: the app's outcome never waits on a tracker).
    """
    from torchx_airflow.retry import call_within

    result = dict(summary)
    ti = context["ti"]
    if result.get("ui_url"):
        ti.xcom_push(key=XCOM_UI_URL, value=result["ui_url"])
    task_log.info("TorchX app %s is %s %s", app_handle, result["state"], result["msg"])
    if usage is not None:
        _add_usage(result, app_handle, usage, cost, terminal, trackers, tracker_timeout, task_log)
    if terminal and result["state"] != SUCCEEDED:
        raise TorchXAppFailedError(
            app_handle, result["state"], result["msg"], result["structured_error_msg"], result["roles"], usage
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
    emit_asset_events(context, artifact_assets, result)
    return result


def _add_usage(
    result: dict[str, Any],
    app_handle: str,
    usage: Mapping[str, Any],
    cost: Mapping[str, Any] | None,
    terminal: bool,
    trackers: TrackerSet,
    tracker_timeout: float,
    task_log: Any,
) -> None:
    """``usage`` and ``cost`` into the result and, for an ended app, into every tracker's metadata."""
    from torchx_airflow.retry import call_within
    from torchx_airflow.usage import describe_usage, record_usage

    result["usage"] = dict(usage)
    if cost is not None:
        result["cost"] = dict(cost)
    if not terminal:
        return
    task_log.info("TorchX app %s used %s", app_handle, describe_usage(usage, cost))
    if trackers:
        call_within(
            tracker_timeout,
            f"Recording the usage of {app_handle}",
            lambda: record_usage(trackers, app_handle, usage, cost),
        )
