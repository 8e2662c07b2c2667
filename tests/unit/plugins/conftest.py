"""A real local fsspec tracker store in tmp_path, written as TorchX jobs write it: each job opens the
store from its ``torchx.tracker`` entry point config and records through TorchX's own ``AppRun``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import pytest
from torchx.tracker.api import AppRun
from torchx_airflow_tracker.fsspec_store import FsspecStore, create

JobWriter = Callable[..., None]


@pytest.fixture
def store_root(tmp_path) -> str:
    return str(tmp_path / "tracker")


@pytest.fixture
def job(store_root) -> JobWriter:
    """``job(run_id, sources={parent: artifact name or None}, artifacts={name: path}, **metadata)``:
    what one job records, through a store object of its own (as a separate process would)."""

    def write(
        run_id: str,
        sources: Mapping[str, str | None] | None = None,
        artifacts: Mapping[str, str] | None = None,
        **metadata: object,
    ) -> None:
        backend = create(json.dumps({"root": store_root}))
        backend.create_root()
        run = AppRun(id=run_id, backends=[backend])
        for parent, artifact_name in (sources or {}).items():
            run.add_source(parent, artifact_name)
        for name, path in (artifacts or {}).items():
            run.add_artifact(name, path)
        if metadata:
            run.add_metadata(**metadata)

    return write


@pytest.fixture
def store(store_root, job) -> FsspecStore:
    """The store as the lineage view opens it: a reader of what the jobs wrote."""
    return FsspecStore(store_root)
