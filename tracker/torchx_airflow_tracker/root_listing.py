"""One listing of an fsspec store's root, parsed once, and when a local root's listing is still good.

A query reads the whole edge graph from the root's names (``store_layout``): the reverse markers,
the ``.i.`` markers, the run directories. With the names sorted, the markers of one source are one
slice (their names start with its key) and every kind of marker is a block found by bisection, so a
query makes no Python pass over the names beyond the blocks it needs.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left
from dataclasses import dataclass, field

from torchx_airflow_tracker.store_layout import FIRST_EDGE_PREFIX, INDEXED_PREFIX, REVERSE_PREFIX

# a directory changed this recently may change again within its mtime's granularity (the kernel's
# clock tick, or a file server's clock) without its stamp changing: its listing is not reused
RACY_WINDOW_NS = 2_000_000_000

RootStamp = tuple[int, int, int, int]


def _block(names: list[str], prefix: str) -> list[str]:
    """The names that start with ``prefix`` (``names`` sorted): one slice, found by bisection."""
    # the first string past every name with the prefix: its last character plus one
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return names[bisect_left(names, prefix) : bisect_left(names, end)]


@dataclass
class RootListing:
    """The root's names, sorted, and what the store derives from them (computed once, on demand).

    Dot-names sort before every base32 name (``.`` comes before ``2``-``7`` and ``A``-``Z``), so the
    run directories are the tail of the list.
    """

    names: list[str]
    _indexed: set[str] | None = None
    runs: dict[str, str] | None = None  # {directory name: run id}, set by the store

    def __post_init__(self) -> None:
        self.names.sort()

    def markers(self, source_key: str | None = None) -> list[str]:
        """The reverse markers (both kinds), all or those of the source whose key is ``source_key``."""
        tail = "" if source_key is None else f"{source_key}."
        return _block(self.names, REVERSE_PREFIX + tail) + _block(self.names, FIRST_EDGE_PREFIX + tail)

    def directories(self) -> list[str]:
        """The names that may be run directories (not dot-names)."""
        return self.names[bisect_left(self.names, "/") :]

    def indexed(self) -> set[str]:
        """The directory names whose run is indexed: an ``.i.`` marker, or a first-edge marker."""
        if self._indexed is None:
            skip = len(INDEXED_PREFIX)
            self._indexed = {name[skip:] for name in _block(self.names, INDEXED_PREFIX)}
            for name in _block(self.names, FIRST_EDGE_PREFIX):
                parts = name.split(".")  # "", "e", source key, run key (its directory's name), name key
                if len(parts) == 5:
                    self._indexed.add(parts[3])
        return self._indexed

    def unindexed(self) -> list[str]:
        """The run directories (candidates) with no index marker."""
        indexed = self.indexed()
        return [name for name in self.directories() if name not in indexed]


@dataclass
class LocalListingCache:
    """The last listing of a local root, reused while the root's stamp (mtime, inode, link count,
    size) is unchanged: a file added or removed under the root changes its mtime (and a directory
    its link count); a stamp too recent to trust (``RACY_WINDOW_NS``) is not kept."""

    root: str
    _last: tuple[RootStamp, RootListing] | None = field(default=None, repr=False)

    def stamp(self) -> RootStamp | None:
        """The root's stamp now, or None if it is missing or changed too recently to be trusted."""
        try:
            st = os.stat(self.root)
        except OSError:
            return None
        if st.st_mtime_ns > time.time_ns() - RACY_WINDOW_NS:
            return None
        return (st.st_mtime_ns, st.st_ino, st.st_nlink, st.st_size)

    def get(self, stamp: RootStamp | None) -> RootListing | None:
        if stamp is None or self._last is None or self._last[0] != stamp:
            return None
        return self._last[1]

    def keep(self, stamp: RootStamp | None, listing: RootListing) -> None:
        self._last = None if stamp is None else (stamp, listing)
