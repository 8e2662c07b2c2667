"""File and directory names of the fsspec store, and the edge markers that index it.

Every directory directly under the root is a run directory named like TorchX's ``FsspecTracker``
names it (base32 of the run id), because TorchX's reader decodes each one as a run id. What this
store adds (the reverse edges and which runs they cover) is kept in *files* directly under the
root, whose names start with a dot: TorchX's reader lists only directories there, and one listing
of the root gives a reader the whole edge graph.

Names stay under the 255 bytes local and NFS filesystems allow, whatever the ids' length: a run id
whose base32 would pass ``MAX_DIR_NAME`` gets a directory named for its digest (the id itself is
kept in the directory's ``id`` file), and a key in a marker's name past ``MAX_KEY`` is a digest (the
marker's content holds the ids).
"""

from __future__ import annotations

import functools
import hashlib
import json
from base64 import b32decode, b32encode
from binascii import Error as B32Error
from dataclasses import dataclass
from typing import Any

METADATA, ARTIFACTS, SOURCES, DESCENDANTS = "metadata", "artifacts", "sources", "descendants"
EDGES, STAGING, ID_FILE = "edges", ".staging", "id"
REVERSE_PREFIX, INDEXED_PREFIX = ".d.", ".i."
# a reverse edge that also stands for its run's ".i." marker: the first edge of a run a writer made
# (one file less for a new run); readers of the previous version skip it and read the run in full
FIRST_EDGE_PREFIX = ".e."
MAX_DIR_NAME = 250  # base32 names up to here (ids up to 155 bytes); ".i." + 250 still fits 255
MAX_KEY = 80  # three keys and their separators in one marker name stay under 255
LONG_ID_PREFIX = "torchx-airflow-tracker:long-id:sha256:"
NO_NAME = "-"  # the key of "no artifact name" (not a base32 character)
# The directory the previous version kept its index in: not a run (writers remove it on reindex).
LEGACY_INDEX_ID = "torchx-airflow-tracker://index"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _b32(text: str) -> str:
    return b32encode(text.encode("utf-8")).decode("ascii")


@functools.lru_cache(maxsize=4096)  # every write names its run (and a source) several times
def run_dir_name(run_id: str) -> str:
    """The directory name of a run: base32 of its id (TorchX's encoding), or of its digest when long."""
    name = _b32(run_id)
    if len(name) <= MAX_DIR_NAME:
        return name
    return _b32(LONG_ID_PREFIX + _digest(run_id))


def named_by_digest(run_id: str) -> bool:
    """Whether the directory (or ``sources/`` file) named after ``run_id`` bears its digest, not the id."""
    return len(run_dir_name(run_id)) != len(_b32(run_id))


def decode_name(name: str) -> str | None:
    """The text a base32 name encodes, or None if the name is not one (e.g. ``.staging``)."""
    try:
        return b32decode(name).decode("utf-8")
    except (B32Error, UnicodeDecodeError, ValueError):
        return None


@functools.lru_cache(maxsize=4096)
def key(value: str | None) -> str:
    """A short name-safe key of an id or an artifact name: base32, or ``_`` and a digest when long."""
    if value is None:
        return NO_NAME
    encoded = _b32(value)
    return encoded if len(encoded) <= MAX_KEY else "_" + _digest(value)[:40]


def decode_key(text: str) -> tuple[bool, str | None]:
    """``(known, value)``: the value a key stands for, or ``known=False`` for a digest key."""
    if text == NO_NAME:
        return True, None
    if text.startswith("_"):
        return False, None
    value = decode_name(text)
    return value is not None, value


@dataclass(frozen=True)
class Edge:
    """``run_id`` has ``source_id`` as a source through ``artifact_name`` (None: no name)."""

    source_id: str
    run_id: str
    artifact_name: str | None

    def reverse_marker(self, first: bool = False) -> str:
        """The marker's file name under the root (the source first, so a prefix lists its children).

        ``first``: the marker also stands for the run's ``.i.`` marker (see ``named_in_full``).
        """
        prefix = FIRST_EDGE_PREFIX if first else REVERSE_PREFIX
        return f"{prefix}{key(self.source_id)}.{key(self.run_id)}.{key(self.artifact_name)}"

    def named_in_full(self) -> bool:
        """Whether a marker's name holds the whole edge (no key is a digest); the run's key is then
        its directory's name, so a first-edge marker can stand for the run's ``.i.`` marker."""
        return not any(key(v).startswith("_") for v in (self.source_id, self.run_id, self.artifact_name))

    def forward_marker(self) -> str:
        """The marker's file name under the run's ``edges/`` directory."""
        return f"{key(self.source_id)}.{key(self.artifact_name)}"

    def content(self) -> str:
        return json.dumps({"source": self.source_id, "run": self.run_id, "artifact_name": self.artifact_name})


def parse_reverse_marker(name: str) -> tuple[str, str, str] | None:
    """The three keys of a reverse marker's file name (either kind), or None if it is not one."""
    if not name.startswith((REVERSE_PREFIX, FIRST_EDGE_PREFIX)):
        return None
    parts = name[len(REVERSE_PREFIX) :].split(".")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None


def edge_from_keys(source_key: str, run_key: str, name_key: str) -> Edge | None:
    """The edge the keys of a marker name, or None when a key is a digest (read the content)."""
    decoded = [decode_key(k) for k in (source_key, run_key, name_key)]
    if not all(known for known, _ in decoded) or decoded[0][1] is None or decoded[1][1] is None:
        return None
    return Edge(decoded[0][1], decoded[1][1], decoded[2][1])


def edge_from_content(text: str | None) -> Edge | None:
    """The edge a marker's content holds, or None if it is missing or not an edge."""
    try:
        entry: Any = json.loads(text) if text else None
    except json.JSONDecodeError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("source"), str):
        return None
    if not isinstance(entry.get("run"), str) or not isinstance(entry.get("artifact_name"), str | None):
        return None
    return Edge(entry["source"], entry["run"], entry["artifact_name"])
