"""DAG edges become tracker lineage; the Airflow context becomes run metadata.

(Not to be confused with ``openlineage.py``, the OpenLineage events of a run, nor with the lineage
view in ``plugins/``, which draws what this module records.)

A task is a *tracked run* when it pushed XCom ``torchx_run_id``: every ``TorchXOperator`` does (its
app handle), and so does a ``@task`` that used :func:`torchx_airflow.tracking.task_app_run`. The
parents of a task are its nearest tracked, successful ancestors: each upstream task that is a
tracked run (every map index of a mapped one), and, through upstream tasks that are not, their
own nearest tracked ancestors. Skipped or failed tasks are neither parents nor passed through.

An edge names the parent's artifacts the child's app names: when a role's arguments or env values
hold the path of a parent's artifact (``--data /out/prepare/data.csv``), the edge is recorded as
``add_source(child, parent, "data")``, one per artifact named, instead of one without a name; the
DAG author declares nothing. An edge whose artifact cannot be told stays without a name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchx_airflow.lineage.keys import (
    ATTEMPT_KEY,
    ENDED_BY_KEY,
    METADATA_PREFIX,
    XCOM_LINEAGE_PARENTS,
    XCOM_RUN_ID,
)

if TYPE_CHECKING:
    from airflow.sdk import Context
    from torchx.specs import AppDef
    from torchx_airflow_tracker.protocol import ProviderStore

    from torchx_airflow.lineage.stores import TrackerSet

log = logging.getLogger(__name__)

SUCCESS = "success"
#: The Airflow identity recorded on every run, as tracker metadata keys (what the lineage view reads).
AIRFLOW_IDENTITY_KEYS = {
    name: f"{METADATA_PREFIX}{name}" for name in ("dag_id", "run_id", "task_id", "map_index")
}
#: Recorded on the jobs of a task that resubmitted one (``torchx_airflow.policies.resubmission``): which
#: attempt a run is, and on an ended one, the infrastructure's reason (``NODE_FAIL``).
#: Metadata of a cache hit's run (``policies.cache.policy``): the earlier run it returned, the key.


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


def _named_parents(ti: Any, task_id: str, child_task_id: str) -> list[str] | None:
    """The parents an upstream task that is no run names for this task's map index (a sweep's plan
    names each segment's previous segment: ``XCOM_LINEAGE_PARENTS``); None: it names none."""
    named = ti.xcom_pull(task_ids=task_id, key=XCOM_LINEAGE_PARENTS, map_indexes=-1)
    by_index = named.get(child_task_id) if isinstance(named, Mapping) else None
    index = getattr(ti, "map_index", -1)
    if not isinstance(by_index, list) or not isinstance(index, int) or not 0 <= index < len(by_index):
        return None
    parents = by_index[index]
    if not isinstance(parents, list):
        return None
    return [p for p in parents if isinstance(p, str) and p]


def parent_runs(context: Context) -> list[str]:
    """The tracker run ids of this task's nearest tracked, successful ancestors, in DAG order."""
    ti = context["ti"]
    task = context["task"]
    dag = task.dag
    if dag is None:  # a running task belongs to a DAG; only an unexpanded mapped task has none
        raise RuntimeError(f"Task {task.task_id!r} has no DAG: its parents cannot be found")
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
            named = None if run_ids else _named_parents(ti, task_id, task.task_id)
            if run_ids or named is not None:
                parents.extend(run_ids or named or [])
            else:
                upstream.update(dag.get_task(task_id).upstream_task_ids)
        frontier = sorted(upstream - seen)
    return list(dict.fromkeys(parents))


def _attempt(what: str, store: ProviderStore, fn: Any) -> bool:
    """``fn()`` under the provider's tracker-write policy (``torchx_airflow.retry``); a warning when
    every attempt failed."""
    from torchx_airflow.retry import TRACKER_ATTEMPTS, tracker_retrying

    try:
        tracker_retrying(f"Recording {what} in {store!r}")(fn)
        return True
    except Exception as e:
        name = type(e).__name__
        log.warning("Could not %s in %r after %d attempts: %s: %s", what, store, TRACKER_ATTEMPTS, name, e)
        return False


def record_attempt(
    store: ProviderStore, run_id: str, attempt: int, previous: str, reason: str, artifact_name: str | None
) -> None:
    """Lineage of a resubmitted job: ``run_id`` (attempt ``attempt``) has the ``previous`` job as its
    source (through its checkpoint ``artifact_name``), and each run says which attempt it is, the
    previous one also what ended it. A store that keeps failing costs a warning (``_attempt``)."""
    _attempt(
        f"record {run_id} <- {previous}", store, lambda: store.add_source(run_id, previous, artifact_name)
    )
    _attempt(
        f"record the attempts of {run_id}",
        store,
        lambda: store.add_metadata(previous, **{ATTEMPT_KEY: attempt - 1, ENDED_BY_KEY: reason}),
    )
    _attempt(
        f"record the attempt of {run_id}", store, lambda: store.add_metadata(run_id, **{ATTEMPT_KEY: attempt})
    )


def artifact_labels(store: ProviderStore, parents: Sequence[str], app: AppDef) -> dict[str, list[str]]:
    """Parent -> the names of its artifacts (in ``store``) whose paths ``app`` names in a role's
    arguments or env values; parents with none are left out. A parent whose artifacts cannot be read
    is left out too (its edge stays without a name)."""
    from torchx_airflow.apps import app_words, names_path
    from torchx_airflow.secrets import strip_userinfo

    words = app_words(app)
    words += "\n" + strip_userinfo(words)  # recorded paths come without their user info
    labels: dict[str, list[str]] = {}
    for parent in parents:
        try:
            artifacts = store.artifacts(parent)
        except Exception as e:
            log.warning(
                "Edges from %s stay unnamed: its artifacts cannot be read: %s: %s",
                parent,
                type(e).__name__,
                e,
            )
            continue
        names = sorted(
            name for name, a in artifacts.items() if names_path(words, strip_userinfo(str(a.path)))
        )
        if names:
            labels[parent] = names
    return labels


def record_run(
    stores: Iterable[ProviderStore],
    run_id: str,
    parents: Sequence[str],
    metadata: Mapping[str, Any],
    labels: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Write ``run_id``'s lineage edges and Airflow metadata to every store.

    ``labels`` gives, per parent, the artifact names its edge goes through (``artifact_labels``): one
    edge per name; a parent without any gets one edge without a name. Edges are idempotent in the
    stores, so an edge the job adds itself (``TORCHX_PARENT_RUN_ID``) is not doubled. A store that
    keeps failing gets a warning, not a failed task: the job is already running, and lineage can be
    added later with ``add_source``.
    """
    for store in stores:
        for parent in parents:
            names: Sequence[str | None] = (labels or {}).get(parent) or [None]
            for name in names:
                _attempt(
                    f"record {run_id} <- {parent}" + (f" [{name}]" if name else ""),
                    store,
                    lambda s=store, p=parent, n=name: s.add_source(run_id, p, n),
                )
        _attempt(
            f"record Airflow metadata of {run_id}", store, lambda s=store: s.add_metadata(run_id, **metadata)
        )


def record_task_run(
    trackers: TrackerSet,
    app_handle: str,
    context: Context,
    tracker_timeout: float,
    task_log: Any = log,
    app: AppDef | None = None,
) -> None:
    """Record a task's run in every tracker: its parents and Airflow metadata, within ``tracker_timeout``.

    With the run's ``app``, an edge goes through the parent's artifacts the app names
    (``artifact_labels``, read from the first store). The app is already running: a tracker that
    fails or hangs here is a warning, never a failed task (lineage can be added later with
    ``add_source``). The run's MLflow page goes to XCom ``tracker_url``.
    """
    if not trackers:
        return
    from torchx_airflow.lineage.keys import XCOM_TRACKER_URL
    from torchx_airflow.retry import call_within

    try:  # asks Airflow for upstream states and XComs: an API error must not fail a running app's task
        parents = parent_runs(context)
    except Exception as e:
        name = type(e).__name__
        task_log.warning("No lineage for %s: reading its parents failed: %s: %s", app_handle, name, e)
        return

    labels: dict[str, list[str]] = {}

    def record() -> str | None:
        if app is not None and parents:
            labels.update(artifact_labels(trackers.stores[0], parents, app))
        record_run(trackers.stores, app_handle, parents, airflow_metadata(context), labels)
        try:
            return trackers.run_url(app_handle)
        except Exception as e:
            task_log.warning("No MLflow link for %s: %s: %s", app_handle, type(e).__name__, e)
            return None

    done, tracker_url = call_within(tracker_timeout, f"Recording lineage of {app_handle}", record)
    if not done:
        return
    shown = [f"{p} [{', '.join(labels[p])}]" if p in labels else p for p in parents]
    task_log.info(
        "Tracked %s in %s with parents %s", app_handle, ", ".join(trackers.conn_ids), shown or "(none)"
    )
    if tracker_url is not None:
        context["ti"].xcom_push(key=XCOM_TRACKER_URL, value=tracker_url)
