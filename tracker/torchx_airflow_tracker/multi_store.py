"""Several stores behind one ``torchx.tracker`` entry point (``airflow_stores``).

TorchX lists a job's trackers in ``TORCHX_TRACKERS`` separated by commas, and its Slurm scheduler
passes env to the job as ``srun --export=ALL,K=V,...``, which splits such a value apart. One entry
point whose config lists every store keeps all of them, on every scheduler::

    TORCHX_TRACKERS=airflow_stores
    TORCHX_TRACKER_AIRFLOW_STORES_CONFIG='[{"kind": "fsspec", "config": {"root": "s3://b/t"}},
                                           {"kind": "mlflow", "config": {"tracking_uri": "http://m:5000"}}]'

(as JSON, or ``base64:`` of it). Writes go to every store; reads come from the first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from torchx.tracker.api import Lineage, TrackerArtifact, TrackerBase, TrackerSource

from torchx_airflow_tracker.config import TrackerConfigError, load_json_text
from torchx_airflow_tracker.protocol import ProviderStore

KINDS = ("fsspec", "mlflow")


class MultiStore(TrackerBase):
    """Writes to every store, reads from the first."""

    def __init__(self, stores: Sequence[ProviderStore]) -> None:
        if not stores:
            raise TrackerConfigError("The airflow_stores tracker needs at least one store.")
        self.stores = list(stores)

    def __repr__(self) -> str:
        return f"MultiStore({self.stores!r})"

    def add_artifact(
        self, run_id: str, name: str, path: str, metadata: Mapping[str, object] | None = None
    ) -> None:
        for store in self.stores:  # every store that would refuse the write says so before any writes
            store.check_artifact(name, path, metadata)
        for store in self.stores:
            store.add_artifact(run_id, name, path, metadata)

    def artifacts(self, run_id: str) -> Mapping[str, TrackerArtifact]:
        return self.stores[0].artifacts(run_id)

    def add_metadata(self, run_id: str, **kwargs: object) -> None:
        for store in self.stores:  # every store that would refuse the write says so before any writes
            store.check_metadata(**kwargs)
        for store in self.stores:
            store.add_metadata(run_id, **kwargs)

    def log_metrics(
        self,
        run_id: str,
        metrics: Mapping[str, float],
        step: int,
        entry: Mapping[str, Any],
        entry_name: str,
        key: str,
    ) -> None:
        """Step metrics to every store (``torchx_airflow_tracker.metrics``), the fsspec form as
        metadata ``key``."""
        for store in self.stores:
            store.log_metrics(run_id, metrics, step, entry, entry_name, key=key)

    def metadata(self, run_id: str) -> Mapping[str, object]:
        return self.stores[0].metadata(run_id)

    def add_source(self, run_id: str, source_id: str, artifact_name: str | None = None) -> None:
        for store in self.stores:
            store.add_source(run_id, source_id, artifact_name)

    def sources(self, run_id: str, artifact_name: str | None = None) -> Iterable[TrackerSource]:
        return self.stores[0].sources(run_id, artifact_name)

    def lineage(self, run_id: str) -> Lineage:
        return self.stores[0].lineage(run_id)

    def run_ids(self, **kwargs: str) -> Iterable[str]:
        return self.stores[0].run_ids(**kwargs)


def create(config: str | None) -> MultiStore:
    """``torchx.tracker`` entry point: a JSON list of ``{"kind": "fsspec"|"mlflow", "config": {...}}``."""
    from torchx_airflow_tracker import fsspec_store, mlflow_store

    example = '[{"kind": "fsspec", "config": {"root": "/data/tracker"}}]'
    entries = load_json_text("airflow_stores tracker", (config or "").strip(), example)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise TrackerConfigError(f"The airflow_stores config must be a JSON list such as {example}.")
    factories: dict[str, Callable[[str | None], ProviderStore]] = {
        "fsspec": fsspec_store.create,
        "mlflow": mlflow_store.create,
    }
    stores = []
    for entry in entries:
        kind = entry.get("kind")
        if kind not in factories:
            raise TrackerConfigError(
                f"Unknown store kind {kind!r} in airflow_stores; use one of {list(KINDS)}."
            )
        stores.append(factories[kind](json.dumps(entry.get("config"))))
    return MultiStore(stores)
