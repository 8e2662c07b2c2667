"""One tracker store's walk from a DAG run's runs: nearest runs first, a bounded number of them.

The walk goes up (``sources()``) and down (``descendants()``) one hop at a time, both ways in the
same round, so the runs nearest to the DAG run are the ones drawn when the graph is larger than
``budget``. Runs found beyond the budget are counted, not read: every run the walk admits costs a
fixed number of store reads (its sources, its descendants, later its metadata and artifacts), so a
view costs at most ``budget`` times that, whatever the size of the store.

A store that gives its whole edge graph at once (``graph()``: the fsspec store from one listing, the
MLflow store from one search) is read once per walk (``graph_snapshot``); any other store is asked
per admitted run. Either way the walk only reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchx.tracker.api import TrackerBase

# Store reads are I/O (object stores, an MLflow server): a small pool overlaps them.
READ_WORKERS = 8
#: Reads a walk's graph snapshot makes beyond the store's one listing, at most: an fsspec store's
#: run directories without an index and markers named by digest. Anyone tracking to a store can
#: fill its root with such entries; past this bound they are counted (``Walk.unread``), not read.
GRAPH_READS = 64


def parallel_map(fn: Callable[[str], Any], items: Sequence[str]) -> list[Any]:
    """``[fn(item) for item in items]``, overlapped in a small thread pool."""
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


def graph_snapshot(store: TrackerBase) -> Any:
    """The store's whole edge graph from one listing (``FsspecStore.graph()``), or None for a store
    that answers edge queries one run at a time (MLflow). Read once per walk, so a walk over N runs
    costs one listing of the store, not N; runs written during the walk are not needed by it. A
    store whose graph takes ``max_reads`` reads at most ``GRAPH_READS`` entries beyond the listing."""
    import inspect

    graph = getattr(store, "graph", None)
    if not callable(graph):
        return None
    if "max_reads" in inspect.signature(graph).parameters:
        return graph(max_reads=GRAPH_READS)
    return graph()


def _names(by_run: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    return {run_id: tuple(sorted(n for n in names if n)) for run_id, names in by_run.items()}


class Walk:
    """One store's breadth-first walk from the seeds, ``depth`` hops each way, ``budget`` runs at most.

    After ``run()``: ``distance`` holds the admitted runs (negative upstream, positive downstream),
    ``edges`` the edges between them with their artifact names, ``cut`` the runs found but not
    admitted (over budget), ``truncated`` whether runs lie beyond ``depth``.
    """

    def __init__(self, store: TrackerBase, depth: int, budget: int) -> None:
        self.store = store
        self.depth = depth
        self.budget = budget
        self.distance: dict[str, int] = {}
        self.edges: dict[tuple[str, str], set[str]] = {}
        self.cut: set[str] = set()
        self.truncated = False
        self._graph: Any = None

    @property
    def unread(self) -> int:
        """Entries of the store the graph snapshot left unread (over ``GRAPH_READS``)."""
        return int(getattr(self._graph, "unread", 0) or 0)

    def run(self, seeds: Iterable[str]) -> None:
        """Walk from ``seeds`` (the first ``budget`` of them; the rest are cut)."""
        start = list(dict.fromkeys(seeds))
        self.cut.update(start[self.budget :])
        start = start[: self.budget]
        self.distance.update(dict.fromkeys(start, 0))
        up, down = list(start), list(start)
        self._graph = graph_snapshot(self.store)
        for hop in range(1, self.depth + 2):
            if not up and not down:
                return
            found_up, found_down = self._read(up, down)
            if hop > self.depth:  # read only to say whether there are runs beyond the depth
                self.truncated = any(set(n) - set(self.distance) for n in (*found_up, *found_down))
                return
            up = self._admit(up, found_up, -hop)
            down = self._admit(down, found_down, hop)

    def _read(self, up: list[str], down: list[str]) -> tuple[list[dict], list[dict]]:
        """The neighbours of both frontiers, read in one parallel round."""
        jobs = [f"u{run_id}" for run_id in up] + [f"d{run_id}" for run_id in down]
        found = parallel_map(self._neighbours, jobs)
        return found[: len(up)], found[len(up) :]

    def _neighbours(self, job: str) -> dict[str, tuple[str, ...]]:
        way, run_id = job[0], job[1:]
        if self._graph is not None:
            return _names(self._graph.parents_of(run_id) if way == "u" else self._graph.children_of(run_id))
        if way == "u":
            return _grouped(self.store.sources(run_id))
        return _grouped(self.store.descendants(run_id))  # type: ignore[attr-defined]

    def _admit(self, frontier: list[str], found: list[dict], distance: int) -> list[str]:
        """Record the edges to admitted runs, admit new runs while the budget lasts; the next frontier."""
        following: list[str] = []
        for run_id, neighbours in zip(frontier, found, strict=True):
            for other in sorted(neighbours):
                if other not in self.distance:
                    if len(self.distance) >= self.budget:
                        self.cut.add(other)
                        continue
                    self.distance[other] = distance
                    following.append(other)
                key = (other, run_id) if distance < 0 else (run_id, other)
                self.edges.setdefault(key, set()).update(neighbours[other])
        return following
