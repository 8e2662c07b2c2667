"""The few file operations the fsspec store needs, atomic for readers, on any fsspec filesystem.

Local disks take a direct ``os`` path: the store's writes and reads are many small files, and
fsspec's per-call overhead (path normalisation, an ``info()`` per listed entry) would otherwise
cost more than the I/O itself.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import fsspec

_LOCAL_PROTOCOLS = {"file", "local"}


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return bool(_LOCAL_PROTOCOLS & set(protocols))


class StoreFiles:
    """Write whole files, read them, list a directory's entry names: on ``fs``, or ``os`` when local.

    A write is seen by readers all at once or not at all: on local disks the file is written under
    ``staging_dir`` (on the same filesystem) and renamed into place (atomic on POSIX); on object
    stores and memory one put is atomic already.
    """

    def __init__(self, fs: fsspec.AbstractFileSystem, staging_dir: str) -> None:
        self.fs = fs
        self.local = is_local(fs)
        self.staging_dir = staging_dir

    def write(self, path: str, text: str) -> None:
        data = text.encode("utf-8")
        if not self.local:
            self.fs.pipe_file(path, data)
            return
        tmp = posixpath.join(self.staging_dir, uuid.uuid4().hex)
        _write_local(tmp, data)
        try:
            os.replace(tmp, path)
        except FileNotFoundError:  # first entry of its directory
            os.makedirs(posixpath.dirname(path), exist_ok=True)
            os.replace(tmp, path)

    def create_empty(self, path: str) -> bool:
        """Create an empty file at ``path`` (a marker) unless one is there; True if it was created."""
        if not self.local:
            if self.fs.exists(path):
                return False
            self.fs.pipe_file(path, b"")
            return True
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        except FileNotFoundError:
            os.makedirs(posixpath.dirname(path), exist_ok=True)
            return self.create_empty(path)
        return True

    def create(self, path: str, text: str) -> None:
        """Write a new file in place, without the rename: for entries whose readers skip one that is
        not yet whole (cheaper on local disks; on object stores a put is whole anyway)."""
        data = text.encode("utf-8")
        if not self.local:
            self.fs.pipe_file(path, data)
            return
        _write_local(path, data, mode="xb")

    def read(self, path: str) -> bytes:
        """The file's bytes; ``FileNotFoundError`` if it does not exist."""
        if self.local:
            with open(path, "rb") as f:
                return f.read()
        return self.fs.cat_file(path)

    def read_text(self, path: str) -> str | None:
        """The file's text, or None if it does not exist."""
        try:
            return self.read(path).decode("utf-8")
        except FileNotFoundError:
            return None

    def names(self, directory: str) -> list[str]:
        """Entry names (not paths) under ``directory`` in name order, dot-names left out; [] if missing."""
        try:
            if self.local:
                names = os.listdir(directory)
            else:
                names = [
                    posixpath.basename(p.rstrip("/"))
                    for p in self.fs.ls(directory, detail=False, refresh=True)
                ]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(n for n in names if n and not n.startswith("."))

    def makedirs(self, directory: str) -> None:
        if self.local:
            os.makedirs(directory, exist_ok=True)
        else:
            self.fs.makedirs(directory, exist_ok=True)


def _write_local(path: str, data: bytes, mode: str = "wb") -> None:
    try:
        f = open(path, mode)  # not in a with: the retry below opens it again
    except FileNotFoundError:
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        f = open(path, mode)
    with f:
        f.write(data)
