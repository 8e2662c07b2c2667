"""The lineage graph of a tracked run: direct parents and descendants, and the transitive graph.

TorchX's ``Lineage`` class is empty; ``RunLineage`` subclasses it, so a backend's ``lineage()``
still returns a ``torchx.tracker.api.Lineage``, but one that carries the graph.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torchx.tracker.api import Lineage, TrackerSource

# run id -> {neighbour run id: artifact names of the edge}; None stands for "no artifact name"
EdgeReader = Callable[[str], Mapping[str, tuple[str | None, ...]]]
DEFAULT_DEPTH = 10


@dataclass(frozen=True)
class LineageEdge:
    """``source_run_id`` is a source (parent) of ``run_id``, through ``artifact_names``."""

    source_run_id: str
    run_id: str
    artifact_names: tuple[str | None, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.source_run_id, self.run_id)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source_run_id, "run": self.run_id, "artifact_names": list(self.artifact_names)}


@dataclass
class RunLineage(Lineage):
    """Lineage of ``run_id``: ``parents``/``descendants`` are direct edges, ``upstream``/``downstream``
    every edge reachable within ``depth`` hops (direct edges included)."""

    run_id: str
    parents: list[LineageEdge] = field(default_factory=list)
    descendants: list[LineageEdge] = field(default_factory=list)
    upstream: list[LineageEdge] = field(default_factory=list)
    downstream: list[LineageEdge] = field(default_factory=list)
    depth: int = DEFAULT_DEPTH

    @property
    def parent_ids(self) -> list[str]:
        return [edge.source_run_id for edge in self.parents]

    @property
    def descendant_ids(self) -> list[str]:
        return [edge.run_id for edge in self.descendants]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "depth": self.depth,
            "parents": [e.to_dict() for e in self.parents],
            "descendants": [e.to_dict() for e in self.descendants],
            "upstream": [e.to_dict() for e in self.upstream],
            "downstream": [e.to_dict() for e in self.downstream],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def to_text(self) -> str:
        """The graph as two indented trees: what the run came from, and what came from it."""
        lines = [self.run_id]
        lines += _tree(self.run_id, self.upstream, up=True)
        lines += _tree(self.run_id, self.downstream, up=False)
        return "\n".join(lines)

    def to_mermaid(self) -> str:
        """The graph as a Mermaid flowchart (parents point to children)."""
        edges = _sorted(set(self.upstream) | set(self.downstream))
        ids = {self.run_id} | {e.source_run_id for e in edges} | {e.run_id for e in edges}
        node = {run_id: f"n{i}" for i, run_id in enumerate(sorted(ids))}
        lines = ["flowchart LR"]
        lines += [f'    {node[r]}["{r}"]' for r in sorted(ids)]
        for e in edges:
            label = ", ".join(name or "" for name in e.artifact_names if name)
            arrow = f"-->|{label}|" if label else "-->"
            lines.append(f"    {node[e.source_run_id]} {arrow} {node[e.run_id]}")
        lines.append(f"    style {node[self.run_id]} stroke-width:3px")
        return "\n".join(lines)


def edges_to_sources(
    edges: Mapping[str, tuple[str | None, ...]], artifact_name: str | None = None
) -> list[TrackerSource]:
    """One ``TrackerSource`` per (run, artifact name) of ``edges``; only ``artifact_name`` if given."""
    return [
        TrackerSource(other, name)
        for other, names in sorted(edges.items())
        for name in names
        if artifact_name is None or name == artifact_name
    ]


def _sorted(edges: Iterable[LineageEdge]) -> list[LineageEdge]:
    return sorted(edges, key=lambda e: e.key)


def artifact_names_key(names: Iterable[str | None]) -> tuple[str | None, ...]:
    """Artifact names of an edge in a canonical order: None (no name) first, then sorted names."""
    unique = set(names)
    return ((None,) if None in unique else ()) + tuple(sorted(n for n in unique if n is not None))


def _tree(root: str, edges: Iterable[LineageEdge], up: bool) -> list[str]:
    children: dict[str, list[LineageEdge]] = {}
    for e in edges:
        children.setdefault(e.run_id if up else e.source_run_id, []).append(e)
    lines: list[str] = []
    seen = {root}

    def walk(run_id: str, indent: int) -> None:
        for e in _sorted(children.get(run_id, [])):
            other = e.source_run_id if up else e.run_id
            names = ", ".join(n for n in e.artifact_names if n)
            arrow = "<- " if up else "-> "
            lines.append(f"{'  ' * indent}{arrow}{other}" + (f" [{names}]" if names else ""))
            if other not in seen:
                seen.add(other)
                walk(other, indent + 1)

    walk(root, 1)
    return lines


def _walk(run_id: str, read: EdgeReader, depth: int, up: bool) -> list[LineageEdge]:
    edges: set[LineageEdge] = set()
    seen = {run_id}
    frontier = deque([(run_id, 0)])
    while frontier:
        current, hops = frontier.popleft()
        if hops >= depth:
            continue
        for other, names in read(current).items():
            edge = LineageEdge(other, current, names) if up else LineageEdge(current, other, names)
            edges.add(edge)
            if other not in seen:
                seen.add(other)
                frontier.append((other, hops + 1))
    return _sorted(edges)


def build_lineage(
    run_id: str, parents_of: EdgeReader, children_of: EdgeReader, depth: int = DEFAULT_DEPTH
) -> RunLineage:
    """Walk the graph from ``run_id`` up to ``depth`` hops each way (cycles are walked once)."""
    if depth < 1:
        raise ValueError(f"lineage depth must be at least 1, got {depth!r}")
    return RunLineage(
        run_id=run_id,
        parents=_sorted(LineageEdge(p, run_id, names) for p, names in parents_of(run_id).items()),
        descendants=_sorted(LineageEdge(run_id, c, names) for c, names in children_of(run_id).items()),
        upstream=_walk(run_id, parents_of, depth, up=True),
        downstream=_walk(run_id, children_of, depth, up=False),
        depth=depth,
    )


class EdgeQueries:
    """``sources``, ``descendants`` and ``lineage`` of a store that can read a run's edges both ways.

    A store defines ``_parents(run_id)`` and ``_children(run_id)`` (each ``{run id: artifact names}``).
    """

    def _parents(self, run_id: str) -> Mapping[str, tuple[str | None, ...]]:
        raise NotImplementedError

    def _children(self, run_id: str) -> Mapping[str, tuple[str | None, ...]]:
        raise NotImplementedError

    def sources(self, run_id: str, artifact_name: str | None = None) -> Iterable[TrackerSource]:
        return edges_to_sources(self._parents(run_id), artifact_name)

    def descendants(self, run_id: str, artifact_name: str | None = None) -> list[TrackerSource]:
        """Runs that have ``run_id`` as a source (``source_run_id`` holds the descendant's id)."""
        return edges_to_sources(self._children(run_id), artifact_name)

    def lineage(self, run_id: str, depth: int = DEFAULT_DEPTH) -> RunLineage:
        return build_lineage(run_id, self._parents, self._children, depth)


class EdgeGraph:
    """Every edge of a store both ways, read at once (a store's ``graph()``): ``parents_of`` and
    ``children_of`` answer from memory, ``{run id: artifact names}`` as ``_parents``/``_children``."""

    def __init__(self) -> None:
        self.parents: dict[str, dict[str, set[str | None]]] = {}
        self.children: dict[str, dict[str, set[str | None]]] = {}
        #: entries a bounded read left unread (``graph(max_reads=...)``)
        self.unread = 0

    def add(self, source_id: str, run_id: str, artifact_name: str | None) -> None:
        self.parents.setdefault(run_id, {}).setdefault(source_id, set()).add(artifact_name)
        self.children.setdefault(source_id, {}).setdefault(run_id, set()).add(artifact_name)

    def parents_of(self, run_id: str) -> dict[str, tuple[str | None, ...]]:
        return {p: artifact_names_key(n) for p, n in self.parents.get(run_id, {}).items()}

    def children_of(self, run_id: str) -> dict[str, tuple[str | None, ...]]:
        return {c: artifact_names_key(n) for c, n in self.children.get(run_id, {}).items()}
