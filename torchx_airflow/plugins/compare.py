"""The runs of one task side by side: what each submitted, what it measured, what it cost.

Rows are the task's instances in one DAG run (every map index: a sweep), or in the DAG's last ``N``
DAG runs that ran the task (a nightly retrain; every map index of each). Each row holds what
Airflow knows (task state, tries, the task's result: app state, attempts, usage, cost, cache hit),
what the task submitted (XCom ``torchx_app``, secrets
masked by the task; the rendered fields for a run without it), and the run's final metrics read
from the task's first tracker (``lineage.metrics``). Parameters are flattened to ``{name: text}``
(``args``, ``env.LR``, ``image``, ``resource.cpu``, ``cfg.partition``...) so that the view shows
only those that differ between rows.

Bounded: at most ``MAX_ROWS`` rows; the curves of the selected runs only (at most ``MAX_CURVES``),
and of them only the drawn metric's points; the stores read within the bounds of a reader
(``ReadLimits.for_readers()``: per entry, per run and per request; the page names what was left
out); the database part is a few bulk queries whatever the number of rows, and store reads
overlap (``walk.parallel_map``).
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from sqlalchemy import func, select

from torchx_airflow.lineage.keys import XCOM_RUN_ID, XCOM_SUBMITTED_APP
from torchx_airflow.lineage.metrics import curve_names, final_metrics, metric_series
from torchx_airflow.plugins.airflow_runs import (
    DEFAULT_TORCHX_CONN_ID,
    XCOM_KEYS,
    XCOM_RESULT,
    DagRunNotFound,
    TrackedTask,
    conn_ids_of,
    open_first_store,
    seed_of,
    tracker_groups,
    xcom_values,
)
from torchx_airflow.plugins.usage_view import RunUsage
from torchx_airflow.plugins.walk import parallel_map

if TYPE_CHECKING:
    from sqlalchemy.orm import Session
    from torchx_airflow_tracker.protocol import ProviderStore

log = logging.getLogger(__name__)

MAX_ROWS = 200
DEFAULT_LAST = 20
MAX_CURVES = 12
DEFAULT_CURVES = 8
MAX_PARAM_TEXT = 500
# the rendered fields that describe a run (the rest name connections or are the app record's twins)
RENDERED_PARAMS = ("component", "component_args", "scheduler", "cfg", "env", "app_name")
# fixed columns, sortable as such; metrics sort as "metric:<name>", parameters as "param:<name>"
COLUMNS = (
    "run",
    "state",
    "attempts",
    "elapsed_s",
    "cpu_hours",
    "gpu_hours",
    "cost",
    "cache_hit",
)


@dataclass
class CompareRow:
    """One TorchX run of the task, as the comparison shows it."""

    key: str  # "<DAG run id>/<map index>": the row's id in queries
    dag_run_id: str
    map_index: int
    torchx_run_id: str | None
    task_state: str | None
    app_state: str | None
    tries: int | None
    attempts: int | None
    elapsed_s: float | None
    usage: RunUsage | None
    cache_hit: bool
    cached_from: str | None
    params: dict[str, str] = field(default_factory=dict)
    app: dict[str, Any] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    store_index: int | None = None  # which of the comparison's stores holds the run

    @property
    def label(self) -> str:
        return self.dag_run_id if self.map_index < 0 else f"{self.dag_run_id} [{self.map_index}]"

    def value(self, column: str) -> Any:
        """The row's value in ``column`` (a fixed column, ``metric:<name>`` or ``param:<name>``)."""
        if column.startswith("metric:"):
            return self.metrics.get(column[7:])
        if column.startswith("param:"):
            return self.params.get(column[6:])
        usage = self.usage
        values = {
            "run": (self.dag_run_id, self.map_index),
            "state": self.app_state or self.task_state,
            "attempts": self.attempts,
            "elapsed_s": self.elapsed_s,
            "cpu_hours": usage.cpu_hours if usage else None,
            "gpu_hours": sum(usage.gpu_hours.values()) if usage and usage.gpu_hours else None,
            "cost": usage.cost if usage else None,
            "cache_hit": self.cache_hit,
        }
        return values.get(column)

    def to_dict(self, param_names: Iterable[str] | None = None) -> dict[str, Any]:
        """The JSON form; ``param_names``: only those parameters (default: all)."""
        names = list(self.params) if param_names is None else list(param_names)
        return {
            "key": self.key,
            "dag_run_id": self.dag_run_id,
            "map_index": self.map_index,
            "torchx_run_id": self.torchx_run_id,
            "task_state": self.task_state,
            "state": self.app_state,
            "tries": self.tries,
            "attempts": self.attempts,
            "elapsed_s": self.elapsed_s,
            "usage": self.usage.to_dict() if self.usage else None,
            "cost": self.usage.cost if self.usage else None,
            "currency": self.usage.currency if self.usage else None,
            "cache_hit": self.cache_hit,
            "cached_from": self.cached_from,
            "params": {name: self.params.get(name) for name in names},
            "metrics": dict(self.metrics),
            "links": dict(self.links),
        }


@dataclass
class Comparison:
    """The rows of one comparison, with the stores their metrics come from."""

    dag_id: str
    task_id: str
    dag_run_id: str | None  # None: the last runs of the task across DAG runs
    rows: list[CompareRow]
    stores: list[ProviderStore] = field(default_factory=list)
    trackers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    rows_not_shown: int = 0

    @property
    def differing_params(self) -> list[str]:
        """Parameter names whose value is not the same in every row that has parameters (missing
        counts as a value; a row without any, a task that never submitted, is left out)."""
        rows = [row for row in self.rows if row.params]
        names = sorted({name for row in rows for name in row.params})
        return [name for name in names if len({row.params.get(name) for row in rows}) > 1]

    @property
    def metric_names(self) -> list[str]:
        """Every final metric's name, in any row."""
        return sorted({name for row in self.rows for name in row.metrics})

    def row(self, key: str) -> CompareRow | None:
        """The row of ``key`` (``<DAG run id>/<map index>``), or None."""
        return next((row for row in self.rows if row.key == key), None)

    def sort(self, column: str, descending: bool = False) -> None:
        """Sort rows by ``column``; rows without a value last either way."""
        have = [row for row in self.rows if row.value(column) is not None]
        missing = [row for row in self.rows if row.value(column) is None]
        have.sort(key=lambda row: _sort_key(row.value(column)), reverse=descending)
        self.rows = have + missing

    def series(
        self, keys: Sequence[str], metric: str | None
    ) -> tuple[list[str], str | None, dict[str, dict[str, list[tuple[int, float]]]]]:
        """The curves of the rows ``keys`` (at most ``MAX_CURVES``), read from their stores: the
        names of their curves, the one drawn (``metric`` if one of them, else the first), and each
        row's curve of that one only (the others' points are not fetched)."""
        rows = [row for row in (self.row(k) for k in keys[:MAX_CURVES]) if row is not None]
        readable = {r.key: r for r in rows if r.torchx_run_id and r.store_index is not None}

        def store_of(key: str) -> tuple[ProviderStore, str]:
            row = readable[key]
            return self.stores[row.store_index or 0], str(row.torchx_run_id)

        names = sorted(
            {n for found in parallel_map(lambda k: curve_names(*store_of(k)), list(readable)) for n in found}
        )
        chosen = metric if metric in names else (names[0] if names else None)
        if chosen is None:
            return names, None, {}
        curves = parallel_map(lambda k: metric_series(*store_of(k), names=(chosen,)), list(readable))
        return names, chosen, dict(zip(readable, curves, strict=True))


def _sort_key(value: Any) -> tuple[int, float, str, tuple[Any, ...]]:
    """Numbers (and texts that are numbers, as a parameter ``"0.01"``) first by value, then texts,
    then (DAG run, map index) pairs, so a column of mixed values still sorts."""
    if isinstance(value, tuple):
        return (2, 0.0, "", value)
    if isinstance(value, bool | int | float):
        return (0, float(value), "", ())
    try:
        return (0, float(str(value)), "", ())
    except ValueError:
        return (1, 0.0, str(value), ())


def row_key(dag_run_id: str, map_index: int) -> str:
    """A row's id in queries (``show``, ``a``, ``b``): ``<DAG run id>/<map index>``."""
    return f"{dag_run_id}/{map_index}"


def lineage_link(prefix: str, dag_id: str, dag_run_id: str, task_id: str, map_index: int) -> str:
    """The lineage view of the row's DAG run, with the row's run outlined."""
    q = f"?task_id={quote(task_id, safe='')}&map_index={map_index}"
    return f"{prefix}/lineage/{quote(dag_id, safe='')}/{quote(dag_run_id, safe='')}{q}"


# parameters


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= MAX_PARAM_TEXT else text[: MAX_PARAM_TEXT - 1] + "…"


def _args_text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return shlex.join(str(v) for v in value)
    return _text(value)


def app_params(app: Mapping[str, Any]) -> dict[str, str]:
    """A submitted app record (``lineage.submitted``) flattened: ``scheduler``, ``cfg.<option>``,
    and per role (prefixed ``<role>.`` when the app has several) ``image``, ``entrypoint``, ``args``,
    ``replicas``, ``resource.<cpu|gpu|memMB|...>``, ``env.<NAME>``."""
    params: dict[str, str] = {}
    if isinstance(app.get("scheduler"), str):
        params["scheduler"] = app["scheduler"]
    cfg = app.get("cfg")
    for key, value in cfg.items() if isinstance(cfg, Mapping) else ():
        params[f"cfg.{key}"] = _text(value)
    roles = [r for r in app.get("roles") or [] if isinstance(r, Mapping)]
    for role in roles:
        prefix = "" if len(roles) == 1 else f"{role.get('name')}."
        for key in ("image", "entrypoint"):
            if role.get(key) is not None:
                params[prefix + key] = _text(role[key])
        params[prefix + "args"] = _args_text(role.get("args") or [])
        params[prefix + "replicas"] = _text(role.get("num_replicas"))
        resource = role.get("resource")
        for key, value in resource.items() if isinstance(resource, Mapping) else ():
            if value not in (None, {}, []):
                params[f"{prefix}resource.{key}"] = _text(value)
        env = role.get("env")
        for name, value in env.items() if isinstance(env, Mapping) else ():
            params[f"{prefix}env.{name}"] = _text(value)
    return params


def rendered_params(fields: Mapping[str, Any]) -> dict[str, str]:
    """The task's rendered fields as parameters (``component``, ``component_args``, ``env.<NAME>``...),
    Airflow having masked them as it stores them."""
    params: dict[str, str] = {}
    for name in RENDERED_PARAMS:
        value = fields.get(name)
        if value in (None, "", [], {}):
            continue
        if name in ("cfg", "env") and isinstance(value, Mapping):
            for key, item in value.items():
                params[f"{name}.{key}"] = _text(item)
        elif name == "component_args":
            params[name] = _args_text(value)
        else:
            params[name] = _text(value)
    return params


# reading the rows


def _task_instances(
    session: Session, dag_id: str, task_id: str, dag_run_id: str | None, last: int
) -> tuple[list[Any], int]:
    """The task's instances (one DAG run's, or those of the DAG's last ``last`` runs that have the
    task: every map index of each), newest DAG run first, at most ``MAX_ROWS``; and how many more
    the task has beyond those (in older DAG runs, or over ``MAX_ROWS``)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance as TI

    of_task: tuple[Any, ...] = (TI.dag_id == dag_id, TI.task_id == task_id)
    query = select(TI.run_id, TI.map_index, TI.state, TI.try_number, TI.duration).join(
        DagRun, (DagRun.dag_id == TI.dag_id) & (DagRun.run_id == TI.run_id)
    )
    if dag_run_id is not None:
        exists = select(DagRun.id).where(DagRun.dag_id == dag_id, DagRun.run_id == dag_run_id)
        if session.scalar(exists) is None:
            raise DagRunNotFound(dag_id, dag_run_id)
        runs, counted = [dag_run_id], (*of_task, TI.run_id == dag_run_id)
    else:
        # ``last`` counts DAG runs, not task instances: a sweep of 8 map indexes is one run
        latest = (
            select(DagRun.run_id)
            .where(
                DagRun.dag_id == dag_id, select(TI.id).where(*of_task, TI.run_id == DagRun.run_id).exists()
            )
            .order_by(DagRun.run_after.desc(), DagRun.id.desc())
            .limit(min(last, MAX_ROWS))
        )
        runs, counted = list(session.scalars(latest)), of_task
    total = session.scalar(select(func.count()).select_from(TI).where(*counted)) or 0
    query = query.where(*of_task, TI.run_id.in_(runs))
    query = query.order_by(DagRun.run_after.desc(), DagRun.id.desc(), TI.map_index)
    rows = list(session.execute(query.limit(MAX_ROWS)))
    return rows, max(0, total - len(rows))


def _rendered_fields(session: Session, dag_id: str, task_id: str, run_ids: list[str]) -> dict:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF

    rows = session.execute(
        select(RTIF.run_id, RTIF.map_index, RTIF.rendered_fields).where(
            RTIF.dag_id == dag_id, RTIF.task_id == task_id, RTIF.run_id.in_(run_ids)
        )
    )
    return {(row.run_id, row.map_index): dict(row.rendered_fields or {}) for row in rows}


def _attempts(result: Any) -> int | None:
    if not isinstance(result, Mapping):
        return None
    attempts = result.get("attempts")
    return len(attempts) if isinstance(attempts, list) and attempts else 1


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def load_comparison(
    session: Session,
    dag_id: str,
    task_id: str,
    dag_run_id: str | None,
    last: int = DEFAULT_LAST,
    lineage_prefix: str = "",
    open_store: Callable[[Sequence[str]], ProviderStore] = open_first_store,
) -> Comparison:
    """The task's rows with their metrics: a few bulk queries, then one metrics read per run."""
    instances, not_shown = _task_instances(session, dag_id, task_id, dag_run_id, last)
    run_ids = sorted({ti.run_id for ti in instances})
    xcoms = xcom_values(session, dag_id, run_ids, (*XCOM_KEYS, XCOM_SUBMITTED_APP))
    rendered = _rendered_fields(session, dag_id, task_id, run_ids)
    comparison = Comparison(dag_id, task_id, dag_run_id, [], rows_not_shown=not_shown)
    fill_comparison(comparison, instances, xcoms, rendered, lineage_prefix, open_store)
    return comparison


def fill_comparison(
    comparison: Comparison,
    instances: Iterable[Any],
    xcoms: Mapping[tuple[str, str, int], Mapping[str, Any]],
    rendered: Mapping[tuple[str, int], Mapping[str, Any]],
    lineage_prefix: str,
    open_store: Callable[[Sequence[str]], ProviderStore],
) -> None:
    """The rows of ``instances`` (``run_id``, ``map_index``, ``state``, ``try_number``, ``duration``)
    from their XComs and rendered fields, then their final metrics from their stores."""
    dag_id, task_id = comparison.dag_id, comparison.task_id
    tracked = []
    for ti in instances:
        pushed = xcoms.get((ti.run_id, task_id, ti.map_index), {})
        fields = rendered.get((ti.run_id, ti.map_index), {})
        row = _row(dag_id, task_id, ti, pushed, fields, lineage_prefix)
        comparison.rows.append(row)
        if row.torchx_run_id:
            seed = seed_of(dag_id, ti.run_id, task_id, ti.map_index, ti.state, dict(pushed))
            task = TrackedTask(
                seed=seed,
                tracker_conn_ids=conn_ids_of(fields.get("tracker_conn_ids")),
                torchx_conn_id=str(fields.get("torchx_conn_id") or DEFAULT_TORCHX_CONN_ID),
            )
            tracked.append((row, task))
    _read_metrics(comparison, tracked, open_store)


def _row(
    dag_id: str, task_id: str, ti: Any, pushed: Mapping[str, Any], fields: Mapping[str, Any], prefix: str
) -> CompareRow:
    result = pushed.get(XCOM_RESULT)
    result = result if isinstance(result, Mapping) else {}
    usage = RunUsage.from_values(result.get("usage"), result.get("cost"))
    app = pushed.get(XCOM_SUBMITTED_APP)
    app = dict(app) if isinstance(app, Mapping) else None
    params = rendered_params(fields)
    if app is not None:
        params.update(app_params(app))
    run_id = pushed.get(XCOM_RUN_ID)
    cached_from = result.get("cached_from") if result.get("cache_hit") else None
    links = {"lineage": lineage_link(prefix, dag_id, ti.run_id, task_id, ti.map_index)}
    for key, name in (("ui_url", "scheduler_ui"), ("tracker_url", "mlflow")):
        if isinstance(pushed.get(key), str) and pushed[key]:
            links[name] = pushed[key]
    return CompareRow(
        key=row_key(ti.run_id, ti.map_index),
        dag_run_id=ti.run_id,
        map_index=ti.map_index,
        torchx_run_id=run_id if isinstance(run_id, str) and run_id else None,
        task_state=str(ti.state) if ti.state else None,
        app_state=result.get("state") if isinstance(result.get("state"), str) else None,
        tries=ti.try_number,
        attempts=_attempts(result) if result else None,
        elapsed_s=(usage.elapsed_s if usage and usage.elapsed_s is not None else _number(ti.duration)),
        usage=usage,
        cache_hit=bool(result.get("cache_hit")),
        cached_from=str(cached_from) if isinstance(cached_from, str) else None,
        params=params,
        app=app,
        links=links,
    )


def _read_metrics(
    comparison: Comparison,
    tracked: list[tuple[CompareRow, TrackedTask]],
    open_store: Callable[[Sequence[str]], ProviderStore],
) -> None:
    """Each row's final metrics from its task's first tracker; a tracker that cannot be opened is
    a warning, not a failed view."""
    groups, warnings = tracker_groups([task for _, task in tracked])
    comparison.warnings.extend(warnings)
    row_of = {id(task): row for row, task in tracked}
    readable: list[CompareRow] = []
    for group in groups:
        try:
            store = open_store(group.conn_ids)
        except Exception as e:
            comparison.warnings.append(
                f"Tracker {group.conn_ids[0]!r} could not be read: {type(e).__name__}: {e}"
            )
            continue
        comparison.stores.append(store)  # read within ReadLimits.for_readers()
        comparison.trackers.append(group.conn_ids[0])
        for task in group.tasks:
            row = row_of[id(task)]
            row.store_index = len(comparison.stores) - 1
            readable.append(row)
    by_key = {row.key: row for row in readable}

    def read(key: str) -> dict[str, float]:
        row = by_key[key]
        return final_metrics(comparison.stores[row.store_index or 0], str(row.torchx_run_id))

    for key, metrics in zip(by_key, parallel_map(read, list(by_key)), strict=True):
        by_key[key].metrics = metrics
    for row in readable:
        skipped = comparison.stores[row.store_index or 0].oversized.get(str(row.torchx_run_id))
        if skipped:
            comparison.warnings.append(
                f"{row.label}: not read in full ({'; '.join(sorted(skipped)[:3])}); the metrics the rest "
                "holds are not shown."
            )


# the JSON form (the page is drawn from it)


def diff_lines(a: CompareRow, b: CompareRow) -> list[dict[str, Any]]:
    """Every parameter of two runs, side by side: ``{name, a, b, same}`` sorted by name."""
    names = sorted(set(a.params) | set(b.params))
    return [
        {"name": n, "a": a.params.get(n), "b": b.params.get(n), "same": a.params.get(n) == b.params.get(n)}
        for n in names
    ]


def comparison_json(
    comparison: Comparison,
    *,
    sort: str | None = None,
    order: str = "asc",
    show: Sequence[str] = (),
    metric: str | None = None,
    diff: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The comparison as JSON: rows (only the differing parameters), the curves of the runs in
    ``show`` (default: the first ``DEFAULT_CURVES`` rows with a run; at most ``MAX_CURVES``) of one
    metric (``metric``, else the first), what was left out of the plot, and the diff of two rows."""
    if sort:
        comparison.sort(sort, descending=order == "desc")
    params = comparison.differing_params
    shown = [k for k in show if comparison.row(k) is not None]
    if not show:
        shown = [row.key for row in comparison.rows if row.torchx_run_id][:DEFAULT_CURVES]
    keys = shown[:MAX_CURVES]
    series_metrics, chosen, series = comparison.series(keys, metric)
    not_selected = {row.key for row in comparison.rows if row.torchx_run_id} - set(shown)
    diff_json = None
    if diff is not None:
        a, b = comparison.row(diff[0]), comparison.row(diff[1])
        if a is not None and b is not None:
            diff_json = {
                "a": a.key,
                "b": b.key,
                "a_label": a.label,
                "b_label": b.label,
                "lines": diff_lines(a, b),
            }
    return {
        "layout": "runs",
        "dag_id": comparison.dag_id,
        "task_id": comparison.task_id,
        "dag_run_id": comparison.dag_run_id,
        "sort": sort,
        "order": order,
        "params": params,
        "metrics": comparison.metric_names,
        "runs": [row.to_dict(params) for row in comparison.rows],
        "selected": keys,
        "metric": chosen,
        "series_metrics": series_metrics,
        # whose curves were not read: the runs not selected, and the selected ones over MAX_CURVES
        "curves_not_selected": len(not_selected),
        "selected_not_plotted": shown[MAX_CURVES:],
        "max_curves": MAX_CURVES,
        "series": {
            key: {n: [list(p) for p in pts] for n, pts in curves.items()} for key, curves in series.items()
        },
        "diff": diff_json,
        "trackers": comparison.trackers,
        "warnings": comparison.warnings,
        "rows_not_shown": comparison.rows_not_shown,
        "max_rows": MAX_ROWS,
    }
