"""What this package's stores offer beyond TorchX's ``TrackerBase``, as typed protocols.

``FsspecStore`` and ``MlflowStore`` are ``ProviderStore``s: the launcher (the Airflow provider's
``TrackerSet``), the views and the command line read and write them through these methods only,
never by probing for attributes. ``MetricsStore`` is the one part a job's tracking checks at run
time (``isinstance``): ``AppRun`` may also be handed TorchX's own trackers, which take step metrics
as metadata instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from torchx.tracker.api import Lineage, TrackerArtifact, TrackerSource

    from torchx_airflow_tracker.read_limits import ReadLimits
    from torchx_airflow_tracker.run_graph import EdgeGraph


@runtime_checkable
class MetricsStore(Protocol):
    """A store that keeps a run's step metrics itself (``torchx_airflow_tracker.metrics``)."""

    def log_metrics(
        self,
        run_id: str,
        metrics: Mapping[str, float],
        step: int,
        entry: Mapping[str, Any],
        entry_name: str,
        key: str,
    ) -> None: ...


class CacheRecords(Protocol):
    """The provider's cache records in a store (``cache_records``), by key."""

    def put(self, key: str, record: Mapping[str, Any]) -> None: ...

    def get(self, key: str) -> dict[str, Any] | None: ...

    def candidates(self, key: str) -> list[dict[str, Any]]:
        """Every record of ``key`` that decodes, newest first, at most ``MAX_CANDIDATES``: anyone may
        write one, so the reader takes the newest that verifies, not the newest."""
        ...

    def delete(self, key: str) -> bool: ...

    def keys(self) -> list[str]: ...


@runtime_checkable
class ProviderStore(MetricsStore, Protocol):
    """One tracker store of this package: TorchX's ``TrackerBase`` and what the provider adds."""

    #: readers of what any job wrote bound what they read (``ReadLimits.for_readers()``)
    limits: ReadLimits
    #: run id -> what of it the limits left unread
    oversized: dict[str, set[str]]

    # TorchX's TrackerBase

    def add_artifact(
        self, run_id: str, name: str, path: str, metadata: Mapping[str, object] | None = None
    ) -> None: ...

    def artifacts(self, run_id: str) -> Mapping[str, TrackerArtifact]: ...

    def add_metadata(self, run_id: str, **kwargs: object) -> None: ...

    def metadata(self, run_id: str) -> Mapping[str, object]: ...

    def add_source(self, run_id: str, source_id: str, artifact_name: str | None = None) -> None: ...

    def sources(self, run_id: str, artifact_name: str | None = None) -> Iterable[TrackerSource]: ...

    def lineage(self, run_id: str) -> Lineage: ...

    def run_ids(self, **kwargs: str) -> Iterable[str]: ...

    # this package's

    def check_metadata(self, **kwargs: object) -> None:
        """Raise what ``add_metadata`` would, without writing (a multi-store asks every store first)."""

    def check_artifact(self, name: str, path: str, metadata: Mapping[str, object] | None = None) -> None:
        """Raise what ``add_artifact`` would, without writing."""

    def make_ready(self) -> None:
        """Writer, before a job writes: the store exists (an fsspec root, an MLflow experiment)."""

    def graph(self, source_id: str | None = None, max_reads: int | None = None) -> EdgeGraph:
        """Every edge of the store both ways, read at once (``source_id``: only the edges from it);
        ``max_reads`` bounds what a store that reads entry by entry reads beyond its listing."""
        ...

    @property
    def cache_records(self) -> CacheRecords: ...

    def reindex(self) -> int | None:
        """Writer: rebuild the store's index of edges; the markers written, or None for a store that
        keeps no index."""
        ...

    def run_url(self, run_id: str) -> str | None:
        """The page of ``run_id`` in the store's own UI, if it has one."""
        ...

    def filesystem(self) -> tuple[Any, str] | None:
        """``(fsspec filesystem, root)`` of a store kept in files; None for one that is not."""
        ...
