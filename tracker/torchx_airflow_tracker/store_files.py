"""The few file operations the fsspec store needs, atomic for readers, on any fsspec filesystem.

Local disks take a direct ``os`` path: the store's writes and reads are many small files, and
fsspec's per-call overhead (path normalisation, an ``info()`` per listed entry) would otherwise
cost more than the I/O itself. Only writes create directories: a reader never creates anything.
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

    A replaced file is seen by readers all at once or not at all: on local disks it is written under
    a staging directory the caller names (on the same filesystem, where no reader lists) and renamed
    into place (atomic on POSIX); on object stores and memory one put is atomic already.
    """

    def __init__(self, fs: fsspec.AbstractFileSystem) -> None:
        self.fs = fs
        self.local = is_local(fs)

    def write(self, path: str, text: str, staging_dir: str) -> None:
        """Replace the file at ``path`` whole."""
        data = text.encode("utf-8")
        if not self.local:
            self._put(path, data)
            return
        tmp = posixpath.join(staging_dir, uuid.uuid4().hex)
        _write_local(tmp, data)
        try:
            os.replace(tmp, path)
        except FileNotFoundError:  # first entry of its directory
            os.makedirs(posixpath.dirname(path), exist_ok=True)
            os.replace(tmp, path)

    def append_line(self, path: str, line: str) -> None:
        """Add one line to a local file with one ``O_APPEND`` write (writers never overwrite each other)."""
        data = f"{line}\n".encode()
        try:
            fd = os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o644)
        except FileNotFoundError:
            os.makedirs(posixpath.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def create_once(self, path: str, text: str = "") -> bool:
        """Create the file at ``path`` unless one is there (a marker); True if it was created.

        Markers carry the same content whoever writes them, so two writers racing on an object
        store (where the check and the put are two calls) leave the same file.
        """
        data = text.encode("utf-8")
        if not self.local:
            if self.fs.exists(path):
                return False
            self._put(path, data)
            return True
        try:
            _write_local(path, data, mode="xb")
        except FileExistsError:
            return False
        return True

    def create(self, path: str, text: str) -> None:
        """Write a new file in place, without the rename: for entries whose readers skip one that is
        not yet whole (cheaper on local disks; on object stores a put is whole anyway)."""
        data = text.encode("utf-8")
        if not self.local:
            self._put(path, data)
            return
        _write_local(path, data, mode="xb")

    def _put(self, path: str, data: bytes) -> None:
        try:
            self.fs.pipe_file(path, data)
        except FileNotFoundError:  # filesystems with real directories (sftp, ...): a write makes them
            self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
            self.fs.pipe_file(path, data)

    def read(self, path: str) -> bytes:
        """The file's bytes; ``FileNotFoundError`` if it does not exist."""
        if self.local:
            with open(path, "rb") as f:
                return f.read()
        return self.fs.cat_file(path)

    def read_text(self, path: str) -> str | None:
        """The file's text, or None if it does not exist (or is a directory)."""
        try:
            return self.read(path).decode("utf-8")
        except (FileNotFoundError, IsADirectoryError):
            return None

    def names(self, directory: str, hidden: bool = False) -> list[str]:
        """Entry names (not paths) under ``directory`` in name order; [] if missing.

        Dot-names are left out unless ``hidden``.
        """
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
        return sorted(n for n in names if n and (hidden or not n.startswith(".")))

    def remove_tree(self, directory: str) -> None:
        """Remove ``directory`` and everything under it (nothing if it is missing)."""
        try:
            self.fs.rm(directory, recursive=True)
        except FileNotFoundError:
            pass


def _write_local(path: str, data: bytes, mode: str = "wb") -> None:
    try:
        f = open(path, mode)  # not in a with: the retry below opens it again
    except FileNotFoundError:
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        f = open(path, mode)
    with f:
        f.write(data)
