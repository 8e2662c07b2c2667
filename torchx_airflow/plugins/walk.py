"""One tracker store's walk from a DAG run's runs: nearest runs first, a bounded number of them.

The walk goes up (a run's parents) and down (its children) one hop at a time, both ways in the
same round, so the runs nearest to the DAG run are the ones drawn when the graph is larger than
``budget``. Runs found beyond the budget are counted, not read: every run the walk admits costs a
fixed number of store reads (later its metadata and artifacts), so a view costs at most ``budget``
times that, whatever the size of the store.

The store's whole edge graph (``ProviderStore.graph()``: the fsspec store's from one listing, the
MLflow store's from one search) is read once per walk: a walk over N runs costs one listing of the
store, not N; runs written during the walk are not needed by it. The walk only reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchx_airflow_tracker.protocol import ProviderStore
    from torchx_airflow_tracker.run_graph import EdgeGraph

# Store reads are I/O (object stores, an MLflow server): a small pool overlaps them.
READ_WORKERS = 8
#: Reads a walk's graph snapshot makes beyond the store's one listing, at most: an fsspec store's
#: run directories without an index and markers named by digest. Anyone tracking to a store can
#: fill its root with such entries; past this bound they are counted (``Walk.unread``), not read.
GRAPH_READS = 64


def parallel_map(fn: Callable[[str], Any], items: Sequence[str]) -> list[Any]:
    """``[fn(item) for item in items]``, the first in this thread (what a store's read imports on
    first use, MLflow's modules, is imported by one thread), the rest overlapped in a small pool."""
    if len(items) < 3:
        return [fn(item) for item in items]
    first = fn(items[0])
    with ThreadPoolExecutor(max_workers=min(READ_WORKERS, len(items) - 1)) as pool:
        return [first, *pool.map(fn, items[1:])]


def _names(by_run: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    return {run_id: tuple(sorted(n for n in names if n)) for run_id, names in by_run.items()}


class Walk:
    """One store's breadth-first walk from the seeds, ``depth`` hops each way, ``budget`` runs at most.

    After ``run()``: ``distance`` holds the admitted runs (negative upstream, positive downstream),
    ``edges`` the edges between them with their artifact names, ``cut`` the runs found but not
    admitted (over budget), ``truncated`` whether runs lie beyond ``depth``.
    """

    def __init__(self, store: ProviderStore, depth: int, budget: int) -> None:
        self.store = store
        self.depth = depth
        self.budget = budget
        self.distance: dict[str, int] = {}
        self.edges: dict[tuple[str, str], set[str]] = {}
        self.cut: set[str] = set()
        self.truncated = False
        self._graph: EdgeGraph | None = None

    @property
    def unread(self) -> int:
        """Entries of the store the graph snapshot left unread (over ``GRAPH_READS``)."""
        return self._graph.unread if self._graph is not None else 0

    def run(self, seeds: Iterable[str]) -> None:
        """Walk from ``seeds`` (the first ``budget`` of them; the rest are cut)."""
        start = list(dict.fromkeys(seeds))
        self.cut.update(start[self.budget :])
        start = start[: self.budget]
        self.distance.update(dict.fromkeys(start, 0))
        up, down = list(start), list(start)
        # a store's whole graph; past GRAPH_READS entries beyond its listing, what is left is unread
        graph = self._graph = self.store.graph(max_reads=GRAPH_READS)
        for hop in range(1, self.depth + 2):
            if not up and not down:
                return
            found_up = [_names(graph.parents_of(run_id)) for run_id in up]
            found_down = [_names(graph.children_of(run_id)) for run_id in down]
            if hop > self.depth:  # read only to say whether there are runs beyond the depth
                self.truncated = any(set(n) - set(self.distance) for n in (*found_up, *found_down))
                return
            up = self._admit(up, found_up, -hop)
            down = self._admit(down, found_down, hop)

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
