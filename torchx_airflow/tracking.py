"""A task's trackers, and tracking for tasks that are not TorchX apps (an ``AppRun`` for a ``@task``).

Inside any Python task::

    from torchx_airflow.tracking import task_app_run

    @task
    def featurize():
        with task_app_run() as run:            # trackers of the torchx_default connection
            run.add_metadata(rows=1000)
            run.add_artifact("features", "s3://bucket/features.parquet")

The run id is ``airflow://<dag_id>/<run_id>/<task_id>[/<map_index>]``. Its parents (the nearest
upstream TorchX apps and tracked tasks) become its sources, it gets the same Airflow metadata as a
TorchX app, and when the block ends without an error the run id goes to XCom ``torchx_run_id``, so
downstream TorchX tasks list it as a source.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, cast

from torchx_airflow.apps import airflow_run_id
from torchx_airflow.hooks.torchx import TorchXHook
from torchx_airflow.hooks.tracker import trackers_for
from torchx_airflow.lineage.edges import airflow_metadata, parent_runs, record_run
from torchx_airflow.lineage.keys import XCOM_RUN_ID
from torchx_airflow.lineage.stores import TrackerSet, normalize_conn_ids

if TYPE_CHECKING:
    from airflow.sdk import Context
    from torchx.tracker.api import AppRun, TrackerBase

__all__ = ["task_app_run", "task_trackers"]


def task_trackers(
    tracker_conn_ids: str | Sequence[str] | None, torchx_conn_id: str, where: str = "task"
) -> TrackerSet:
    """A task's trackers: ``tracker_conn_ids`` when given, else the ``trackers`` of its torchx connection."""
    conn_ids = normalize_conn_ids(tracker_conn_ids, where)
    if conn_ids is None:
        conn_ids = TorchXHook(torchx_conn_id).settings.trackers
    return trackers_for(conn_ids)


@contextlib.contextmanager
def task_app_run(
    context: Context | None = None,
    *,
    tracker_conn_ids: str | Sequence[str] | None = None,
    torchx_conn_id: str = TorchXHook.default_conn_name,
) -> Iterator[AppRun]:
    """An ``AppRun`` for the running task, recorded with its lineage in the task's trackers.

    :param context: the task's context (default: the current one).
    :param tracker_conn_ids: tracker connections; default: the ``trackers`` of ``torchx_conn_id``.
    :param torchx_conn_id: the ``torchx`` connection whose ``trackers`` are used by default.
    """
    from torchx.tracker.api import AppRun

    if context is None:
        from airflow.sdk import get_current_context

        context = get_current_context()
    ti = context["ti"]
    trackers = task_trackers(tracker_conn_ids, torchx_conn_id, f"Task {ti.task_id!r}")
    run_id = airflow_run_id(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
    record_run(trackers.stores, run_id, parent_runs(context), airflow_metadata(context))
    # this package's stores are TorchX trackers (TrackerBase) with more (ProviderStore)
    yield AppRun(id=run_id, backends=cast("list[TrackerBase]", trackers.stores))
    ti.xcom_push(key=XCOM_RUN_ID, value=run_id)
