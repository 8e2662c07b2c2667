"""DAG edges become tracker lineage; the Airflow context becomes run metadata.

A task is a *tracked run* when it pushed XCom ``torchx_run_id``: every ``TorchXOperator`` does (its
app handle), and so does a ``@task`` that used :func:`torchx_airflow.tracking.task_app_run`. The
parents of a task are its nearest tracked, successful ancestors: each upstream task that is a
tracked run (every map index of a mapped one), and, through upstream tasks that are not, their
own nearest tracked ancestors. Skipped or failed tasks are neither parents nor passed through.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import Context
    from torchx.tracker.api import TrackerBase

log = logging.getLogger(__name__)

XCOM_RUN_ID = "torchx_run_id"
SUCCESS = "success"
METADATA_PREFIX = "airflow_"


def airflow_run_id(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """Tracker run id of a task that is not a TorchX app: ``airflow://dag/run/task[/map_index]``."""
    base = f"airflow://{dag_id}/{run_id}/{task_id}"
    return base if map_index is None or map_index < 0 else f"{base}/{map_index}"


def airflow_metadata(context: Context) -> dict[str, Any]:
    """The Airflow side of a run: which DAG run, task, map index and try launched it."""
    ti = context["ti"]
    dag_run = context["dag_run"]
    when = getattr(dag_run, "logical_date", None) or getattr(dag_run, "run_after", None)
    return {
        f"{METADATA_PREFIX}dag_id": ti.dag_id,
        f"{METADATA_PREFIX}run_id": ti.run_id,
        f"{METADATA_PREFIX}task_id": ti.task_id,
        f"{METADATA_PREFIX}map_index": ti.map_index if ti.map_index is not None else -1,
        f"{METADATA_PREFIX}try_number": ti.try_number,
        f"{METADATA_PREFIX}logical_date": when.isoformat() if when is not None else None,
        f"{METADATA_PREFIX}upstream_task_ids": sorted(context["task"].upstream_task_ids),
    }


def _states_by_task(states: Mapping[str, Any], task_ids: Sequence[str]) -> dict[str, dict[int, str]]:
    """Airflow reports mapped instances as ``<task_id>_<map_index>``: split them back out."""
    wanted = set(task_ids)
    by_task: dict[str, dict[int, str]] = {t: {} for t in task_ids}
    for key, state in states.items():
        if key in wanted:
            by_task[key][-1] = state
            continue
        task_id, _, index = key.rpartition("_")
        if task_id in wanted and index.isdigit():
            by_task[task_id][int(index)] = state
    return by_task


def _run_ids_of(ti: Any, task_id: str, states: Mapping[int, str]) -> list[str]:
    """The tracker run ids a task pushed, from its successful instances only."""
    if all(state == SUCCESS for state in states.values()):
        values = ti.xcom_pull(task_ids=[task_id], key=XCOM_RUN_ID) or []
    else:
        ok = sorted(i for i, state in states.items() if state == SUCCESS)
        values = ti.xcom_pull(task_ids=[task_id], key=XCOM_RUN_ID, map_indexes=ok) or []
    return [v for v in values if isinstance(v, str) and v]


def parent_runs(context: Context) -> list[str]:
    """The tracker run ids of this task's nearest tracked, successful ancestors, in DAG order."""
    ti = context["ti"]
    task = context["task"]
    dag = task.dag
    parents: list[str] = []
    seen: set[str] = set()
    frontier = sorted(task.upstream_task_ids)
    while frontier:
        seen.update(frontier)
        response = ti.get_task_states(dag_id=ti.dag_id, task_ids=list(frontier), run_ids=[ti.run_id])
        by_task = _states_by_task(response.get(ti.run_id, {}), frontier)
        upstream: set[str] = set()
        for task_id in frontier:
            states = by_task[task_id]
            if not any(state == SUCCESS for state in states.values()):
                continue  # skipped, failed, not run: not a parent, and lineage does not flow through it
            run_ids = _run_ids_of(ti, task_id, states)
            if run_ids:
                parents.extend(run_ids)
            else:
                upstream.update(dag.get_task(task_id).upstream_task_ids)
        frontier = sorted(upstream - seen)
    return list(dict.fromkeys(parents))


def _attempt(what: str, store: TrackerBase, fn: Any, attempts: int = 3) -> bool:
    """``fn()`` with up to ``attempts`` tries (tenacity, short backoff); a warning when all fail."""
    from tenacity import Retrying, stop_after_attempt, wait_exponential

    try:
        Retrying(stop=stop_after_attempt(attempts), wait=wait_exponential(0.2, max=2), reraise=True)(fn)
        return True
    except Exception as e:
        name = type(e).__name__
        log.warning("Could not %s in %r after %d attempts: %s: %s", what, store, attempts, name, e)
        return False


def record_run(
    stores: Iterable[TrackerBase], run_id: str, parents: Sequence[str], metadata: Mapping[str, Any]
) -> None:
    """Write ``run_id``'s lineage edges and Airflow metadata to every store.

    Edges are idempotent in the stores, so an edge the job adds itself (``TORCHX_PARENT_RUN_ID``) is
    not doubled. A store that keeps failing gets a warning, not a failed task: the job is already
    running, and lineage can be added later with ``add_source``.
    """
    for store in stores:
        for parent in parents:
            _attempt(f"record {run_id} <- {parent}", store, lambda s=store, p=parent: s.add_source(run_id, p))
        _attempt(
            f"record Airflow metadata of {run_id}", store, lambda s=store: s.add_metadata(run_id, **metadata)
        )


def run_results(store: TrackerBase, run_id: str) -> dict[str, Any]:
    """The run's metadata, artifacts and sources from ``store``, JSON-safe, for XCom."""
    from torchx_airflow.apps import json_safe

    try:
        metadata = dict(store.metadata(run_id))
        artifacts = {
            name: {"name": a.name, "path": a.path, "metadata": dict(a.metadata or {})}
            for name, a in store.artifacts(run_id).items()
        }
        sources = sorted({s.source_run_id for s in store.sources(run_id)})
    except Exception as e:
        log.warning("Could not read the results of %s from %r: %s: %s", run_id, store, type(e).__name__, e)
        return {"metadata": {}, "artifacts": {}, "sources": []}
    return json_safe({"metadata": metadata, "artifacts": artifacts, "sources": sources})
