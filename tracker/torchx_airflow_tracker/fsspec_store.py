"""An fsspec tracker store: any fsspec URL (local path, ``file://``, ``s3://``, ``memory://``, ...).

The layout is TorchX's ``FsspecTracker`` layout, so stores written by either read through the other::

    <root>/<b32(run_id)>/metadata/<entry>          {"metadata": {...}}
    <root>/<b32(run_id)>/artifacts/<entry>         {"name": ..., "path": ..., "metadata": ...}
    <root>/<b32(run_id)>/sources/<b32(parent)>     one artifact name per line ("" for none)
    <root>/<b32(parent)>/descendants/<b32(run_id)> the same lines, the reverse edge

What this store adds: entry names unique across processes and hosts (``<time_ns>-<uuid>``) that
sort in write order, so the later write wins deterministically; atomic writes (a reader never sees
a partial entry); idempotent edges with several artifact names; the reverse edge always written;
``lineage()``; and ``run_ids(parent_run_id=...)`` answered from the descendants index.
"""

from __future__ import annotations

import json
import posixpath
import time
import uuid
from base64 import b32decode, b32encode
from binascii import Error as B32Error
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from torchx.tracker.api import TrackerArtifact, TrackerBase

from torchx_airflow_tracker.config import parse_config
from torchx_airflow_tracker.lineage import EdgeQueries, artifact_names_key

if TYPE_CHECKING:
    import fsspec

METADATA, ARTIFACTS, SOURCES, DESCENDANTS, STAGING = (
    "metadata",
    "artifacts",
    "sources",
    "descendants",
    ".staging",
)
_LOCAL_PROTOCOLS = {"file", "local"}


def encode_run_id(run_id: str) -> str:
    """A run id as a case-aware, POSIX-safe directory name (TorchX's encoding)."""
    return b32encode(run_id.encode("utf-8")).decode("ascii")


def decode_run_id(name: str) -> str | None:
    """The run id a directory name encodes, or None if the name is not one (e.g. ``.staging``)."""
    try:
        return b32decode(name).decode("utf-8")
    except (B32Error, UnicodeDecodeError, ValueError):
        return None


def entry_name() -> str:
    """A file name unique across processes and hosts that sorts in write-time order."""
    return f"{time.time_ns()}-{uuid.uuid4().hex}"


def _encode_names(names: Iterable[str | None]) -> str:
    return "".join(f"{name or ''}\n" for name in artifact_names_key(names))


def _decode_names(text: str) -> tuple[str | None, ...]:
    lines = [line.strip() for line in text.splitlines()]
    return artifact_names_key(line or None for line in lines) if lines else (None,)


class FsspecStore(EdgeQueries, TrackerBase):
    """TorchX tracker backend on an fsspec filesystem.

    :param root: a path or URL; created if missing.
    :param storage_options: passed to the fsspec filesystem (credentials, endpoint, ...).

    Example::

        store = FsspecStore("s3://bucket/tracker", {"endpoint_url": "http://127.0.0.1:9000"})
        store.add_metadata("slurm://torchx/12", lr=0.1)
    """

    def __init__(self, root: str, storage_options: Mapping[str, Any] | None = None) -> None:
        import fsspec

        self.fs: fsspec.AbstractFileSystem
        self.fs, self.root = fsspec.core.url_to_fs(root, **dict(storage_options or {}))
        self.root = self.root.rstrip("/") or "/"
        self.url = root
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        self._atomic_rename = bool(_LOCAL_PROTOCOLS & set(protocols))
        self.fs.makedirs(self.root, exist_ok=True)

    def __repr__(self) -> str:
        return f"FsspecStore(root={self.url!r})"

    # paths and raw I/O

    def _run_dir(self, run_id: str) -> str:
        return posixpath.join(self.root, encode_run_id(run_id))

    def _write(self, path: str, text: str) -> None:
        """Write ``text`` to ``path`` so that a reader sees all of it or nothing."""
        data = text.encode("utf-8")
        if self._atomic_rename:  # local disks: write aside, then rename (atomic on POSIX)
            staging = posixpath.join(posixpath.dirname(posixpath.dirname(path)), STAGING)
            self.fs.makedirs(staging, exist_ok=True)
            tmp = posixpath.join(staging, uuid.uuid4().hex)
            self.fs.pipe_file(tmp, data)
            self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
            self.fs.mv(tmp, path)
        else:  # object stores and memory: one put is atomic
            self.fs.pipe_file(path, data)

    def _list(self, directory: str) -> list[str]:
        """Entry paths under ``directory`` in name order; [] when it does not exist."""
        try:
            entries = self.fs.ls(directory, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        return sorted(p for p in entries if not posixpath.basename(p).startswith("."))

    def _read_json_entries(self, run_id: str, category: str) -> list[Mapping[str, Any]]:
        paths = self._list(posixpath.join(self._run_dir(run_id), category))
        return [json.loads(self.fs.cat_file(path)) for path in paths]

    def _append(self, run_id: str, category: str, content: Mapping[str, Any]) -> None:
        path = posixpath.join(self._run_dir(run_id), category, entry_name())
        self._write(path, json.dumps(content, default=str))

    # TrackerBase

    def add_metadata(self, run_id: str, **kwargs: object) -> None:
        self._append(run_id, METADATA, {"metadata": kwargs})

    def metadata(self, run_id: str) -> Mapping[str, object]:
        merged: dict[str, object] = {}
        for entry in self._read_json_entries(run_id, METADATA):
            merged.update(entry["metadata"])
        return merged

    def add_artifact(
        self, run_id: str, name: str, path: str, metadata: Mapping[str, object] | None = None
    ) -> None:
        self._append(run_id, ARTIFACTS, {"name": name, "path": path, "metadata": metadata})

    def artifacts(self, run_id: str) -> Mapping[str, TrackerArtifact]:
        found: dict[str, TrackerArtifact] = {}
        for entry in self._read_json_entries(run_id, ARTIFACTS):
            found[str(entry["name"])] = TrackerArtifact(
                str(entry["name"]), str(entry["path"]), entry.get("metadata")
            )
        return found

    def _edge_file(self, run_id: str, category: str, other_run_id: str) -> str:
        return posixpath.join(self._run_dir(run_id), category, encode_run_id(other_run_id))

    def _merge_edge(self, path: str, artifact_name: str | None) -> None:
        try:
            names = _decode_names(self.fs.cat_file(path).decode("utf-8"))
        except FileNotFoundError:
            names = ()
        if artifact_name in names:
            return  # the same edge twice is one edge
        # an edge first recorded with no name keeps "no name" alongside the new one
        self._write(path, _encode_names((*names, artifact_name)))

    def add_source(self, run_id: str, source_id: str, artifact_name: str | None = None) -> None:
        artifact_name = artifact_name or None
        self._merge_edge(self._edge_file(run_id, SOURCES, source_id), artifact_name)
        self._merge_edge(self._edge_file(source_id, DESCENDANTS, run_id), artifact_name)

    def _edges(self, run_id: str, category: str) -> dict[str, tuple[str | None, ...]]:
        edges: dict[str, tuple[str | None, ...]] = {}
        for path in self._list(posixpath.join(self._run_dir(run_id), category)):
            other = decode_run_id(posixpath.basename(path))
            if other is not None:
                edges[other] = _decode_names(self.fs.cat_file(path).decode("utf-8"))
        return edges

    def _parents(self, run_id: str) -> dict[str, tuple[str | None, ...]]:
        return self._edges(run_id, SOURCES)

    def _children(self, run_id: str) -> dict[str, tuple[str | None, ...]]:
        return self._edges(run_id, DESCENDANTS)

    def reindex(self) -> int:
        """Write the descendants index from every run's sources; returns the edges written.

        Needed once for stores written by TorchX's own FsspecTracker, whose stable release does
        not write the reverse edge. Idempotent.
        """
        written = 0
        for run_id in self.run_ids():
            for source_id, names in self._edges(run_id, SOURCES).items():
                for name in names:
                    self._merge_edge(self._edge_file(source_id, DESCENDANTS, run_id), name)
                    written += 1
        return written

    def run_ids(self, **kwargs: str) -> Iterable[str]:
        parent_run_id = kwargs.pop("parent_run_id", None)
        if kwargs:
            raise ValueError(
                f"Unknown run_ids filter(s) {sorted(kwargs)}; the fsspec store filters by parent_run_id only."
            )
        if parent_run_id:
            return sorted(self._edges(parent_run_id, DESCENDANTS))
        run_ids = (decode_run_id(posixpath.basename(p)) for p in self._list(self.root))
        return sorted(r for r in run_ids if r is not None)


def create(config: str | None) -> FsspecStore:
    """``torchx.tracker`` entry point: inline JSON ``{"root": <url>, "storage_options": {...}}``."""
    parsed = parse_config("fsspec", config, ("root",), ("storage_options",))
    options = parsed.get("storage_options") or {}
    if not isinstance(options, Mapping):
        from torchx_airflow_tracker.config import TrackerConfigError

        raise TrackerConfigError(f"'storage_options' must be a JSON object, got {options!r}.")
    return FsspecStore(str(parsed["root"]), options)
