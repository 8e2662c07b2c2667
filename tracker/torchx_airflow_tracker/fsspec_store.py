"""An fsspec tracker store: any fsspec URL (local path, ``file://``, ``s3://``, ``memory://``, ...).

Runs are kept in TorchX's ``FsspecTracker`` layout, so stores written by either read through the other::

    <root>/<b32(run_id)>/metadata/<entry>            {"metadata": {...}}
    <root>/<b32(run_id)>/artifacts/<entry>           {"name": ..., "path": ..., "metadata": ...}
    <root>/<b32(run_id)>/sources/<b32(parent)>       one artifact name per line ("" for none)

plus an index that answers "which runs have X as a source" without reading every run::

    <root>/<b32(INDEX_ID)>/descendants/<b32(parent)>/<b32(run_id)>   empty: run_id has parent as a source
    <root>/<b32(INDEX_ID)>/indexed/<b32(run_id)>                     empty: run_id's sources are indexed
    <root>/<b32(INDEX_ID)>/.staging/                                 local disks: files before their rename

What this store adds: entry names unique across processes and hosts (``<time_ns>-<uuid>``) that
sort in write order, so the later write wins deterministically; readers never return a partial
entry (an entry is written once under its unique name and skipped until it parses; edge files,
which change, are replaced atomically); idempotent edges with several artifact names; ``lineage()``; and
``run_ids(parent_run_id=...)`` / ``descendants()`` answered from the index. A source gets no run
directory of its own (an external dataset id never shows up in ``run_ids()``).

Runs written by TorchX's own ``FsspecTracker`` (which keeps no usable reverse index) are indexed on
the first query that meets them: every query lists the root once, and a run directory missing
from ``indexed/`` has its sources read and indexed. Reverse edges a previous version kept under
``<root>/<b32(parent)>/descendants/`` are still read.
"""

from __future__ import annotations

import functools
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
from torchx_airflow_tracker.lineage import (
    DEFAULT_DEPTH,
    EdgeQueries,
    RunLineage,
    artifact_names_key,
    build_lineage,
)
from torchx_airflow_tracker.store_files import StoreFiles

if TYPE_CHECKING:
    import fsspec

METADATA, ARTIFACTS, SOURCES, DESCENDANTS = "metadata", "artifacts", "sources", "descendants"
INDEXED, STAGING = "indexed", ".staging"
# The index lives in a directory named like a run, so TorchX's reader (which decodes every directory
# under the root as a run id) still works on this store; it lists this one id in run_ids().
INDEX_ID = "torchx-airflow-tracker://index"


@functools.lru_cache(maxsize=4096)  # every write names its run (and a source) several times
def encode_run_id(run_id: str) -> str:
    """A run id as a case-aware, POSIX-safe directory name (TorchX's encoding)."""
    return b32encode(run_id.encode("utf-8")).decode("ascii")


def decode_run_id(name: str) -> str | None:
    """The run id a directory name encodes, or None if the name is not one (e.g. ``.staging``)."""
    try:
        return b32decode(name).decode("utf-8")
    except (B32Error, UnicodeDecodeError, ValueError):
        return None


INDEX_DIR_NAME = encode_run_id(INDEX_ID)


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
        self._index = posixpath.join(self.root, INDEX_DIR_NAME)
        self.files = StoreFiles(self.fs, staging_dir=posixpath.join(self._index, STAGING))
        self.files.makedirs(self.root)
        self._indexed: set[str] = set()  # run dir names known to be indexed (they stay so)

    def __repr__(self) -> str:
        from torchx_airflow_tracker.config import without_userinfo

        return f"FsspecStore(root={without_userinfo(self.url)!r})"  # sftp://user:pw@host roots

    # paths and entries

    def _run_dir(self, run_id: str) -> str:
        return posixpath.join(self.root, encode_run_id(run_id))

    def _read_json_entries(self, run_id: str, category: str) -> list[Mapping[str, Any]]:
        directory = posixpath.join(self._run_dir(run_id), category)
        entries = []
        for name in self.files.names(directory):
            text = self.files.read_text(posixpath.join(directory, name))
            if text is None:  # removed since listed
                continue
            try:
                entries.append(json.loads(text))
            except json.JSONDecodeError:
                continue  # an entry still being written: not there yet (no prefix of one is JSON)
        return entries

    def _append(self, run_id: str, category: str, content: Mapping[str, Any]) -> None:
        # entries are written once under a unique name, so no rename is needed: readers skip an
        # entry until it is whole
        path = posixpath.join(self._run_dir(run_id), category, entry_name())
        self.files.create(path, json.dumps(content, default=str))

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

    # edges

    def _source_file(self, run_id: str, source_id: str) -> str:
        return posixpath.join(self._run_dir(run_id), SOURCES, encode_run_id(source_id))

    def _descendant_dirs(self, run_id: str) -> tuple[str, str]:
        """Where reverse edges of ``run_id`` are: the index, and the run's own dir (older stores)."""
        return (
            posixpath.join(self._index, DESCENDANTS, encode_run_id(run_id)),
            posixpath.join(self._run_dir(run_id), DESCENDANTS),
        )

    def _merge_edge(self, path: str, names: Iterable[str | None]) -> None:
        """Add artifact ``names`` to the edge file at ``path`` (nothing written if all are there)."""
        text = self.files.read_text(path)
        known = _decode_names(text) if text is not None else ()
        merged = artifact_names_key((*known, *names))
        if text is not None and merged == known:
            return  # the same edge twice is one edge
        # an edge first recorded with no name keeps "no name" alongside the new one
        self.files.write(path, _encode_names(merged))

    def add_source(self, run_id: str, source_id: str, artifact_name: str | None = None) -> None:
        self._merge_edge(self._source_file(run_id, source_id), (artifact_name or None,))
        # The reverse edge is an empty marker in the index (the names stay in the forward edge, the
        # one place they change). It is not kept under the source: a source may be a dataset that
        # never tracked anything, and must not become a run.
        self.files.create_empty(self._reverse_edge(source_id, run_id))

    def _reverse_edge(self, source_id: str, run_id: str) -> str:
        return posixpath.join(self._descendant_dirs(source_id)[0], encode_run_id(run_id))

    def _edges_in(self, directory: str) -> dict[str, tuple[str | None, ...]]:
        edges: dict[str, tuple[str | None, ...]] = {}
        for name in self.files.names(directory):
            other = decode_run_id(name)
            text = self.files.read_text(posixpath.join(directory, name))
            if other is not None and text is not None:
                edges[other] = _decode_names(text)
        return edges

    def _parents(self, run_id: str) -> dict[str, tuple[str | None, ...]]:
        return self._edges_in(posixpath.join(self._run_dir(run_id), SOURCES))

    def _indexed_children(self, run_id: str) -> dict[str, tuple[str | None, ...]]:
        index_dir, legacy_dir = self._descendant_dirs(run_id)
        children = self._edges_in(legacy_dir)  # reverse edges that carry their names
        for name in self.files.names(index_dir):
            child = decode_run_id(name)
            text = None if child is None else self.files.read_text(self._source_file(child, run_id))
            if child is not None and text is not None:
                children[child] = artifact_names_key((*children.get(child, ()), *_decode_names(text)))
        return children

    def _children(self, run_id: str) -> dict[str, tuple[str | None, ...]]:
        self.ensure_indexed()
        return self._indexed_children(run_id)

    def lineage(self, run_id: str, depth: int = DEFAULT_DEPTH) -> RunLineage:
        self.ensure_indexed()  # once for the whole walk
        return build_lineage(run_id, self._parents, self._indexed_children, depth)

    # the index

    def _run_dir_names(self) -> list[str]:
        return [
            n for n in self.files.names(self.root) if n != INDEX_DIR_NAME and decode_run_id(n) is not None
        ]

    def _index_run(self, dir_name: str) -> int:
        """Index the sources of one run directory; returns the reverse edges it lacked."""
        sources_dir = posixpath.join(self.root, dir_name, SOURCES)
        written = 0
        for name in self.files.names(sources_dir):
            source_id = decode_run_id(name)
            if source_id is not None:
                written += self.files.create_empty(posixpath.join(self._index, DESCENDANTS, name, dir_name))
        self.files.create_empty(posixpath.join(self._index, INDEXED, dir_name))
        self._indexed.add(dir_name)
        return written

    def ensure_indexed(self) -> int:
        """Index runs that are not yet (written by TorchX's own tracker); returns the edges written.

        Costs one listing of the root when the index is current (and one of ``indexed/`` the first
        time a store object sees a run).
        """
        # names only: decoding 10,000 run ids (pure-Python base32) would cost more than the listing
        unknown = [n for n in self.files.names(self.root) if n not in self._indexed and n != INDEX_DIR_NAME]
        if not unknown:
            return 0
        self._indexed.update(self.files.names(posixpath.join(self._index, INDEXED)))
        todo = [n for n in unknown if n not in self._indexed and decode_run_id(n) is not None]
        return sum(self._index_run(n) for n in todo)

    def reindex(self) -> int:
        """Read every run's sources again and index them; returns the reverse edges written.

        Queries index new runs by themselves; this is for a source that TorchX's own tracker added
        to a run this store had already indexed. Idempotent.
        """
        return sum(self._index_run(n) for n in self._run_dir_names())

    def run_ids(self, **kwargs: str) -> Iterable[str]:
        parent_run_id = kwargs.pop("parent_run_id", None)
        if kwargs:
            raise ValueError(
                f"Unknown run_ids filter(s) {sorted(kwargs)}; the fsspec store filters by parent_run_id only."
            )
        if parent_run_id:
            self.ensure_indexed()
            names = {n for d in self._descendant_dirs(parent_run_id) for n in self.files.names(d)}
        else:
            names = set(self._run_dir_names())
        return sorted(r for r in map(decode_run_id, names) if r is not None)


def create(config: str | None) -> FsspecStore:
    """``torchx.tracker`` entry point: inline JSON ``{"root": <url>, "storage_options": {...}}``."""
    parsed = parse_config("fsspec", config, ("root",), ("storage_options",))
    options = parsed.get("storage_options") or {}
    if not isinstance(options, Mapping):
        from torchx_airflow_tracker.config import TrackerConfigError

        raise TrackerConfigError(f"'storage_options' must be a JSON object, got {options!r}.")
    return FsspecStore(str(parsed["root"]), options)
