"""A sweep of one DAG run as the comparison view shows it: trials x rungs.

A sweep (``torchx_airflow.sweeps``) is the task group ``<sweep_id>``: per rung ``k`` a plan
(``<sweep_id>.plan_k``) and a mapped task of segments (``<sweep_id>.rung_k``), then
``<sweep_id>.promote``. The view recognises it by those task ids in the DAG run, whichever of them
(or the group's id) the comparison was asked for, and lays it out as one row per trial: the
parameters that differ between trials, the objective its segment recorded at each rung, the rung
where it stopped and why (not chosen by the next plan, its segment failed, or the sweep stopped at
its budget), and the promoted trial marked.

Every value the layout rests on is what a worker recorded in XCom, never a read of a tracker store
(which any job may write): each segment's result (its own trial in ``sweep_trial``, its
``metrics``, state and cost; a failed segment's task pushes only its cost, ``torchx_sweep_spent``),
each plan's choice (its return value), record (``torchx_sweep``: spent, why it stopped) and
description (``torchx_sweep_spec``: objective, mode, budgets), and the promotion's result. A
trial's curve joins its segments' objective at their budgets.

For the trials that got furthest (at most ``MAX_SERIES_TRIALS``) the view also draws the
objective's per-epoch series where their segments logged one (``lineage.metrics.metric_series``, a
cache hit's from the run it stands for): read from each segment's first tracker within a reader's
bounds, shown beside the recorded values, deciding nothing. The DB part is a few bulk queries
whatever the size of the sweep; at most ``MAX_SEGMENTS`` segments are read (the view says how many
it left out).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, func, or_, select

from torchx_airflow.lineage.keys import (
    RESULT_TRIAL,
    XCOM_RUN_ID,
    XCOM_SEGMENT_SPENT,
    XCOM_SWEEP,
    XCOM_SWEEP_SPEC,
)
from torchx_airflow.lineage.metrics import as_metric, metric_series
from torchx_airflow.lineage.promotion import recorded_metrics
from torchx_airflow.plugins.airflow_runs import (
    DEFAULT_TORCHX_CONN_ID,
    XCOM_RESULT,
    DagRunNotFound,
    TrackedTask,
    conn_ids_of,
    open_first_store,
    tracker_groups,
)
from torchx_airflow.plugins.compare import lineage_link
from torchx_airflow.plugins.compare_render import finite_points
from torchx_airflow.plugins.graph import Seed
from torchx_airflow.plugins.walk import parallel_map
from torchx_airflow.policies.cost.usage import spent_total

if TYPE_CHECKING:
    from sqlalchemy.orm import Session
    from torchx_airflow_tracker.protocol import ProviderStore

OpenStore = Callable[[Sequence[str]], "ProviderStore"]

#: segments read at most (a sweep of 162 trials at six rungs has 243)
MAX_SEGMENTS = 2000
#: trials whose per-epoch series are read from the trackers, at most (those that got furthest)
MAX_SERIES_TRIALS = 12
SWEEP_TASK = re.compile(r"^(?P<sweep>.+)\.(?:(?P<kind>rung|plan)_(?P<rung>\d+)|promote)$")
#: a Hyperband bracket's group inside its sweep's (``<sweep_id>.b<s>``)
BRACKET = re.compile(r"^(?P<group>.+)\.b(?P<s>\d+)$")
XCOM_KEYS = (XCOM_RESULT, XCOM_RUN_ID, XCOM_SEGMENT_SPENT, XCOM_SWEEP, XCOM_SWEEP_SPEC)
#: why a trial went no further
FINISHED, NOT_CHOSEN, FAILED, SWEEP_STOPPED, PENDING, NOT_SHOWN = (
    "finished",
    "not chosen",
    "failed",
    "sweep stopped",
    "pending",
    "not shown",  # its later segments may be among those left out
)
#: a plan's task states that stop the sweep before its rung
PLAN_FAILED = ("failed", "upstream_failed")


def sweep_of(task_ids: Iterable[str], task_id: str) -> str | None:
    """The sweep ``task_id`` belongs to (a sweep's task, or the sweep's group id), given the DAG
    run's task ids; None when it is no sweep's."""
    known = set(task_ids)
    match = SWEEP_TASK.match(task_id)
    for candidate in (match.group("sweep") if match else None, task_id):
        if candidate and f"{candidate}.plan_0" in known and f"{candidate}.rung_0" in known:
            return candidate
    return None


def brackets_of(task_ids: Iterable[str], task_id: str) -> list[str]:
    """The brackets (``<sweep_id>.b<s>``, by ``s``) of the Hyperband sweep ``task_id`` names (its
    group's id or its ``promote``), given the DAG run's task ids; [] for anything else."""
    known = set(task_ids)
    match = SWEEP_TASK.match(task_id)
    group = match.group("sweep") if match and not match.group("kind") else task_id
    found = {
        m.group("sweep")
        for t in known
        if (m := SWEEP_TASK.match(t)) and m.group("kind") == "plan" and m.group("rung") == "0"
    }
    brackets = [b for b in found if (m := BRACKET.match(b)) and m.group("group") == group]
    return sorted((b for b in brackets if f"{b}.rung_0" in known), key=lambda b: int(b.rsplit(".b", 1)[1]))


def choose_bracket(brackets: Sequence[str], promoted: Any) -> str:
    """The bracket a Hyperband sweep is shown by: the one its promotion published a trial of, else
    the one that starts at the lowest rung (it trains the most trials)."""
    runs_of = promoted.get("runs_of") if isinstance(promoted, Mapping) else None
    for bracket in brackets:
        if isinstance(runs_of, str) and runs_of.startswith(f"{bracket}.rung_"):
            return bracket
    return brackets[-1]


def find_sweep(session: Session, dag_id: str, dag_run_id: str, task_id: str) -> str | None:
    """``sweep_of`` the DAG run's task instances (one query), or for a Hyperband sweep's group or
    promotion, ``choose_bracket`` (one more); ``DagRunNotFound`` without the run."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance as TI

    if session.scalar(select(DagRun.id).where(DagRun.dag_id == dag_id, DagRun.run_id == dag_run_id)) is None:
        raise DagRunNotFound(dag_id, dag_run_id)
    known = list(
        session.scalars(select(TI.task_id).distinct().where(TI.dag_id == dag_id, TI.run_id == dag_run_id))
    )
    sweep = sweep_of(known, task_id)
    brackets = [] if sweep is not None else brackets_of(known, task_id)
    if not brackets:
        return sweep
    group = BRACKET.match(brackets[0]).group("group")  # type: ignore[union-attr]
    promoted = _xcoms(session, dag_id, dag_run_id, f"{group}.promote", exact=True).get(
        (f"{group}.promote", -1)
    )
    return choose_bracket(brackets, (promoted or {}).get(XCOM_RESULT))


def promote_task_ids(sweep_id: str) -> list[str]:
    """Where the sweep's promotion is: its group's ``promote``, for a Hyperband bracket its sweep's."""
    bracket = BRACKET.match(sweep_id)
    return [f"{sweep_id}.promote", *([f"{bracket.group('group')}.promote"] if bracket else [])]


@dataclass
class Segment:
    """One segment of a trial: a map index of ``<sweep>.rung_<rung>``."""

    rung: int
    map_index: int
    task_state: str | None
    state: str | None  # the app's final state, from the segment's result
    budget: float | None
    previous_budget: float | None
    value: float | None  # the objective its worker recorded; None: failed or not recorded
    cache_hit: bool = False
    cost: float | None = None
    currency: str | None = None
    torchx_run_id: str | None = None
    cached_from: str | None = None  # a cache hit: the run whose result it returned
    task_id: str = ""
    key: str = ""
    link: str = ""

    @property
    def logged_by(self) -> str | None:
        """The run that logged the segment's series: itself, or the run a cache hit stands for."""
        return self.cached_from if self.cache_hit and self.cached_from else self.torchx_run_id

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return dict(self.__dict__)


@dataclass
class Trial:
    """One configuration of the sweep and its segments, rung by rung."""

    index: int
    id: str
    params: dict[str, Any]
    segments: list[Segment] = field(default_factory=list)
    stop: str = PENDING  # why it went no further: FINISHED, NOT_CHOSEN, FAILED, SWEEP_STOPPED, PENDING
    promoted: bool = False
    highlight: bool = False  # one of the trials that got furthest: drawn in colour, its series read
    series: list[list[float]] | None = None  # the objective by epoch, as its segments logged it

    @property
    def reached(self) -> int:
        """The highest rung it has a segment in."""
        return max((s.rung for s in self.segments), default=-1)

    @property
    def last_value(self) -> float | None:
        """The objective of its segment at the highest rung it reached."""
        last = [s for s in self.segments if s.rung == self.reached]
        return last[0].value if last else None

    def curve(self) -> list[list[float]]:
        """``[[budget, objective], ...]`` of its segments that recorded one, by budget."""
        points: list[list[float]] = []
        for segment in self.segments:
            if segment.budget is not None and segment.value is not None:
                points.append([segment.budget, segment.value])
        return sorted(points)


@dataclass
class Rung:
    """What one rung's plan decided."""

    rung: int
    budget: float | None
    planned: int | None  # segments the plan gave the rung; None: the plan has not run
    stopped: str | None = None  # why the sweep stopped before this rung, as its plan recorded it


@dataclass
class SweepView:
    """A sweep of one DAG run: its rungs and trials, and what was left out."""

    dag_id: str
    dag_run_id: str
    sweep_id: str
    objective: str | None = None
    mode: str = "min"
    rungs: list[Rung] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    promoted: dict[str, Any] | None = None
    promoted_elsewhere: str | None = None  # a Hyperband bracket: the task whose segment was promoted
    brackets: list[str] = field(default_factory=list)  # a Hyperband bracket: its sweep's brackets
    spent: float | None = None
    warnings: list[str] = field(default_factory=list)
    segments_not_shown: int = 0


def _like(prefix: str) -> str:
    """``prefix`` as the start of a LIKE pattern (its wildcards escaped with a backslash)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _instances(
    session: Session, dag_id: str, dag_run_id: str, sweep_id: str
) -> tuple[list[Any], int, set[int]]:
    """The sweep's segments (task instances of ``<sweep>.rung_k``), at most ``MAX_SEGMENTS``, the
    highest rungs first (where the sweep's choice shows); how many more it has, and the rungs some of
    whose segments were left out."""
    from airflow.models.taskinstance import TaskInstance as TI

    of_run = (TI.dag_id == dag_id, TI.run_id == dag_run_id)
    counts = session.execute(
        select(TI.task_id, func.count())
        .where(*of_run, TI.task_id.like(_like(sweep_id) + ".rung\\_%", escape="\\"))
        .group_by(TI.task_id)
    )
    rungs = sorted(
        ((rung, task_id, count) for task_id, count in counts if (rung := _rung_of(task_id, sweep_id)) >= 0),
        reverse=True,
    )
    rows: list[Any] = []
    cut: set[int] = set()
    for rung, task_id, count in rungs:
        room = MAX_SEGMENTS - len(rows)
        if room < count:
            cut.add(rung)
        if room > 0:
            query = select(TI.task_id, TI.map_index, TI.state).where(*of_run, TI.task_id == task_id)
            rows += session.execute(query.order_by(TI.map_index).limit(room))
    return rows, sum(count for _, _, count in rungs) - len(rows), cut


def _plan_states(session: Session, dag_id: str, dag_run_id: str, sweep_id: str) -> dict[int, str]:
    """The state of each rung's plan task (one query): a plan that failed pushed nothing."""
    from airflow.models.taskinstance import TaskInstance as TI

    rows = session.execute(
        select(TI.task_id, TI.state).where(
            TI.dag_id == dag_id,
            TI.run_id == dag_run_id,
            TI.task_id.like(_like(sweep_id) + ".plan\\_%", escape="\\"),
        )
    )
    states = {}
    for row in rows:
        match = SWEEP_TASK.match(row.task_id)
        if match and match.group("sweep") == sweep_id and match.group("kind") == "plan" and row.state:
            states[int(match.group("rung"))] = str(row.state)
    return states


def _xcoms(
    session: Session,
    dag_id: str,
    dag_run_id: str,
    sweep_id: str,
    exact: bool = False,
    segments: Iterable[Any] = (),
) -> dict:
    """``{(task id, map index): {key: value}}`` of the sweep's plans, its promotion and ``segments``
    (task instances of its rungs: the ones shown), one query; ``exact``: of the task ``sweep_id``
    alone."""
    from airflow.models.xcom import XComModel

    if exact:
        tasks = XComModel.task_id == sweep_id
    else:
        shown: dict[str, list[int]] = {}
        for segment in segments:
            shown.setdefault(segment.task_id, []).append(segment.map_index)
        # a rung's shown segments are its lowest map indexes (``_instances``): a range each
        tasks = or_(
            XComModel.task_id.like(_like(sweep_id) + ".plan\\_%", escape="\\"),
            XComModel.task_id.in_(promote_task_ids(sweep_id)),
            *(
                and_(XComModel.task_id == task_id, XComModel.map_index.between(min(indexes), max(indexes)))
                for task_id, indexes in shown.items()
            ),
        )
    rows = session.execute(
        select(XComModel.task_id, XComModel.map_index, XComModel.key, XComModel.value).where(
            XComModel.dag_id == dag_id,
            XComModel.run_id == dag_run_id,
            tasks,
            XComModel.key.in_(XCOM_KEYS),
        )
    )
    values: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        values.setdefault((row.task_id, row.map_index), {})[row.key] = XComModel.deserialize_value(row)
    return values


def load_sweep(
    session: Session,
    dag_id: str,
    dag_run_id: str,
    sweep_id: str,
    lineage_prefix: str = "",
    open_store: OpenStore = open_first_store,
) -> SweepView:
    """The sweep ``sweep_id`` of the DAG run, from its task instances and XComs (a few queries), with
    the per-epoch series of the trials that got furthest."""
    instances, not_shown, cut = _instances(session, dag_id, dag_run_id, sweep_id)
    view = SweepView(dag_id, dag_run_id, sweep_id, segments_not_shown=not_shown)
    xcoms = _xcoms(session, dag_id, dag_run_id, sweep_id, segments=instances)
    plan_states = _plan_states(session, dag_id, dag_run_id, sweep_id)
    fill_sweep(view, instances, xcoms, lineage_prefix, plan_states=plan_states, cut_rungs=cut)
    view.brackets = _siblings(session, dag_id, dag_run_id, sweep_id)
    wanted = [s for trial in view.trials if trial.highlight for s in trial.segments if s.logged_by]
    read_series(view, _rendered_fields(session, dag_id, dag_run_id, wanted), open_store)
    return view


def _siblings(session: Session, dag_id: str, dag_run_id: str, sweep_id: str) -> list[str]:
    """A Hyperband bracket's sweep's brackets (one query); [] for a sweep of one bracket."""
    from airflow.models.taskinstance import TaskInstance as TI

    bracket = BRACKET.match(sweep_id)
    if bracket is None:
        return []
    group = bracket.group("group")
    prefix = _like(group) + ".b%"
    rows = session.scalars(
        select(TI.task_id)
        .distinct()
        .where(TI.dag_id == dag_id, TI.run_id == dag_run_id, TI.task_id.like(prefix, escape="\\"))
    )
    return brackets_of(rows, group)


def _rendered_fields(
    session: Session, dag_id: str, dag_run_id: str, segments: Sequence[Segment]
) -> dict[tuple[str, int], dict[str, Any]]:
    """The rendered fields of ``segments`` (which trackers their tasks used), one query."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF

    if not segments:
        return {}
    keys = {(s.task_id, s.map_index) for s in segments}
    rows = session.execute(
        select(RTIF.task_id, RTIF.map_index, RTIF.rendered_fields).where(
            RTIF.dag_id == dag_id,
            RTIF.run_id == dag_run_id,
            RTIF.task_id.in_({task_id for task_id, _ in keys}),
            RTIF.map_index.in_({map_index for _, map_index in keys}),
        )
    )
    return {
        (row.task_id, row.map_index): dict(row.rendered_fields or {})
        for row in rows
        if (row.task_id, row.map_index) in keys
    }


def read_series(
    view: SweepView, fields: Mapping[tuple[str, int], Mapping[str, Any]], open_store: OpenStore
) -> None:
    """The objective's per-epoch series of the highlighted trials, each segment's from its task's
    first tracker (``fields``: the segments' rendered fields), joined by epoch; a tracker that cannot
    be read is a warning."""
    if view.objective is None:
        return
    tasks = _tracked(view, fields)
    groups, warnings = tracker_groups([task for _, task in tasks.values()])
    view.warnings.extend(warnings)
    reads: dict[str, tuple[Segment, ProviderStore]] = {}
    for group in groups:
        try:
            store = open_store(group.conn_ids)
        except Exception as e:
            view.warnings.append(f"Tracker {group.conn_ids[0]!r} could not be read: {type(e).__name__}: {e}")
            continue
        in_group = {id(task) for task in group.tasks}
        reads.update({s.key: (s, store) for s, task in tasks.values() if id(task) in in_group})
    objective = view.objective

    def read(key: str) -> list[tuple[int, float]]:
        segment, store = reads[key]
        return metric_series(store, str(segment.logged_by), names=(objective,)).get(objective) or []

    logged = dict(zip(reads, parallel_map(read, list(reads)), strict=True))
    for trial in view.trials:
        if not trial.highlight:
            continue
        try:  # what a store held decides nothing: one trial's series never fails the page
            trial.series = _joined([logged.get(s.key) or [] for s in trial.segments]) or None
        except Exception as e:
            view.warnings.append(
                f"The series of trial {trial.id!r} could not be read: {type(e).__name__}: {e}"
            )


def _tracked(
    view: SweepView, fields: Mapping[tuple[str, int], Mapping[str, Any]]
) -> dict[int, tuple[Segment, TrackedTask]]:
    """The highlighted trials' segments, each with the trackers its task used."""
    tasks: dict[int, tuple[Segment, TrackedTask]] = {}
    for trial in view.trials:
        for segment in trial.segments if trial.highlight else ():
            if segment.logged_by:
                rendered = fields.get((segment.task_id, segment.map_index), {})
                task = TrackedTask(
                    seed=Seed(run_id=segment.logged_by),
                    tracker_conn_ids=conn_ids_of(rendered.get("tracker_conn_ids")),
                    torchx_conn_id=str(rendered.get("torchx_conn_id") or DEFAULT_TORCHX_CONN_ID),
                )
                tasks[id(segment)] = (segment, task)
    return tasks


def _joined(curves: Sequence[Sequence[tuple[int, float]]]) -> list[list[float]]:
    """Segments' curves, rung by rung, as one: a later segment's point of a step replaces an earlier's;
    a point that is no pair of finite numbers (a store's step of 400 digits) is left out."""
    points: dict[float, float] = {}
    for curve in curves:
        for step, value in finite_points(curve):
            points[step] = value
    return [[step, points[step]] for step in sorted(points)]


def _rung_of(task_id: str, sweep_id: str) -> int:
    match = SWEEP_TASK.match(task_id)
    if not match or match.group("sweep") != sweep_id or match.group("kind") != "rung":
        return -1
    return int(match.group("rung"))


def fill_sweep(
    view: SweepView,
    instances: Iterable[Any],
    xcoms: Mapping[tuple[str, int], Mapping[str, Any]],
    lineage_prefix: str = "",
    plan_states: Mapping[int, str] | None = None,
    cut_rungs: Collection[int] = (),
) -> None:
    """The trials and rungs of ``view`` from its segments' task instances (``task_id``,
    ``map_index``, ``state``), the sweep's XComs (``{(task id, map index): {key: value}}``), its
    plans' task states (``{rung: state}``) and the rungs some of whose segments were left out."""
    plan_states = plan_states or {}
    sweep = view.sweep_id
    plans = _plans(xcoms, sweep)
    promoted = next(
        (xcoms[(t, -1)].get(XCOM_RESULT) for t in promote_task_ids(sweep) if (t, -1) in xcoms), None
    )
    spec = _spec(plans, promoted)
    view.objective, view.mode = spec.get("objective"), spec.get("mode") or "min"
    budgets = spec.get("budgets") or []
    if view.objective is None:
        view.warnings.append(
            f"The sweep {sweep!r} recorded no objective (a plan from an earlier version and no "
            "promotion): its trials are shown without values."
        )
    count = max([len(budgets), *(k + 1 for k in plans)], default=0)
    trials: dict[int, Trial] = {}
    for ti in instances:
        rung = _rung_of(ti.task_id, sweep)
        pushed = xcoms.get((ti.task_id, ti.map_index), {})
        planned = _planned(plans.get(rung), ti.map_index)
        segment, record = _segment(view, rung, ti, pushed, planned, lineage_prefix)
        if record is None:
            continue
        count = max(count, rung + 1)
        index = int(record["index"])
        if index not in trials:
            trials[index] = Trial(index, str(record.get("id") or f"#{index}"), _params(record))
        trials[index].segments.append(segment)
    count = max([count, *(k + 1 for k in plan_states)])
    failed_plans = {k: f"{sweep}.plan_{k}" for k, state in plan_states.items() if state in PLAN_FAILED}
    view.rungs = [_rung(k, budgets, plans.get(k), trials.values()) for k in range(count)]
    for step in view.rungs:
        if step.planned is None and step.rung in failed_plans:
            step.stopped = f"its plan {failed_plans[step.rung]} {plan_states[step.rung]}: no trial went on"
    view.spent = _spent(plans)
    for trial in trials.values():
        trial.segments.sort(key=lambda s: s.rung)
        cut = any(k > trial.reached for k in cut_rungs)
        trial.stop = (
            NOT_SHOWN if cut else _stop(trial, plans, count, view.objective is not None, failed_plans)
        )
    _mark_promoted(view, trials, promoted)
    _highlight(trials.values())
    sign = 1.0 if view.mode == "min" else -1.0
    view.trials = sorted(
        trials.values(),
        key=lambda t: (
            not t.promoted,
            -t.reached,
            t.last_value is None,
            sign * (t.last_value or 0.0),
            t.index,
        ),
    )


def _plans(xcoms: Mapping[tuple[str, int], Mapping[str, Any]], sweep: str) -> dict[int, Mapping[str, Any]]:
    """Each rung's plan XComs, by rung."""
    plans = {}
    for (task_id, map_index), pushed in xcoms.items():
        match = SWEEP_TASK.match(task_id)
        if match and match.group("sweep") == sweep and match.group("kind") == "plan" and map_index < 0:
            plans[int(match.group("rung"))] = pushed
    return plans


def _spec(plans: Mapping[int, Mapping[str, Any]], promoted: Any) -> dict[str, Any]:
    """What the sweep is (objective, mode, budgets): its plans' record, else the promotion's."""
    for rung in sorted(plans):
        spec = plans[rung].get(XCOM_SWEEP_SPEC)
        if isinstance(spec, Mapping) and isinstance(spec.get("objective"), str):
            budgets = [as_metric(b) for b in spec.get("budgets") or []]
            return {
                "objective": spec["objective"],
                "mode": "max" if spec.get("mode") == "max" else "min",
                "budgets": budgets if all(b is not None for b in budgets) else [],
            }
    if isinstance(promoted, Mapping) and isinstance(promoted.get("objective"), str):
        return {"objective": promoted["objective"], "mode": "max" if promoted.get("mode") == "max" else "min"}
    return {}


def _planned(plan: Mapping[str, Any] | None, map_index: int) -> Mapping[str, Any] | None:
    """The trial a plan gave the segment at ``map_index``."""
    segments = plan.get(XCOM_RESULT) if plan else None
    if not isinstance(segments, list) or not 0 <= map_index < len(segments):
        return None
    trial = segments[map_index].get("trial") if isinstance(segments[map_index], Mapping) else None
    return trial if isinstance(trial, Mapping) else None


def _params(trial: Mapping[str, Any]) -> dict[str, Any]:
    params = trial.get("params")
    return dict(params) if isinstance(params, Mapping) else {}


def _segment(
    view: SweepView,
    rung: int,
    ti: Any,
    pushed: Mapping[str, Any],
    planned: Mapping[str, Any] | None,
    prefix: str,
) -> tuple[Segment, Mapping[str, Any] | None]:
    """A segment from its XComs, and its trial: the segment's own record, else its plan's."""
    result = pushed.get(XCOM_RESULT)
    result = result if isinstance(result, Mapping) else {}
    own = result.get(RESULT_TRIAL)
    trial = own if isinstance(own, Mapping) and isinstance(own.get("index"), int) else planned
    if trial is not None and not isinstance(trial.get("index"), int):
        trial = None
    spent = pushed.get(XCOM_SEGMENT_SPENT)  # a failed task's: what its job cost
    cost = result.get("cost") if result else spent.get("cost") if isinstance(spent, Mapping) else None
    total = spent_total(result or spent)  # resubmitted attempts count, as the plans count them
    currency = _currency(cost)
    value = None
    if view.objective is not None and result.get("state") == "SUCCEEDED":
        value = recorded_metrics(result).get(view.objective)
    run_id = pushed.get(XCOM_RUN_ID)
    cached_from = result.get("cached_from")
    segment = Segment(
        rung=rung,
        map_index=ti.map_index,
        task_state=str(ti.state) if ti.state else None,
        state=result.get("state") if isinstance(result.get("state"), str) else None,
        budget=as_metric((trial or {}).get("budget")),
        previous_budget=as_metric((trial or {}).get("previous_budget")),
        value=value,
        cache_hit=bool(result.get("cache_hit")),
        cost=total,
        currency=currency if isinstance(currency, str) else None,
        torchx_run_id=run_id if isinstance(run_id, str) and run_id else None,
        cached_from=cached_from if isinstance(cached_from, str) and cached_from else None,
        task_id=ti.task_id,
        key=f"{ti.task_id}/{ti.map_index}",
        link=lineage_link(prefix, view.dag_id, view.dag_run_id, ti.task_id, ti.map_index),
    )
    return segment, trial


def _currency(cost: Any) -> str | None:
    """The currency of a segment's cost (its actual's, else its estimate's)."""
    for part in ("actual", "estimate"):
        value = cost.get(part) if isinstance(cost, Mapping) else None
        currency = value.get("currency") if isinstance(value, Mapping) else None
        if isinstance(currency, str) and currency:
            return currency
    return None


def _rung(k: int, budgets: Sequence[Any], plan: Mapping[str, Any] | None, trials: Iterable[Trial]) -> Rung:
    """Rung ``k`` as its plan recorded it; its budget the sweep's, else (plans of an earlier version)
    what its segments trained to."""
    segments = plan.get(XCOM_RESULT) if plan else None
    record = plan.get(XCOM_SWEEP) if plan else None
    stopped = record.get("stopped") if isinstance(record, Mapping) else None
    trained = (s.budget for t in trials for s in t.segments if s.rung == k and s.budget is not None)
    return Rung(
        rung=k,
        budget=budgets[k] if k < len(budgets) else next(trained, None),
        planned=len(segments) if isinstance(segments, list) else None,
        stopped=stopped if isinstance(stopped, str) else None,
    )


def _spent(plans: Mapping[int, Mapping[str, Any]]) -> float | None:
    """What the sweep spent before its last plan, as that plan recorded it."""
    for rung in sorted(plans, reverse=True):
        record = plans[rung].get(XCOM_SWEEP)
        if isinstance(record, Mapping):
            return as_metric(record.get("spent"))
    return None


def _stop(
    trial: Trial,
    plans: Mapping[int, Mapping[str, Any]],
    rungs: int,
    objective_known: bool = True,
    failed_plans: Collection[int] = (),
) -> str:
    """Why the trial went no further than the highest rung it reached. Without the sweep's objective
    (plans of an earlier version, no promotion) no value was read: the next plan's list tells; a next
    plan that failed (``failed_plans``: rungs) stopped the sweep."""
    last = trial.segments[-1]
    if (
        last.state is not None
        and last.state != "SUCCEEDED"
        or last.task_state in ("failed", "upstream_failed")
    ):
        return FAILED
    if objective_known and last.state == "SUCCEEDED" and last.value is None:
        return FAILED  # it recorded no value of the objective: the next plan drops it
    if trial.reached == rungs - 1:
        return FINISHED if last.state == "SUCCEEDED" else PENDING
    following = plans.get(trial.reached + 1)
    if following is None or not isinstance(following.get(XCOM_RESULT), list):
        return SWEEP_STOPPED if trial.reached + 1 in failed_plans else PENDING
    if trial.index in _chosen(following):
        return PENDING  # the next plan took it: its segment there has not started
    record = following.get(XCOM_SWEEP)
    if isinstance(record, Mapping) and record.get("stopped"):
        return SWEEP_STOPPED
    return NOT_CHOSEN


def _chosen(plan: Mapping[str, Any]) -> set[int]:
    """The indexes of the trials a plan gave its rung."""
    segments = plan.get(XCOM_RESULT)
    chosen = set()
    for segment in segments if isinstance(segments, list) else []:
        trial = segment.get("trial") if isinstance(segment, Mapping) else None
        index = trial.get("index") if isinstance(trial, Mapping) else None
        if isinstance(index, int):
            chosen.add(index)
    return chosen


def _mark_promoted(view: SweepView, trials: Mapping[int, Trial], promoted: Any) -> None:
    """The trial whose segment the promotion published, by the task and map index it names."""
    if not isinstance(promoted, Mapping):
        return
    runs_of, map_index = promoted.get("runs_of"), promoted.get("map_index")
    rung = _rung_of(runs_of, view.sweep_id) if isinstance(runs_of, str) else -1
    if rung < 0 and isinstance(runs_of, str):
        view.promoted_elsewhere = runs_of
    for trial in trials.values():
        if any(s.rung == rung and s.map_index == map_index for s in trial.segments):
            trial.promoted = True
            view.promoted = {
                "trial": trial.id,
                "rung": rung,
                "map_index": map_index,
                "value": as_metric(promoted.get("value")),
                "path": promoted.get("path") if isinstance(promoted.get("path"), str) else None,
            }
            return


def _highlight(trials: Iterable[Trial]) -> None:
    """The trials that got furthest (the highest rung any reached), and the promoted one: at most
    ``MAX_SERIES_TRIALS``, the promoted first, then by trial index."""
    trials = list(trials)
    furthest = max((t.reached for t in trials), default=-1)
    chosen = sorted(
        (t for t in trials if t.promoted or t.reached == furthest), key=lambda t: (not t.promoted, t.index)
    )
    for trial in chosen[:MAX_SERIES_TRIALS]:
        trial.highlight = True


def differing_params(trials: Sequence[Trial]) -> list[str]:
    """The parameters whose value is not the same in every trial, in the search space's order."""
    names = list(dict.fromkeys(name for trial in trials for name in trial.params))
    return [n for n in names if len({repr(t.params.get(n)) for t in trials}) > 1]


def sweep_json(view: SweepView) -> dict[str, Any]:
    """The sweep as JSON: rungs, the trials (the differing parameters first, then each segment's
    objective), each trial's curve, why it stopped, and the promoted one."""
    params = differing_params(view.trials)
    return {
        "layout": "sweep",
        "dag_id": view.dag_id,
        "dag_run_id": view.dag_run_id,
        "sweep_id": view.sweep_id,
        "objective": view.objective,
        "mode": view.mode,
        "params": params,
        "rungs": [rung.__dict__ for rung in view.rungs],
        "trials": [
            {
                "id": trial.id,
                "index": trial.index,
                "params": {name: trial.params.get(name) for name in params},
                "reached": trial.reached,
                "stop": trial.stop,
                "promoted": trial.promoted,
                "highlight": trial.highlight,
                "value": trial.last_value,
                "curve": trial.curve(),
                "series": trial.series,
                "segments": [s.to_dict() for s in trial.segments],
            }
            for trial in view.trials
        ],
        "promoted": view.promoted,
        "promoted_elsewhere": view.promoted_elsewhere,
        "brackets": view.brackets,
        "spent": view.spent,
        "warnings": view.warnings,
        "segments_not_shown": view.segments_not_shown,
        "max_segments": MAX_SEGMENTS,
    }
