"""The lineage graph of a DAG run: its tracked runs, their artifacts, and the sources between them.

Pure data and tracker reads, no Airflow: the seeds (the runs the DAG run's tasks pushed as XCom
``torchx_run_id``) come from the caller with what Airflow knows about them; the graph grows from
them through each tracker store's edge graph (``ProviderStore.graph()``: upstream, including parents
from earlier DAG runs and other DAGs, and downstream), up to ``depth`` hops each way, and every
run's ``metadata()`` and ``artifacts()`` are read once.

Example::

    graph = build_graph([(store, [Seed("local_cwd://torchx/train-x", task_id="train")])], depth=3)
    graph.to_dict()["edges"]  # [{"source": ..., "target": ..., "artifact_names": [...]}]
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from torchx_airflow.apps import AIRFLOW_RUN_SCHEME, AppHandle
from torchx_airflow.lineage.edges import AIRFLOW_IDENTITY_KEYS
from torchx_airflow.lineage.keys import ATTEMPT_KEY, CACHED_FROM_KEY, COST_KEY, ENDED_BY_KEY, USAGE_KEY
from torchx_airflow.plugins.usage_view import RunUsage, usage_total
from torchx_airflow.plugins.walk import GRAPH_READS, Walk, parallel_map

if TYPE_CHECKING:
    from torchx_airflow_tracker.protocol import ProviderStore

log = logging.getLogger(__name__)

DEFAULT_DEPTH = 3
MAX_DEPTH = 50
# Runs drawn at most, the nearest to the DAG run first: each costs a few store reads (its edges, its
# metadata, its artifacts), so this bounds what one view can make the API server read.
MAX_RUNS = 250
HIDDEN_LABEL = "run in a DAG you cannot see"
HIDDEN_PREFIX = "hidden:"


@dataclass
class AirflowTask:
    """Which Airflow task instance a run belongs to, and what Airflow knows of it."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    state: str | None = None  # the task instance's state; None when not known or not readable
    attempt: int | None = None  # which job of the task this run is, once the task resubmitted one
    ended_by: str | None = None  # the infrastructure's end that made the task resubmit it (NODE_FAIL)

    @property
    def label(self) -> str:
        label = self.task_id if self.map_index < 0 else f"{self.task_id} [{self.map_index}]"
        return label if self.attempt is None else f"{label} · attempt {self.attempt}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as the lineage endpoint answers it; ``attempt`` and ``ended_by`` only for
        the jobs of a task that resubmitted one."""
        answer: dict[str, Any] = {
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "map_index": self.map_index,
            "state": self.state,
        }
        if self.attempt is not None:
            answer.update(attempt=self.attempt, ended_by=self.ended_by)
        return answer


@dataclass
class Seed:
    """A run of the DAG run being shown, with what Airflow knows of it (state, links)."""

    run_id: str
    task: AirflowTask | None = None
    app_state: str | None = None  # TorchX AppState name from the task's result, e.g. "SUCCEEDED"
    links: dict[str, str] = field(default_factory=dict)
    usage: RunUsage | None = None  # from the task's result
    cached_from: str | None = None  # a cache hit: the handle of the earlier run whose result it returned


@dataclass
class Artifact:
    """An artifact a run recorded (``AppRun.add_artifact``)."""

    run_id: str
    name: str
    path: str

    @property
    def node_id(self) -> str:
        return f"{self.run_id}#{self.name}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; ``id`` is ``<run id>#<artifact name>``."""
        return {"id": self.node_id, "run": self.run_id, "name": self.name, "path": self.path}


@dataclass
class RunNode:
    """A tracked run: a TorchX app (its id is the app handle) or a tracked Python task (``airflow://``)."""

    run_id: str
    distance: int = 0  # hops from the DAG run's own runs: negative upstream, positive downstream
    in_dag_run: bool = False
    task: AirflowTask | None = None
    app_state: str | None = None
    links: dict[str, str] = field(default_factory=dict)
    artifacts: list[Artifact] = field(default_factory=list)
    hidden: bool = False  # a run of a DAG the user may not read: its id is opaque, nothing else shown
    usage: RunUsage | None = None  # what the run used and cost, as its task recorded it
    cached_from: str | None = None  # a cache hit: the earlier run whose result the task returned

    @property
    def scheduler(self) -> str | None:
        handle = None if self.hidden else AppHandle.match(self.run_id)
        return handle.scheduler if handle else None

    @property
    def handle(self) -> str | None:
        """The TorchX app handle, or None for a tracked Python task."""
        return None if self.scheduler in (None, AIRFLOW_RUN_SCHEME) else self.run_id

    @property
    def app_name(self) -> str:
        if self.hidden:
            return HIDDEN_LABEL
        handle = AppHandle.match(self.run_id)
        return handle.app_id.rsplit("/", 1)[-1] if handle else self.run_id

    @property
    def state(self) -> str | None:
        """The app's final state when known, else how the infrastructure ended it (a job the task
        resubmitted), else the task instance's state."""
        if self.app_state:
            return self.app_state
        if self.task is not None and self.task.ended_by:
            return self.task.ended_by
        return self.task.state if self.task else None

    @property
    def label(self) -> str:
        return self.task.label if self.task else self.app_name

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; ``artifacts`` holds the ids of the run's artifact nodes."""
        return {
            "id": self.run_id,
            "label": self.label,
            "handle": self.handle,
            "scheduler": self.scheduler,
            "state": self.state,
            "app_state": self.app_state,
            "in_dag_run": self.in_dag_run,
            "distance": self.distance,
            "airflow": self.task.to_dict() if self.task else None,
            "links": dict(self.links),
            "artifacts": [a.node_id for a in self.artifacts],
            "hidden": self.hidden,
            "usage": self.usage.to_dict() if self.usage is not None else None,
            "cached_from": self.cached_from,
        }

    def map_text(self, fn: Callable[[str], str]) -> RunNode:
        """A copy with ``fn`` applied to every text it shows (ids, task, links, artifacts)."""
        task = self.task
        if task is not None:
            task = replace(task, dag_id=fn(task.dag_id), run_id=fn(task.run_id), task_id=fn(task.task_id))
        return RunNode(
            fn(self.run_id),
            self.distance,
            self.in_dag_run,
            task,
            self.app_state,
            {key: fn(url) for key, url in self.links.items()},
            [Artifact(fn(a.run_id), fn(a.name), fn(a.path)) for a in self.artifacts],
            self.hidden,
            self.usage,
            fn(self.cached_from) if self.cached_from else None,
        )


@dataclass(frozen=True)
class Edge:
    """``source`` is a source (parent) of ``target``, through ``artifact_names`` (may be empty)."""

    source: str
    target: str
    artifact_names: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: artifact names may be empty (an edge recorded without one)."""
        return {"source": self.source, "target": self.target, "artifact_names": list(self.artifact_names)}


@dataclass
class LineageGraph:
    """Runs (keyed by run id), artifacts inside them, and the source edges between runs."""

    runs: dict[str, RunNode]
    edges: list[Edge]
    depth: int
    truncated: bool = False  # True when the walk stopped at ``depth`` with more runs beyond it
    warnings: list[str] = field(default_factory=list)  # stores that failed while being read
    max_runs: int = MAX_RUNS
    runs_not_shown: int = 0  # runs found but not drawn (over ``max_runs``); their neighbours not read

    @property
    def cut(self) -> str | None:
        """What the view left out and why, or None when it drew every run it found."""
        if not self.runs_not_shown:
            return None
        more = f"{self.runs_not_shown} more run{'s' * (self.runs_not_shown != 1)}"
        return (
            f"At least {more} within depth {self.depth} not drawn (nor read further): the view draws at "
            f"most {self.max_runs} runs, the nearest to this DAG run first. Lower the depth to see a "
            "smaller part whole."
        )

    @property
    def artifacts(self) -> list[Artifact]:
        return [a for run in self.runs.values() for a in run.artifacts]

    @property
    def usage_total(self) -> dict[str, Any]:
        """The usage and cost of the DAG run's own runs, summed (``plugins.usage_view.usage_total``)."""
        return usage_total(run.usage for run in self.runs.values() if run.in_dag_run)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of the whole graph."""
        return {
            "depth": self.depth,
            "truncated": self.truncated,
            "max_runs": self.max_runs,
            "runs_not_shown": self.runs_not_shown,
            "cut": self.cut,
            "usage_total": self.usage_total,
            "runs": [run.to_dict() for run in self.runs.values()],
            "artifacts": [a.to_dict() for a in self.artifacts],
            "edges": [e.to_dict() for e in self.edges],
        }

    def map_text(self, fn: Callable[[str], str]) -> LineageGraph:
        """A copy with ``fn`` applied to every text the graph shows, run ids and edges alike.

        The view passes the masking of secrets and of URL user info, once, before any escaping.
        """
        runs = {fn(run_id): run.map_text(fn) for run_id, run in self.runs.items()}
        edges = [Edge(fn(e.source), fn(e.target), tuple(map(fn, e.artifact_names))) for e in self.edges]
        warnings = [fn(w) for w in self.warnings]
        return LineageGraph(
            runs, edges, self.depth, self.truncated, warnings, self.max_runs, self.runs_not_shown
        )

    def hide_runs(self, run_ids: Collection[str]) -> None:
        """Show ``run_ids`` only as opaque runs: no id, DAG, task, state, link or artifact.

        They keep their place in the graph (their edges, without artifact names) so that the user
        sees that the lineage goes on through a run they may not read.
        """
        opaque = {
            run_id: f"{HIDDEN_PREFIX}{n}"
            for n, run_id in enumerate((r for r in self.runs if r in run_ids), start=1)
        }
        if not opaque:
            return
        runs: dict[str, RunNode] = {}
        for run_id, run in self.runs.items():
            if run_id in opaque:
                run = RunNode(opaque[run_id], run.distance, run.in_dag_run, hidden=True)
            runs[run.run_id] = run
        self.runs = runs
        edges = []
        for e in self.edges:
            touches_hidden = e.source in opaque or e.target in opaque
            names = () if touches_hidden else e.artifact_names  # what a hidden run made or used
            edges.append(Edge(opaque.get(e.source, e.source), opaque.get(e.target, e.target), names))
        self.edges = edges


def _airflow_task(metadata: Mapping[str, object]) -> AirflowTask | None:
    """The Airflow identity a run's metadata records, when the run was launched by Airflow."""
    values = {key: metadata.get(name) for key, name in AIRFLOW_IDENTITY_KEYS.items()}
    if not all(isinstance(values[key], str) and values[key] for key in ("dag_id", "run_id", "task_id")):
        return None
    map_index, attempt = values["map_index"], metadata.get(ATTEMPT_KEY)
    ended_by = metadata.get(ENDED_BY_KEY)
    return AirflowTask(
        dag_id=str(values["dag_id"]),
        run_id=str(values["run_id"]),
        task_id=str(values["task_id"]),
        map_index=map_index if isinstance(map_index, int) else -1,
        attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None,
        ended_by=ended_by if isinstance(ended_by, str) and ended_by else None,
    )


Details = tuple[AirflowTask | None, list[Artifact], RunUsage | None, str | None]


def _details(store: ProviderStore, run_id: str) -> Details:
    """A run's Airflow task, artifacts, usage and, for a cache hit, the run it was cached from."""
    metadata = store.metadata(run_id)
    artifacts = [Artifact(run_id, name, str(a.path)) for name, a in sorted(store.artifacts(run_id).items())]
    usage = RunUsage.from_values(metadata.get(USAGE_KEY), metadata.get(COST_KEY))
    cached_from = metadata.get(CACHED_FROM_KEY)
    return _airflow_task(metadata), artifacts, usage, cached_from if isinstance(cached_from, str) else None


def build_graph(
    stores_and_seeds: Sequence[tuple[ProviderStore, Sequence[Seed]]], depth: int, max_runs: int = MAX_RUNS
) -> LineageGraph:
    """The lineage graph around the seeds, read from each store (a task's first tracker store).

    :param stores_and_seeds: for each store, the seeds whose tasks track to it.
    :param depth: hops to follow each way from the seeds (1..``MAX_DEPTH``).
    :param max_runs: runs drawn at most, the nearest first; the graph counts the ones left out.
    """
    if not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be between 1 and {MAX_DEPTH}, got {depth!r}")
    if max_runs < 1:
        raise ValueError(f"max_runs must be at least 1, got {max_runs!r}")
    graph = LineageGraph(runs={}, edges=[], depth=depth, max_runs=max_runs)
    edges: dict[tuple[str, str], set[str]] = {}
    cut: set[str] = set()
    for store, seeds in stores_and_seeds:
        try:
            walk, details = _read_store(store, seeds, depth, graph.runs, max_runs - len(graph.runs))
        except Exception as e:  # a store that fails mid-walk must not hide the other stores' lineage
            log.warning("Lineage view: reading %r failed: %s: %s", store, type(e).__name__, e)
            graph.warnings.append(f"Tracker store {store!r} could not be read: {type(e).__name__}: {e}")
            continue
        graph.truncated = graph.truncated or walk.truncated
        if walk.unread:
            graph.warnings.append(_unread_warning(store, walk.unread))
        cut |= walk.cut
        for key, names in walk.edges.items():
            edges.setdefault(key, set()).update(names)
        for run_id, (task, artifacts, usage, cached_from) in details.items():
            graph.runs[run_id] = RunNode(
                run_id,
                walk.distance[run_id],
                task=task,
                artifacts=artifacts,
                usage=usage,
                cached_from=cached_from,
            )
        for seed in seeds:
            if seed.run_id in graph.runs:
                _mark_seed(graph.runs[seed.run_id], seed)
    graph.runs_not_shown = len(cut - set(graph.runs))
    graph.edges = [Edge(s, t, tuple(sorted(names))) for (s, t), names in sorted(edges.items())]
    return graph


def _unread_warning(store: ProviderStore, unread: int) -> str:
    return (
        f"Tracker store {store!r}: {unread} entries without an index were not read (a view reads at "
        f"most {GRAPH_READS} beyond the store's listing), so edges of runs written without this "
        "provider's index may be missing. Index them with `torchx-airflow-tracker --fsspec <root> "
        "reindex`, and remove what is not a run from the store's root."
    )


def _mark_seed(node: RunNode, seed: Seed) -> None:
    node.in_dag_run, node.distance = True, 0
    recorded = node.task
    node.task = seed.task or node.task
    if node.task is not None and recorded is not None and node.task is not recorded:
        # what Airflow knows (state) with what the store recorded (which attempt)
        node.task.attempt = node.task.attempt or recorded.attempt
        node.task.ended_by = node.task.ended_by or recorded.ended_by
    node.app_state = seed.app_state
    node.links.update(seed.links)
    node.usage = seed.usage or node.usage
    node.cached_from = seed.cached_from or node.cached_from


def _read_store(
    store: ProviderStore, seeds: Sequence[Seed], depth: int, known: Mapping[str, RunNode], budget: int
) -> tuple[Walk, dict[str, Details]]:
    """One store's walk from its seeds, and the details of the runs not already known."""
    walk = Walk(store, depth, budget=max(0, budget))
    walk.run(seed.run_id for seed in seeds)
    new = [run_id for run_id in walk.distance if run_id not in known]
    return walk, dict(zip(new, parallel_map(functools.partial(_details, store), new), strict=True))
