"""The lineage graph of a DAG run: its tracked runs, their artifacts, and the sources between them.

Pure data and tracker reads, no Airflow: the seeds (the runs the DAG run's tasks pushed as XCom
``torchx_run_id``) come from the caller with what Airflow knows about them; the graph grows from
them through the tracker stores' ``sources()`` (upstream, including parents from earlier DAG runs
and other DAGs) and ``descendants()`` (downstream), up to ``depth`` hops each way, and every run's
``metadata()`` and ``artifacts()`` are read once.

Example::

    graph = build_graph([(store, [Seed("local_cwd://torchx/train-x", task_id="train")])], depth=3)
    graph.to_dict()["edges"]  # [{"source": ..., "target": ..., "artifact_names": [...]}]
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchx.tracker.api import TrackerBase

log = logging.getLogger(__name__)

DEFAULT_DEPTH = 3
MAX_DEPTH = 50
# Store reads are I/O (object stores, an MLflow server): a small pool overlaps them.
READ_WORKERS = 8
AIRFLOW_SCHEME = "airflow"
_HANDLE = re.compile(r"^(?P<scheduler>[A-Za-z0-9_\-]+)://(?P<session>[^/]*)/(?P<app_id>.+)$")
# The Airflow identity the operator records on every run (torchx_airflow.lineage.airflow_metadata).
_AIRFLOW_KEYS = {
    "dag_id": "airflow_dag_id",
    "run_id": "airflow_run_id",
    "task_id": "airflow_task_id",
    "map_index": "airflow_map_index",
}


@dataclass
class AirflowTask:
    """Which Airflow task instance a run belongs to, and what Airflow knows of it."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    state: str | None = None  # the task instance's state; None when not known or not readable

    @property
    def label(self) -> str:
        return self.task_id if self.map_index < 0 else f"{self.task_id} [{self.map_index}]"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as the lineage endpoint answers it."""
        return {
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "map_index": self.map_index,
            "state": self.state,
        }


@dataclass
class Seed:
    """A run of the DAG run being shown, with what Airflow knows of it (state, links)."""

    run_id: str
    task: AirflowTask | None = None
    app_state: str | None = None  # TorchX AppState name from the task's result, e.g. "SUCCEEDED"
    links: dict[str, str] = field(default_factory=dict)


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

    @property
    def scheduler(self) -> str | None:
        match = _HANDLE.match(self.run_id)
        return match.group("scheduler") if match else None

    @property
    def handle(self) -> str | None:
        """The TorchX app handle, or None for a tracked Python task."""
        return None if self.scheduler in (None, AIRFLOW_SCHEME) else self.run_id

    @property
    def app_name(self) -> str:
        match = _HANDLE.match(self.run_id)
        return match.group("app_id").rsplit("/", 1)[-1] if match else self.run_id

    @property
    def state(self) -> str | None:
        """The app's final state when known, else the task instance's state."""
        return self.app_state or (self.task.state if self.task else None)

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
        }


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

    @property
    def artifacts(self) -> list[Artifact]:
        return [a for run in self.runs.values() for a in run.artifacts]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of the whole graph."""
        return {
            "depth": self.depth,
            "truncated": self.truncated,
            "runs": [run.to_dict() for run in self.runs.values()],
            "artifacts": [a.to_dict() for a in self.artifacts],
            "edges": [e.to_dict() for e in self.edges],
        }


def _parallel_map(fn: Callable[[str], Any], items: Sequence[str]) -> list[Any]:
    if len(items) < 2:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(READ_WORKERS, len(items))) as pool:
        return list(pool.map(fn, items))


def _grouped(sources: Iterable[Any]) -> dict[str, tuple[str, ...]]:
    """TrackerSources (one per run and artifact name) as {run id: artifact names}."""
    names: dict[str, set[str]] = {}
    for source in sources:
        names.setdefault(source.source_run_id, set())
        if source.artifact_name:
            names[source.source_run_id].add(source.artifact_name)
    return {run_id: tuple(sorted(found)) for run_id, found in names.items()}


class _Walk:
    """One store's breadth-first walk from the seeds, each way, ``depth`` hops at most."""

    def __init__(self, store: TrackerBase, depth: int) -> None:
        self.store = store
        self.depth = depth
        self.distance: dict[str, int] = {}
        self.edges: dict[tuple[str, str], set[str]] = {}
        self.truncated = False

    def run(self, seeds: Iterable[str]) -> None:
        start = list(dict.fromkeys(seeds))
        for run_id in start:
            self.distance[run_id] = 0
        self._walk(start, up=True)
        self._walk(start, up=False)

    def _neighbours(self, run_id: str, up: bool) -> dict[str, tuple[str, ...]]:
        if up:
            return _grouped(self.store.sources(run_id))
        # the airflow_* stores keep a descendants index; a store without one fails here, and
        # build_graph shows that as a warning beside the other stores' lineage
        return _grouped(self.store.descendants(run_id))  # type: ignore[attr-defined]

    def _walk(self, start: list[str], up: bool) -> None:
        frontier, seen, hops = start, set(start), 0
        while frontier:
            found = _parallel_map(lambda r: self._neighbours(r, up), frontier)
            if hops == self.depth:  # the runs beyond are not shown, but say that there are some
                self.truncated = self.truncated or any(set(n) - seen for n in found)
                return
            hops += 1
            following: list[str] = []
            for run_id, neighbours in zip(frontier, found, strict=True):
                for other, names in neighbours.items():
                    key = (other, run_id) if up else (run_id, other)
                    self.edges.setdefault(key, set()).update(names)
                    if other not in seen:
                        seen.add(other)
                        following.append(other)
                        self.distance.setdefault(other, -hops if up else hops)
            frontier = following


def _airflow_task(metadata: Mapping[str, object]) -> AirflowTask | None:
    """The Airflow identity a run's metadata records, when the run was launched by Airflow."""
    values = {key: metadata.get(name) for key, name in _AIRFLOW_KEYS.items()}
    if not all(isinstance(values[key], str) and values[key] for key in ("dag_id", "run_id", "task_id")):
        return None
    map_index = values["map_index"]
    return AirflowTask(
        dag_id=str(values["dag_id"]),
        run_id=str(values["run_id"]),
        task_id=str(values["task_id"]),
        map_index=map_index if isinstance(map_index, int) else -1,
    )


def _details(store: TrackerBase, run_id: str) -> tuple[AirflowTask | None, list[Artifact]]:
    task = _airflow_task(store.metadata(run_id))
    artifacts = [Artifact(run_id, name, str(a.path)) for name, a in sorted(store.artifacts(run_id).items())]
    return task, artifacts


def build_graph(stores_and_seeds: Sequence[tuple[TrackerBase, Sequence[Seed]]], depth: int) -> LineageGraph:
    """The lineage graph around the seeds, read from each store (a task's first tracker store).

    :param stores_and_seeds: for each store, the seeds whose tasks track to it.
    :param depth: hops to follow each way from the seeds (1..``MAX_DEPTH``).
    """
    if not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be between 1 and {MAX_DEPTH}, got {depth!r}")
    runs: dict[str, RunNode] = {}
    edges: dict[tuple[str, str], set[str]] = {}
    truncated = False
    warnings: list[str] = []
    for store, seeds in stores_and_seeds:
        try:
            walk, details = _read_store(store, seeds, depth, known=runs)
        except Exception as e:  # a store that fails mid-walk must not hide the other stores' lineage
            log.warning("Lineage view: reading %r failed: %s: %s", store, type(e).__name__, e)
            warnings.append(f"Tracker store {store!r} could not be read: {type(e).__name__}: {e}")
            continue
        truncated = truncated or walk.truncated
        for key, names in walk.edges.items():
            edges.setdefault(key, set()).update(names)
        for run_id, (task, artifacts) in details.items():
            runs[run_id] = RunNode(run_id, walk.distance[run_id], task=task, artifacts=artifacts)
        for seed in seeds:
            node = runs[seed.run_id]
            node.in_dag_run, node.distance = True, 0
            node.task = seed.task or node.task
            node.app_state = seed.app_state
            node.links.update(seed.links)
    return LineageGraph(
        runs=runs,
        edges=[Edge(s, t, tuple(sorted(names))) for (s, t), names in sorted(edges.items())],
        depth=depth,
        truncated=truncated,
        warnings=warnings,
    )


def _read_store(
    store: TrackerBase, seeds: Sequence[Seed], depth: int, known: Mapping[str, RunNode]
) -> tuple[_Walk, dict[str, tuple[AirflowTask | None, list[Artifact]]]]:
    """One store's walk from its seeds, and the details of the runs not already known."""
    walk = _Walk(store, depth)
    walk.run(seed.run_id for seed in seeds)
    new = [run_id for run_id in walk.distance if run_id not in known]
    return walk, dict(zip(new, _parallel_map(functools.partial(_details, store), new), strict=True))
