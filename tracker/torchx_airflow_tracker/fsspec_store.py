"""An fsspec tracker store: any fsspec URL (local path, ``file://``, ``s3://``, ``memory://``, ...).

Runs are kept in TorchX's ``FsspecTracker`` layout, so stores written by either read through the
other (TorchX 0.7's reader and TorchX main's list exactly the runs this store lists)::

    <root>/<b32(run_id)>/metadata/<entry>            {"metadata": {...}}
    <root>/<b32(run_id)>/artifacts/<entry>           {"name": ..., "path": ..., "metadata": ...}
    <root>/<b32(run_id)>/sources/<b32(parent)>       one artifact name per line ("" for none)

plus what TorchX's reader never looks at (see ``store_layout``)::

    <root>/<b32(run_id)>/edges/<parent>.<name>       object stores: one file per (source, artifact
                                                     name), never rewritten (local disks append each
                                                     name to sources/ in one O_APPEND write instead)
    <root>/<b32(run_id)>/.staging/                   local disks: files before their rename
    <root>/<b32(run_id)>/id                          the run id, when it is too long for a name
    <root>/.d.<parent>.<run_id>.<name>               reverse edge: run_id has parent as a source
    <root>/.e.<parent>.<run_id>.<name>               the same, for the first edge of a run this store
                                                     made: it stands for the run's .i. marker too
                                                     (local disks: a hard link to its sources/ file)
    <root>/.i.<b32(run_id)>                          every source of run_id has its reverse edge
    <root>/.c.<key>                                  a cache record (``cache_records``)

A source gets no directory of its own, so an external dataset id never shows up in ``run_ids()``.
Every edge name is its own file, created once, so ranks adding names to the same edge at once
lose none; the reverse edge is written first, so a writer that dies half-way never hides a
descendant. Entry names are unique across processes and hosts (``<time_ns>-<uuid>``) and sort in
write order, so the later write wins deterministically; a reader skips an entry until it is whole,
and skips (with a warning) one that is whole but not an entry.

Readers never write: a run without its ``.i.`` marker (written by TorchX's own tracker, or by the
previous version of this store) is read from its own directory on each query; ``reindex()`` (a
writer) records the markers for good.
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
import uuid
from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from torchx.tracker.api import TrackerArtifact, TrackerBase

from torchx_airflow_tracker.cache_records import FsspecCacheRecords
from torchx_airflow_tracker.config import TrackerConfigError, parse_config
from torchx_airflow_tracker.read_limits import ReadLimits
from torchx_airflow_tracker.root_listing import LocalListingCache, RootListing
from torchx_airflow_tracker.run_graph import (
    DEFAULT_DEPTH,
    EdgeGraph,
    EdgeQueries,
    RunLineage,
    artifact_names_key,
    build_lineage,
)
from torchx_airflow_tracker.store_files import FileTooLargeError, StoreFiles
from torchx_airflow_tracker.store_layout import (
    ARTIFACTS,
    DESCENDANTS,
    EDGES,
    ID_FILE,
    INDEXED_PREFIX,
    LEGACY_INDEX_ID,
    LONG_ID_PREFIX,
    METADATA,
    SOURCES,
    STAGING,
    Edge,
    decode_key,
    decode_name,
    edge_from_content,
    edge_from_keys,
    key,
    named_by_digest,
    parse_reverse_marker,
    run_dir_name,
)

if TYPE_CHECKING:
    import fsspec

log = logging.getLogger(__name__)

Names = tuple[str | None, ...]


def entry_name() -> str:
    """A file name unique across processes and hosts that sorts in write-time order."""
    return f"{time.time_ns()}-{uuid.uuid4().hex}"


def _decode_names(text: str) -> Names:
    lines = [line.strip() for line in text.splitlines()]
    return artifact_names_key(line or None for line in lines) if lines else (None,)


class _Graph(EdgeGraph):
    """Every edge of a store, both ways, from one listing of its root.

    ``unread``: the entries a bounded read left unread (``graph(max_reads=...)``): unindexed run
    directories and markers named by digest past the bound, whose edges the graph lacks.
    """

    def __init__(self, max_reads: int | None = None) -> None:
        super().__init__()
        self._reads_left = max_reads

    def add_edge(self, edge: Edge) -> None:
        self.add(edge.source_id, edge.run_id, edge.artifact_name)

    def may_read(self) -> bool:
        """Whether one more read fits the bound (counted as unread when it does not)."""
        if self._reads_left is None:
            return True
        if self._reads_left <= 0:
            self.unread += 1
            return False
        self._reads_left -= 1
        return True


class FsspecStore(EdgeQueries, TrackerBase):
    """TorchX tracker backend on an fsspec filesystem.

    :param root: a path or URL; writers create it, readers only read it.
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
        self.files = StoreFiles(self.fs, self.root)
        self._touched: set[str] = set()  # run dirs this object has indexed (their .i. marker exists)
        self._edges_written: set[Edge] = set()
        self._scanned: dict[str, list[Edge]] = {}  # unindexed run dirs read once by this object
        self._listing_cache = LocalListingCache(self.root) if self.files.local else None
        self._entry_texts: dict[str, tuple[Hashable, str]] = {}  # object stores: {path: (version, text)}
        #: readers of what any job wrote bound their reads (``ReadLimits.for_readers()``)
        self.limits = ReadLimits()
        #: run id -> what of it the limits left unread
        self.oversized: dict[str, set[str]] = {}

    def create_root(self) -> None:
        """Writer: make the root exist (readers never create it); raises when it cannot be created."""
        self.fs.makedirs(self.root, exist_ok=True)

    def check_metadata(self, **kwargs: object) -> None:
        """An fsspec store takes any metadata JSON can hold: nothing to refuse before writing."""

    def check_artifact(self, name: str, path: str, metadata: Mapping[str, object] | None = None) -> None:
        """An fsspec store takes any artifact: nothing to refuse before writing."""

    def make_ready(self) -> None:
        """Before a job writes: the root exists (``create_root``)."""
        self.create_root()

    def filesystem(self) -> tuple[Any, str]:
        """``(fsspec filesystem, root)``: where the store keeps its entries."""
        return self.fs, self.root

    def run_url(self, run_id: str) -> None:
        """A store of files has no UI page of its own."""
        return None

    def __repr__(self) -> str:
        from torchx_airflow_tracker.config import without_userinfo

        return f"FsspecStore(root={without_userinfo(self.url)!r})"  # sftp://user:pw@host roots

    def alias(self, run_id: str) -> str:
        """The id TorchX's own reader lists for ``run_id``: itself, or for an id over 155 bytes (too
        long for a directory's base32 name) the name of its digest, which opens the same run in
        TorchX's reader and in this store."""
        return decode_name(run_dir_name(run_id)) or run_id

    # paths and entries

    def _run_dir(self, run_id: str) -> str:
        return posixpath.join(self.root, run_dir_name(run_id))

    def _read_json_entries(self, run_id: str, category: str) -> list[tuple[str, Any]]:
        """The entries of a run's category, parsed; on object stores each version of an entry is
        fetched once per store object (entries are written once: a query then costs one listing)."""
        directory = posixpath.join(self._run_dir(run_id), category)
        entries = []
        self.limits.start(run_id)
        listed = self.limits.entries(self.files.versioned_names(directory), category, run_id, self.oversized)
        for name, version in listed:
            path = posixpath.join(directory, name)
            known = self._entry_texts.get(path)
            text = known[1] if known is not None and version is not None and known[0] == version else None
            if text is None:
                text = self._read_bounded(run_id, path)
            if text is None:  # removed since listed, or over a bound
                continue
            try:
                entries.append((path, json.loads(text)))
            except json.JSONDecodeError:
                continue  # an entry still being written: not there yet (no prefix of one is JSON)
            if version is not None:
                self._entry_texts[path] = (version, text)
        return entries

    def _read_bounded(self, run_id: str, path: str) -> str | None:
        """The text of one of ``run_id``'s files within the limits (charged to them); None when it is
        missing, refused, or over a bound (then named in ``oversized``)."""
        room = self.limits.room(run_id)
        try:
            if room == 0:
                raise FileTooLargeError(path, 0)
            text = self.files.read_text(path, room)
        except FileTooLargeError:
            why = self.limits.why(run_id, room or 0)
            log.warning("Skipping %s: %s", path, why)
            self.oversized.setdefault(run_id, set()).add(f"{path}: {why}")
            return None
        if text is not None:  # its bytes, as the bound counted them (a character may be four)
            self.limits.charge(run_id, len(text.encode("utf-8")))
        return text

    def _append(self, run_id: str, category: str, content: Mapping[str, Any]) -> None:
        # entries are written once under a unique name, so no rename is needed: readers skip an
        # entry until it is whole
        run_dir = self._touch(run_id)
        self.files.create(posixpath.join(run_dir, category, entry_name()), json.dumps(content, default=str))

    def _touch(self, run_id: str) -> str:
        """The run's directory, once per run and object made ready for writes: its long id kept,
        its earlier sources (a run TorchX's tracker started) indexed, its ``.i.`` marker set."""
        return self._prepare(run_id)[0]

    def _prepare(self, run_id: str, first_edge: Edge | None = None) -> tuple[str, bool]:
        """``_touch``; True when the run is new and ``first_edge`` is to index it (see ``add_source``).

        On local disks the run's directory is made first: a run whose directory this call made has
        no earlier sources to index, so there is no marker or edge of it to read (most writes of a
        job go to a run new to the store), and its ``.i.`` marker is written at once, unless its
        first edge, about to be added, is to stand for it. A run someone else made is left as it is:
        a writer never reads another writer's edge files (whoever made the run indexed it, or readers
        read it from its own directory until ``reindex()`` does).
        """
        run_dir = self._run_dir(run_id)
        dir_name = posixpath.basename(run_dir)
        if dir_name in self._touched:
            return run_dir, False
        made = self.files.local and self.files.make_dir(run_dir)
        if LONG_ID_PREFIX in (decode_name(dir_name) or ""):
            self.files.create_once(posixpath.join(run_dir, ID_FILE), run_id)
        if made and first_edge is not None and first_edge.named_in_full():
            return run_dir, True  # marked touched once the first-edge marker is there
        if made:
            self.files.create_once(posixpath.join(self.root, INDEXED_PREFIX + dir_name))
        self._touched.add(dir_name)
        return run_dir, False

    def _index_run(self, dir_name: str, run_id: str, force: bool = False) -> int:
        """Write the reverse markers of a run's sources, then its ``.i.`` marker; the markers written."""
        marker = posixpath.join(self.root, INDEXED_PREFIX + dir_name)
        if not force and self.files.read_small(marker) is not None:
            return 0
        written = sum(self._write_reverse(edge) for edge in self._forward_edges(run_id, dir_name))
        self.files.create_once(marker)
        return written

    def _write_reverse(self, edge: Edge) -> int:
        marker = posixpath.join(self.root, edge.reverse_marker())
        # readers read the content only where a key in the name is a digest: an empty file otherwise
        return int(self.files.create_once(marker, "" if edge.named_in_full() else edge.content()))

    # TrackerBase

    def add_metadata(self, run_id: str, **kwargs: object) -> None:
        self._append(run_id, METADATA, {"metadata": kwargs})

    def log_metrics(
        self,
        run_id: str,
        metrics: Mapping[str, float],
        step: int,
        entry: Mapping[str, Any],
        entry_name: str,
        key: str,
    ) -> None:
        """A metrics writer's entry (``torchx_airflow_tracker.metrics``), replacing its last one.

        The entry is ordinary metadata (key ``torchx_metrics``, or ``torchx_metrics.rank<N>`` when
        every rank writes) under one name per writer, so TorchX's readers see it and a run keeps one
        file per writer however many steps it logs.
        """
        run_dir = self._touch(run_id)
        self.files.write(
            posixpath.join(run_dir, METADATA, entry_name),
            json.dumps({"metadata": {key: entry}}),
            posixpath.join(run_dir, STAGING),
        )

    def metadata(self, run_id: str) -> Mapping[str, object]:
        merged: dict[str, object] = {}
        for path, entry in self._read_json_entries(run_id, METADATA):
            if not isinstance(entry, dict) or not isinstance(entry.get("metadata"), dict):
                log.warning('Skipping %s: not a metadata entry ({"metadata": {...}}): %.200s', path, entry)
                continue
            merged.update(entry["metadata"])
        return merged

    def add_artifact(
        self, run_id: str, name: str, path: str, metadata: Mapping[str, object] | None = None
    ) -> None:
        self._append(run_id, ARTIFACTS, {"name": name, "path": path, "metadata": metadata})

    def artifacts(self, run_id: str) -> Mapping[str, TrackerArtifact]:
        found: dict[str, TrackerArtifact] = {}
        for path, entry in self._read_json_entries(run_id, ARTIFACTS):
            if not isinstance(entry, dict) or "name" not in entry or "path" not in entry:
                log.warning('Skipping %s: not an artifact entry ({"name", "path"}): %.200s', path, entry)
                continue
            metadata = entry.get("metadata")
            found[str(entry["name"])] = TrackerArtifact(
                str(entry["name"]), str(entry["path"]), metadata if isinstance(metadata, dict) else None
            )
        return found

    # edges

    def add_source(self, run_id: str, source_id: str, artifact_name: str | None = None) -> None:
        edge = Edge(source_id, run_id, artifact_name or None)
        if edge in self._edges_written:
            return  # the same edge twice is one edge
        run_dir, first = self._prepare(run_id, first_edge=edge)
        if first:
            self._add_first_edge(run_dir, edge)
        else:
            # reverse first: a writer dying before the forward edge leaves a descendant, never loses one
            self._write_reverse(edge)
            # local disks keep every name in sources/ (one O_APPEND write each), and the source's id
            # in that file's name unless it is too long for one
            if not self.files.local or named_by_digest(source_id):
                self.files.create_once(posixpath.join(run_dir, EDGES, edge.forward_marker()), edge.content())
            self._add_to_torchx_edge(run_dir, source_id, edge.artifact_name)
        self._edges_written.add(edge)

    def _add_first_edge(self, run_dir: str, edge: Edge) -> None:
        """The first edge of a run this call made (local disks): the ``sources/`` line, then the
        first-edge marker as a hard link to that file (a link makes no new file: the marker's name
        holds the whole edge, and its content is never read). Until the marker is there the run
        is not indexed, so readers read its ``sources/``: the edge is never out of sight."""
        path = self._add_to_torchx_edge(run_dir, edge.source_id, edge.artifact_name, new_run=True)
        self.files.link_once(path, posixpath.join(self.root, edge.reverse_marker(first=True)))
        self._touched.add(posixpath.basename(run_dir))

    def _add_to_torchx_edge(
        self, run_dir: str, source_id: str, artifact_name: str | None, new_run: bool = False
    ) -> str:
        """The edge in TorchX's form (``sources/<b32(parent)>``), for TorchX's reader; the file's path.

        ``new_run``: this call made the run's directory, so it has no sources yet to read (a rank
        racing in between may add a duplicate line, which readers take as one name).
        """
        path = posixpath.join(run_dir, SOURCES, run_dir_name(source_id))
        text = None if new_run else self.files.read_small(path)
        known = _decode_names(text) if text is not None else ()
        if artifact_name in known:
            return path
        if self.files.local:  # one O_APPEND write: concurrent writers keep every line
            self.files.append_line(path, artifact_name or "", new_dir=new_run)
        else:  # names lost here in a race stay in edges/, which this store reads
            names = artifact_names_key((*known, artifact_name))
            self.files.write(path, "".join(f"{n or ''}\n" for n in names), posixpath.join(run_dir, STAGING))
        return path

    def _forward_edges(self, run_id: str, dir_name: str | None = None) -> list[Edge]:
        """A run's edges to its sources, read from its own directory (this store's and TorchX's)."""
        run_dir = posixpath.join(self.root, dir_name or run_dir_name(run_id))
        edges: list[Edge] = []
        self.limits.start(run_id)
        listed = self.limits.entries(
            self.files.names(posixpath.join(run_dir, EDGES)), EDGES, run_id, self.oversized
        )
        for name in listed:
            source_key, _, name_key = name.partition(".")
            edge = None
            known, source_id = decode_key(source_key)
            known_name, artifact_name = decode_key(name_key)
            if known and known_name and source_id is not None:
                edge = Edge(source_id, run_id, artifact_name)
            else:
                edge = edge_from_content(self._read_bounded(run_id, posixpath.join(run_dir, EDGES, name)))
            if edge is not None:
                edges.append(Edge(edge.source_id, run_id, edge.artifact_name))
        # TorchX's form of the edges: TorchX's tracker may have written some, or added names
        long_ids = {run_dir_name(e.source_id): e.source_id for e in edges}
        listed = self.limits.entries(
            self.files.names(posixpath.join(run_dir, SOURCES)), SOURCES, run_id, self.oversized
        )
        for name in listed:
            source_id = long_ids.get(name) or decode_name(name)
            text = self._read_bounded(run_id, posixpath.join(run_dir, SOURCES, name))
            if source_id is not None and text is not None:
                edges += [Edge(source_id, run_id, n) for n in _decode_names(text)]
        return edges

    def _legacy_children(self, run_id: str, dir_name: str) -> list[Edge]:
        """Reverse edges an earlier layout (and TorchX main) kept under ``<b32(parent)>/descendants/``."""
        directory = posixpath.join(self.root, dir_name, DESCENDANTS)
        edges = []
        for name in self.limits.entries(self.files.names(directory), DESCENDANTS, run_id, self.oversized):
            child, text = decode_name(name), self._read_bounded(run_id, posixpath.join(directory, name))
            if child is not None and text is not None:
                edges += [Edge(run_id, child, n) for n in _decode_names(text)]
        return edges

    def _parents(self, run_id: str) -> dict[str, Names]:
        graph = _Graph()
        for edge in self._forward_edges(run_id):
            graph.add_edge(edge)
        return graph.parents_of(run_id)

    def _children(self, run_id: str) -> dict[str, Names]:
        return self.graph().children_of(run_id)

    def lineage(self, run_id: str, depth: int = DEFAULT_DEPTH) -> RunLineage:
        graph = self.graph()  # one listing of the root for the whole walk
        return build_lineage(run_id, graph.parents_of, graph.children_of, depth)

    # the graph and the index

    def _root_names(self) -> list[str]:
        return self.files.names(self.root, hidden=True)

    @staticmethod
    def _names_a_run(name: str) -> str | None:
        """What a root entry's name decodes to when it may be a run directory (no read), else None."""
        decoded = None if name.startswith(".") else decode_name(name)
        return None if decoded is None or decoded == LEGACY_INDEX_ID else decoded

    def _run_id(self, name: str) -> str | None:
        """The run id of a root entry that may be a run directory (a long id's is read from it)."""
        decoded = self._names_a_run(name)
        if decoded is not None and decoded.startswith(LONG_ID_PREFIX):
            decoded = self.files.read_small(posixpath.join(self.root, name, ID_FILE)) or decoded
        return decoded

    def _run_dirs(self, names: Iterable[str]) -> dict[str, str]:
        """{directory name: run id} of the run directories among a root listing."""
        return {name: run_id for name in names if (run_id := self._run_id(name)) is not None}

    def _listing(self) -> RootListing:
        """The root's listing: the last one while a local root is unchanged, else a new one."""
        stamp = self._listing_cache.stamp() if self._listing_cache is not None else None
        listing = self._listing_cache.get(stamp) if self._listing_cache is not None else None
        if listing is None:
            listing = RootListing(self._root_names())
            if self._listing_cache is not None:
                self._listing_cache.keep(stamp, listing)
        return listing

    def graph(self, source_id: str | None = None, max_reads: int | None = None) -> _Graph:
        """Every edge of the store (``source_id``: only the edges from it): the reverse markers, and
        the runs that have none yet read in full. One listing of the root either way (none while a
        local root is unchanged); with ``source_id`` only the markers named after it are read.

        ``max_reads``: read at most this many entries beyond the listing (an unindexed run directory:
        up to three listings and its id; a marker named by digest: its content), so a root that
        anyone filled with junk costs a bounded read; the graph counts the rest as ``unread``.
        """
        listing = self._listing()
        graph = _Graph(max_reads)
        for name in listing.markers(None if source_id is None else key(source_id)):
            keys = parse_reverse_marker(name)
            if keys is None:
                continue
            edge = edge_from_keys(*keys)
            if edge is None and graph.may_read():
                edge = edge_from_content(self.files.read_small(posixpath.join(self.root, name)))
            if edge is not None:
                graph.add_edge(edge)
        for dir_name in listing.unindexed():
            if dir_name not in self._scanned:
                if self._names_a_run(dir_name) is None or not graph.may_read():
                    continue
                run_id = self._run_id(dir_name)
                self._scanned[dir_name] = (
                    self._forward_edges(run_id, dir_name) + self._legacy_children(run_id, dir_name)
                    if run_id is not None
                    else []
                )
            for edge in self._scanned[dir_name]:
                if source_id is None or edge.source_id == source_id:
                    graph.add_edge(edge)
        return graph

    def ensure_indexed(self) -> int:
        """Writer: index the runs that have no ``.i.`` marker yet; returns the reverse markers written."""
        todo = self._run_dirs(RootListing(self._root_names()).unindexed())
        return sum(self._index_run(d, r, force=True) for d, r in todo.items())

    def reindex(self) -> int:
        """Writer: read every run's sources again and index them; returns the reverse markers written.

        For sources TorchX's own tracker added to a run this store had already indexed. Also removes
        the index directory the previous version kept among the runs. Idempotent.
        """
        names = self._root_names()
        written = sum(self._index_run(d, r, force=True) for d, r in self._run_dirs(names).items())
        legacy = run_dir_name(LEGACY_INDEX_ID)
        if legacy in names:
            self.files.remove_tree(posixpath.join(self.root, legacy))
        return written

    @property
    def cache_records(self) -> FsspecCacheRecords:
        """The provider's cache records, in ``<root>/.c.<key>`` files (``cache_records`` module)."""
        return FsspecCacheRecords(self)

    def run_ids(self, **kwargs: str) -> Iterable[str]:
        parent_run_id = kwargs.pop("parent_run_id", None)
        if kwargs:
            raise ValueError(
                f"Unknown run_ids filter(s) {sorted(kwargs)}; the fsspec store filters by parent_run_id only."
            )
        if parent_run_id:
            return sorted(self.graph(parent_run_id).children_of(parent_run_id))
        listing = self._listing()
        if listing.runs is None:
            listing.runs = self._run_dirs(listing.directories())
        return sorted(listing.runs.values())


def create(config: str | None) -> FsspecStore:
    """``torchx.tracker`` entry point: inline JSON ``{"root": <url>, "storage_options": {...}}`` (or
    ``base64:`` of it), or the path of a TorchX ``FsspecTracker`` config file (``protocol=``,
    ``root_path=``, other keys as storage options), so ``[tracker:fsspec] config=path`` carries over."""
    from torchx_airflow_tracker.config import is_config_file, read_torchx_fsspec_config

    if is_config_file(config):
        root, options = read_torchx_fsspec_config(str(config))
        return FsspecStore(root, options)
    parsed = parse_config("fsspec", config, ("root",), ("storage_options",))
    options = parsed.get("storage_options") or {}
    if not isinstance(options, Mapping):
        raise TrackerConfigError(f"'storage_options' must be a JSON object, got {options!r}.")
    return FsspecStore(str(parsed["root"]), options)
