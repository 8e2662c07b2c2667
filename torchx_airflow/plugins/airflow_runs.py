"""What Airflow knows about a DAG run's tracked runs, read from the metadata DB in a few queries.

Each TorchX task pushes XCom ``torchx_run_id`` (its app handle), ``app_handle``, its result
(``return_value``: the app's final state, its usage and cost) and, when there are any, ``ui_url``
and ``tracker_url``; a ``@task`` with ``task_app_run`` pushes ``torchx_run_id``. The trackers a
task used are its rendered ``tracker_conn_ids`` or, when that is None, the ``trackers`` of its
rendered ``torchx_conn_id`` connection (``torchx_default`` for a task without those fields).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from sqlalchemy import select

from torchx_airflow.apps import AIRFLOW_RUN_SCHEME
from torchx_airflow.hooks.torchx import TorchXHook
from torchx_airflow.lineage.keys import XCOM_RUN_ID, XCOM_TRACKER_URL, XCOM_UI_URL
from torchx_airflow.plugins.graph import AirflowTask, LineageGraph, RunNode, Seed
from torchx_airflow.plugins.usage_view import RunUsage

if TYPE_CHECKING:
    from sqlalchemy.orm import Session
    from torchx_airflow_tracker.protocol import ProviderStore

log = logging.getLogger(__name__)

XCOM_RESULT = "return_value"
XCOM_KEYS = (XCOM_RUN_ID, XCOM_RESULT, XCOM_UI_URL, XCOM_TRACKER_URL)
DEFAULT_TORCHX_CONN_ID = TorchXHook.default_conn_name
AIRFLOW_RUN_PREFIX = f"{AIRFLOW_RUN_SCHEME}://"  # apps.airflow_run_id: airflow://dag/run/task


class DagRunNotFound(LookupError):  # noqa: N818 - named as Airflow names its own
    """The DAG run the view was asked for does not exist."""

    def __init__(self, dag_id: str, run_id: str) -> None:
        super().__init__(
            f"DAG run {run_id!r} of DAG {dag_id!r} does not exist. Open the view from a DAG run's page, "
            "or check the DAG id and run id in the URL."
        )


@dataclass
class TrackedTask:
    """One task instance of the DAG run that pushed a tracker run id."""

    seed: Seed
    tracker_conn_ids: tuple[str, ...] | None  # None: the trackers of torchx_conn_id
    torchx_conn_id: str = DEFAULT_TORCHX_CONN_ID


@dataclass
class TrackerGroup:
    """Tasks that track to the same connections, and the store their lineage is read from."""

    conn_ids: tuple[str, ...]
    tasks: list[TrackedTask] = field(default_factory=list)


def task_url(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """The task instance's page in the Airflow UI (a path on the API server)."""
    path = f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/{quote(task_id, safe='')}"
    return path if map_index < 0 else f"{path}/mapped/{map_index}"


def xcom_values(session: Session, dag_id: str, run_ids: Iterable[str], keys: Sequence[str]) -> dict:
    """``{(run id, task id, map index): {key: value}}`` of the DAG runs' XComs ``keys``, one query."""
    from airflow.models.xcom import XComModel

    rows = session.execute(
        select(
            XComModel.run_id, XComModel.task_id, XComModel.map_index, XComModel.key, XComModel.value
        ).where(XComModel.dag_id == dag_id, XComModel.run_id.in_(list(run_ids)), XComModel.key.in_(keys))
    )
    values: dict[tuple[str, str, int], dict[str, Any]] = {}
    for row in rows:
        values.setdefault((row.run_id, row.task_id, row.map_index), {})[row.key] = (
            XComModel.deserialize_value(row)
        )
    return values


def conn_ids_of(value: Any) -> tuple[str, ...] | None:
    """A rendered ``tracker_conn_ids``: a list, one comma-separated string, or None."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.split(",")
    if isinstance(value, list | tuple):
        return tuple(dict.fromkeys(str(v).strip() for v in value if str(v).strip()))
    return None


def _rendered(session: Session, dag_id: str, run_id: str) -> dict[tuple[str, int], dict[str, Any]]:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF

    rows = session.execute(
        select(RTIF.task_id, RTIF.map_index, RTIF.rendered_fields).where(
            RTIF.dag_id == dag_id, RTIF.run_id == run_id
        )
    )
    return {(row.task_id, row.map_index): dict(row.rendered_fields or {}) for row in rows}


def seed_of(dag_id: str, run_id: str, task_id: str, map_index: int, state: Any, xcoms: dict) -> Seed:
    """The run a task instance pushed (``xcoms``: its XComs by key), with its links, usage, cache hit."""
    result = xcoms.get(XCOM_RESULT)
    links = {"airflow": task_url(dag_id, run_id, task_id, map_index)}
    for key, name in ((XCOM_UI_URL, "scheduler_ui"), (XCOM_TRACKER_URL, "mlflow")):
        if isinstance(xcoms.get(key), str) and xcoms[key]:
            links[name] = xcoms[key]
    return Seed(
        run_id=xcoms[XCOM_RUN_ID],
        task=AirflowTask(dag_id, run_id, task_id, map_index, str(state) if state else None),
        app_state=result.get("state") if isinstance(result, dict) else None,
        links=links,
        usage=RunUsage.from_values(result.get("usage"), result.get("cost"))
        if isinstance(result, dict)
        else None,
        cached_from=_cached_from(result),
    )


def _cached_from(result: Any) -> str | None:
    """The earlier run a cache hit's result came from (``cached_from``), else None."""
    if isinstance(result, dict) and result.get("cache_hit") and isinstance(result.get("cached_from"), str):
        return str(result["cached_from"])
    return None


def tracked_tasks(session: Session, dag_id: str, run_id: str) -> list[TrackedTask]:
    """The DAG run's task instances that pushed a tracker run id, with the trackers they used."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance as TI

    if session.scalar(select(DagRun.id).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)) is None:
        raise DagRunNotFound(dag_id, run_id)
    xcoms = xcom_values(session, dag_id, [run_id], XCOM_KEYS)
    rendered = _rendered(session, dag_id, run_id)
    states = session.execute(
        select(TI.task_id, TI.map_index, TI.state).where(TI.dag_id == dag_id, TI.run_id == run_id)
    )
    tasks = []
    for row in sorted(states, key=lambda r: (r.task_id, r.map_index)):
        pushed = xcoms.get((run_id, row.task_id, row.map_index), {})
        if not isinstance(pushed.get(XCOM_RUN_ID), str) or not pushed[XCOM_RUN_ID]:
            continue
        fields = rendered.get((row.task_id, row.map_index), {})
        tasks.append(
            TrackedTask(
                seed=seed_of(dag_id, run_id, row.task_id, row.map_index, row.state, pushed),
                tracker_conn_ids=conn_ids_of(fields.get("tracker_conn_ids")),
                torchx_conn_id=str(fields.get("torchx_conn_id") or DEFAULT_TORCHX_CONN_ID),
            )
        )
    return tasks


def tracker_groups(tasks: Sequence[TrackedTask]) -> tuple[list[TrackerGroup], list[str]]:
    """Tasks grouped by the tracker connections they used (the torchx connection's when not set).

    Returns the groups and, for a torchx connection that cannot be read, a warning naming it:
    its tasks' runs are left out rather than failing the whole view.
    """

    defaults: dict[str, tuple[str, ...]] = {}
    warnings: dict[str, str] = {}
    groups: dict[tuple[str, ...], TrackerGroup] = {}
    for task in tasks:
        conn_ids = task.tracker_conn_ids
        if conn_ids is None:
            conn_id = task.torchx_conn_id
            if conn_id not in defaults and conn_id not in warnings:
                try:
                    defaults[conn_id] = tuple(TorchXHook(conn_id).settings.trackers)
                except Exception as e:
                    warnings[conn_id] = (
                        f"The runs of tasks using torchx connection {conn_id!r} are not shown: its "
                        f"trackers cannot be read ({type(e).__name__}: {e})."
                    )
            if conn_id in warnings:
                continue
            conn_ids = defaults[conn_id]
        groups.setdefault(conn_ids, TrackerGroup(conn_ids)).tasks.append(task)
    return [group for group in groups.values() if group.conn_ids], list(warnings.values())


def open_first_store(conn_ids: Sequence[str]) -> ProviderStore:
    """The store a group's lineage is read from: its first tracker, as the operator reads results
    (within the bounds of a reader, ``ReadLimits.for_readers()``)."""
    from torchx_airflow.hooks.tracker import trackers_for

    return trackers_for(conn_ids[:1]).stores[0]


def other_dag_ids(graph: LineageGraph) -> dict[str, str]:
    """The DAG of each run from another DAG run: as its metadata records, or as its ``airflow://``
    run id names it (a tracked Python task whose metadata is not readable)."""
    dags: dict[str, str] = {}
    for run in graph.runs.values():
        if run.in_dag_run:
            continue
        if run.task is not None:
            dags[run.run_id] = run.task.dag_id
        elif run.run_id.startswith(AIRFLOW_RUN_PREFIX):
            dags[run.run_id] = run.run_id.removeprefix(AIRFLOW_RUN_PREFIX).split("/", 1)[0]
    return dags


def enrich_other_runs(session: Session, graph: LineageGraph, readable_dag_ids: set[str]) -> None:
    """Task state and links for runs of other DAG runs; hide the runs of DAGs the user may not read.

    A run whose DAG the user may not read becomes an opaque node (``LineageGraph.hide_runs``): its
    id, DAG, run, task and artifacts would tell what the user may not see.
    """
    dags = other_dag_ids(graph)
    graph.hide_runs({run_id for run_id, dag_id in dags.items() if dag_id not in readable_dag_ids})
    by_dag: dict[str, list[tuple[RunNode, AirflowTask]]] = {}
    for run in graph.runs.values():
        if not run.in_dag_run and run.task is not None:
            by_dag.setdefault(run.task.dag_id, []).append((run, run.task))
    for dag_id, runs in by_dag.items():
        _enrich_dag(session, dag_id, runs)


def _enrich_dag(session: Session, dag_id: str, runs: list[tuple[RunNode, AirflowTask]]) -> None:
    """One query for the task states and one for the XComs of all the DAG's runs in the graph."""
    from airflow.models.taskinstance import TaskInstance as TI

    run_ids = {task.run_id for _, task in runs}
    rows = session.execute(
        select(TI.run_id, TI.task_id, TI.map_index, TI.state).where(
            TI.dag_id == dag_id, TI.run_id.in_(run_ids)
        )
    )
    states = {(r.run_id, r.task_id, r.map_index): r.state for r in rows}
    xcoms = xcom_values(session, dag_id, run_ids, XCOM_KEYS)
    for run, task in runs:
        key = (task.run_id, task.task_id, task.map_index)
        if key not in states:
            continue  # the DAG run was deleted: the tracker still knows the run
        pushed = {**xcoms.get(key, {}), XCOM_RUN_ID: run.run_id}
        seed = seed_of(dag_id, task.run_id, task.task_id, task.map_index, states[key], pushed)
        task.state = seed.task.state if seed.task else None
        run.app_state = seed.app_state
        run.links.update(seed.links)
        run.usage = seed.usage or run.usage
        run.cached_from = seed.cached_from or run.cached_from
