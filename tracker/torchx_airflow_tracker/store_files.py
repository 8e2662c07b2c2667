"""The few file operations the fsspec store needs, atomic for readers, on any fsspec filesystem.

Local disks take a direct ``os`` path: the store's writes and reads are many small files, and
fsspec's per-call overhead (path normalisation, an ``info()`` per listed entry) would otherwise
cost more than the I/O itself. Only writes create directories: a reader never creates anything.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from collections.abc import Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import fsspec

_LOCAL_PROTOCOLS = {"file", "local"}
# what object stores' listings carry that changes with the object (s3fs: ETag, LastModified)
_VERSION_FIELDS = ("ETag", "LastModified", "mtime", "created")


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return bool(_LOCAL_PROTOCOLS & set(protocols))


class FileTooLargeError(ValueError):
    """A file holds more than a bounded read allows: it was not read past the bound."""

    def __init__(self, path: str, max_bytes: int) -> None:
        super().__init__(f"{path!r} holds more than {max_bytes} bytes; it was not read")
        self.path = path
        self.max_bytes = max_bytes


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

    def make_dir(self, path: str) -> bool:
        """Local disks: make the directory ``path`` (and the missing ones above it); True if this
        call made it, False if it was there."""
        try:
            os.mkdir(path)
        except FileExistsError:
            return False
        except FileNotFoundError:  # the first run of a new root
            os.makedirs(posixpath.dirname(path), exist_ok=True)
            return self.make_dir(path)
        return True

    def append_line(self, path: str, line: str, new_dir: bool = False) -> None:
        """Add one line to a local file with one ``O_APPEND`` write (writers never overwrite each other).

        ``new_dir``: the file's directory is most likely missing, so make it first (no failing open).
        """
        data = f"{line}\n".encode()
        if new_dir:
            self.make_dir(posixpath.dirname(path))
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

    def link_once(self, existing: str, path: str) -> bool:
        """Local disks: a hard link at ``path`` to the file ``existing`` unless ``path`` is there (a
        marker whose content is never read); an empty file where the filesystem has no hard links.
        True if it was made."""
        try:
            os.link(existing, path)
        except FileExistsError:
            return False
        except OSError:  # no hard links here (EPERM, ENOTSUP, ...)
            return self.create_once(path)
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

    def read(self, path: str, max_bytes: int | None = None) -> bytes:
        """The file's bytes; ``FileNotFoundError`` if it does not exist. With ``max_bytes``, at most
        ``max_bytes + 1`` of them are read (a longer result tells the caller the file is larger)."""
        if self.local:
            with open(path, "rb") as f:
                return f.read(-1 if max_bytes is None else max_bytes + 1)
        if max_bytes is None:
            return self.fs.cat_file(path)
        return self.fs.cat_file(path, start=0, end=max_bytes + 1)

    def read_text(self, path: str, max_bytes: int | None = None) -> str | None:
        """The file's text, or None if it does not exist (or is a directory); ``FileTooLargeError`` when
        it holds more than ``max_bytes`` (nothing past that is read)."""
        try:
            data = self.read(path, max_bytes)
        except (FileNotFoundError, IsADirectoryError):
            return None
        if max_bytes is not None and len(data) > max_bytes:
            raise FileTooLargeError(path, max_bytes)
        return data.decode("utf-8")

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
        if not hidden or not self.local:  # os.listdir gives no empty name, fs.ls may give the directory
            names = [n for n in names if n and (hidden or not n.startswith("."))]
        names.sort()
        return names

    def versioned_names(self, directory: str) -> list[tuple[str, Hashable]]:
        """``(name, version)`` of the entries under ``directory``, in name order, dot-names left out.

        The version (object stores: size, ETag and modification time from the same listing, no
        request more) changes whenever the file does; None where the listing gives no such thing
        (local disks: read the file, a system call, instead).
        """
        if self.local:
            return [(name, None) for name in self.names(directory)]
        try:
            listed = self.fs.ls(directory, detail=True, refresh=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        found: list[tuple[str, Hashable]] = []
        for info in listed:
            name = posixpath.basename(str(info["name"]).rstrip("/"))
            if name and not name.startswith(".") and info.get("type") != "directory":
                stamps = tuple(str(info.get(k)) for k in _VERSION_FIELDS if info.get(k) is not None)
                found.append((name, (info.get("size"), *stamps) if stamps else None))
        found.sort(key=lambda item: item[0])
        return found

    def remove_tree(self, directory: str) -> None:
        """Remove ``directory`` and everything under it (nothing if it is missing)."""
        try:
            self.fs.rm(directory, recursive=True)
        except FileNotFoundError:
            pass


def _write_local(path: str, data: bytes, mode: str = "wb") -> None:
    """Write ``data`` to a new (``xb``: ``FileExistsError`` if there) or replaced (``wb``) local file.

    Straight ``os`` calls: a Python file object costs three more system calls per file (and most of
    the store's files are small markers and entries).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_EXCL if mode == "xb" else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o666)
    except FileNotFoundError:
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        fd = os.open(path, flags, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
