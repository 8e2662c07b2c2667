"""The few file operations the fsspec store needs, atomic for readers, on any fsspec filesystem.

Local disks take a direct ``os`` path: the store's writes and reads are many small files, and
fsspec's per-call overhead (path normalisation, an ``info()`` per listed entry) would otherwise
cost more than the I/O itself. Only writes create directories: a reader never creates anything.

**No link is followed below the root.** A store is written by every job that tracks to it, and a
job can plant a symbolic link (``sources/x -> /proc/self/environ``), a FIFO or a device where an
entry belongs. Locally, every path under the store's root is opened one component at a time, each
directory with ``O_DIRECTORY | O_NOFOLLOW`` relative to its parent's descriptor, each file with
``O_NOFOLLOW | O_NONBLOCK``, and a file is read or appended to only when ``fstat`` says it is a
regular file: a link, a FIFO, a device or a socket (or a directory that is a link) is refused with
``UnsafeEntryError``, never opened. Readers log it and see nothing there; writers fail that write.
The root itself is the deployment's setting and is trusted (it may be a link an administrator made).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import posixpath
import stat
import uuid
from collections.abc import Hashable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import fsspec

log = logging.getLogger(__name__)

_LOCAL_PROTOCOLS = {"file", "local"}
#: a file of the store that is small when honest (a marker, a long run id, an edge, a cache record,
#: a sources/ file): a reader reads no more of it than this
SMALL_FILE_BYTES = 1 << 20
# what object stores' listings carry that changes with the object (s3fs: ETag, LastModified)
_VERSION_FIELDS = ("ETag", "LastModified", "mtime", "created")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return bool(_LOCAL_PROTOCOLS & set(protocols))


class FileTooLargeError(ValueError):
    """A file holds more than a bounded read allows: it was not read past the bound."""

    def __init__(self, path: str, max_bytes: int) -> None:
        super().__init__(f"{path!r} holds more than {max_bytes} bytes; it was not read")
        self.path = path
        self.max_bytes = max_bytes


class UnsafeEntryError(ValueError):
    """An entry of a local store that is a link, a FIFO, a device or a socket, or lies under a link
    or outside the store's root: never opened."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(
            f"{path!r} is {what}: a store entry is a regular file in a real directory; not opened"
        )
        self.path = path


class LocalTree:
    """Paths under a local root, opened one component at a time and never through a link."""

    def __init__(self, root: str) -> None:
        self.root = posixpath.normpath(root)

    def split(self, path: str) -> tuple[list[str], str]:
        """The directories below the root on the way to ``path``, and its own name."""
        rel = posixpath.relpath(posixpath.normpath(path), self.root)
        parts = rel.split("/")
        if rel in (".", "") or ".." in parts:
            raise UnsafeEntryError(path, f"not under the store's root {self.root!r}")
        return parts[:-1], parts[-1]

    @contextlib.contextmanager
    def directory(self, names: list[str], create: bool = False) -> Iterator[int]:
        """A descriptor of the directory ``root/names...``, each step taken with ``O_NOFOLLOW``;
        ``create`` makes the missing ones (writers). ``FileNotFoundError`` when one is missing,
        ``NotADirectoryError`` when one is a file, ``UnsafeEntryError`` when one is a link."""
        fd = self._open_root(create)
        try:
            for i, name in enumerate(names):
                child = self._open_dir(fd, name, create, names[: i + 1])
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def _open_root(self, create: bool) -> int:
        """The root (the deployment's setting: trusted, links included); a writer makes it."""
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
        try:
            return os.open(self.root, flags)
        except FileNotFoundError:
            if not create:
                raise
            os.makedirs(self.root, exist_ok=True)
            return os.open(self.root, flags)

    def _open_dir(self, parent: int, name: str, create: bool, so_far: list[str]) -> int:
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
            with contextlib.suppress(FileExistsError):  # made meanwhile by another writer
                os.mkdir(name, 0o777, dir_fd=parent)
            return self._open_dir(parent, name, False, so_far)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            path = posixpath.join(self.root, *so_far)
            if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                raise UnsafeEntryError(path, "a symbolic link") from None
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", path) from None

    @contextlib.contextmanager
    def open_file(self, path: str, flags: int, create_dirs: bool = False, mode: int = 0o666) -> Iterator[int]:
        """A descriptor of the regular file at ``path`` opened with ``flags`` (which hold
        ``O_NOFOLLOW``); ``IsADirectoryError`` for a directory, ``UnsafeEntryError`` for anything
        else that is no regular file (checked on the open descriptor)."""
        dirs, name = self.split(path)
        with self.directory(dirs, create=create_dirs) as parent:
            try:
                fd = os.open(name, flags, mode, dir_fd=parent)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise UnsafeEntryError(path, "a symbolic link") from None
                raise
            try:
                kind = os.fstat(fd).st_mode
                if stat.S_ISDIR(kind):
                    raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
                if not stat.S_ISREG(kind):
                    raise UnsafeEntryError(path, "a FIFO, a device or a socket")
                yield fd
            finally:
                os.close(fd)


class StoreFiles:
    """Write whole files, read them, list a directory's entry names: on ``fs``, or ``os`` when local
    (every path under ``root``, opened through ``LocalTree``).

    A replaced file is seen by readers all at once or not at all: on local disks it is written under
    a staging directory the caller names (on the same filesystem, where no reader lists) and renamed
    into place (atomic on POSIX); on object stores and memory one put is atomic already.
    """

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str = "/") -> None:
        self.fs = fs
        self.local = is_local(fs)
        self.tree = LocalTree(root)
        #: entries readers refused (``UnsafeEntryError``), each logged once
        self.refused: set[str] = set()

    def _refuse(self, error: UnsafeEntryError) -> None:
        if error.path not in self.refused:
            self.refused.add(error.path)
            log.warning("Not reading %s", error)

    def write(self, path: str, text: str, staging_dir: str) -> None:
        """Replace the file at ``path`` whole."""
        data = text.encode("utf-8")
        if not self.local:
            self._put(path, data)
            return
        tmp = f".{uuid.uuid4().hex}.part"  # a dot-name: no reader takes it for an entry or a run
        staging, _ = self.tree.split(posixpath.join(staging_dir, tmp))
        dirs, name = self.tree.split(path)
        with (
            self.tree.directory(staging, create=True) as staged,
            self.tree.directory(dirs, create=True) as to,
        ):
            _write_fd(os.open(tmp, _CREATE_FLAGS, 0o666, dir_fd=staged), data)
            os.replace(tmp, name, src_dir_fd=staged, dst_dir_fd=to)  # replaces a link, never follows it

    def make_dir(self, path: str) -> bool:
        """Local disks: make the directory ``path`` (and the missing ones above it); True if this
        call made it, False if it was there (``UnsafeEntryError`` if a link stands there)."""
        dirs, name = self.tree.split(path)
        with self.tree.directory(dirs, create=True) as parent:
            try:
                os.mkdir(name, 0o777, dir_fd=parent)
            except FileExistsError:
                if not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                    raise UnsafeEntryError(path, "no directory (a link or a file)") from None
                return False
        return True

    def append_line(self, path: str, line: str, new_dir: bool = False) -> None:
        """Add one line to a local file with one ``O_APPEND`` write (writers never overwrite each other).

        ``new_dir``: the file's directory is most likely missing (made on the way either way).
        """
        with self.tree.open_file(path, _APPEND_FLAGS, create_dirs=True, mode=0o644) as fd:
            os.write(fd, f"{line}\n".encode())

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
            self._create_local(path, data)
        except FileExistsError:
            return False
        return True

    def link_once(self, existing: str, path: str) -> bool:
        """Local disks: a hard link at ``path`` to the file ``existing`` unless ``path`` is there (a
        marker whose content is never read); an empty file where the filesystem has no hard links.
        True if it was made."""
        src_dirs, src = self.tree.split(existing)
        dirs, name = self.tree.split(path)
        with self.tree.directory(src_dirs) as src_dir, self.tree.directory(dirs, create=True) as to:
            try:
                os.link(src, name, src_dir_fd=src_dir, dst_dir_fd=to, follow_symlinks=False)
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
        self._create_local(path, data)

    def _create_local(self, path: str, data: bytes) -> None:
        """A new local file (``FileExistsError`` if anything, a link included, stands there)."""
        dirs, name = self.tree.split(path)
        with self.tree.directory(dirs, create=True) as parent:
            _write_fd(os.open(name, _CREATE_FLAGS, 0o666, dir_fd=parent), data)

    def _put(self, path: str, data: bytes) -> None:
        try:
            self.fs.pipe_file(path, data)
        except FileNotFoundError:  # filesystems with real directories (sftp, ...): a write makes them
            self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
            self.fs.pipe_file(path, data)

    def read(self, path: str, max_bytes: int | None = None) -> bytes:
        """The file's bytes; ``FileNotFoundError`` if it does not exist. With ``max_bytes``,
        ``FileTooLargeError`` when it holds more: a local file's size is known before any byte is
        read (then none is), elsewhere at most ``max_bytes + 1`` of them are read."""
        if self.local:
            with self.tree.open_file(path, _READ_FLAGS) as fd:
                if max_bytes is not None and os.fstat(fd).st_size > max_bytes:
                    raise FileTooLargeError(path, max_bytes)
                data = _read_fd(fd, None if max_bytes is None else max_bytes + 1)
        elif max_bytes is None:
            data = self.fs.cat_file(path)
        else:
            data = self.fs.cat_file(path, start=0, end=max_bytes + 1)
        if max_bytes is not None and len(data) > max_bytes:  # grown since, or not local
            raise FileTooLargeError(path, max_bytes)
        return data

    def read_text(self, path: str, max_bytes: int | None = None) -> str | None:
        """The file's text, or None if it does not exist, is a directory, or is refused (a link, a
        FIFO, bytes that are not UTF-8...: logged once); ``FileTooLargeError`` when it holds more
        than ``max_bytes`` (nothing past that is read)."""
        try:
            data = self.read(path, max_bytes)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except UnsafeEntryError as e:
            self._refuse(e)
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:  # not text any writer of the store writes: skipped, not an error
            if path not in self.refused:
                self.refused.add(path)
                log.warning("Not reading %r: it is not UTF-8 text", path)
            return None

    def read_small(self, path: str, max_bytes: int = SMALL_FILE_BYTES) -> str | None:
        """``read_text`` of a file that is small when honest (a marker, an id, an edge, a cache
        record): None, logged once, when it holds more than ``max_bytes``, unread past them."""
        try:
            return self.read_text(path, max_bytes)
        except FileTooLargeError as e:
            if path not in self.refused:
                self.refused.add(path)
                log.warning("Not reading %s", e)
            return None

    def names(self, directory: str, hidden: bool = False) -> list[str]:
        """Entry names (not paths) under ``directory`` in name order; [] if missing or refused.

        Dot-names are left out unless ``hidden``.
        """
        try:
            if self.local:
                names = self._local_names(directory)
            else:
                names = [
                    posixpath.basename(p.rstrip("/"))
                    for p in self.fs.ls(directory, detail=False, refresh=True)
                ]
        except (FileNotFoundError, NotADirectoryError):
            return []
        except UnsafeEntryError as e:
            self._refuse(e)
            return []
        if not hidden or not self.local:  # os.listdir gives no empty name, fs.ls may give the directory
            names = [n for n in names if n and (hidden or not n.startswith("."))]
        names.sort()
        return names

    def _local_names(self, directory: str) -> list[str]:
        if posixpath.normpath(directory) == self.tree.root:
            return os.listdir(self.tree.root)
        dirs, name = self.tree.split(directory)
        with self.tree.directory([*dirs, name]) as fd:
            return os.listdir(fd)

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

    def remove(self, path: str) -> None:
        """Remove the file (or link) at ``path``, never what a link points at; nothing if missing."""
        if not self.local:
            self.fs.rm_file(path)
            return
        dirs, name = self.tree.split(path)
        with contextlib.suppress(FileNotFoundError), self.tree.directory(dirs) as parent:
            os.unlink(name, dir_fd=parent)

    def remove_tree(self, directory: str) -> None:
        """Remove ``directory`` and everything under it (nothing if it is missing); links are removed,
        never followed."""
        try:
            self.fs.rm(directory, recursive=True)
        except FileNotFoundError:
            pass


def _write_fd(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` and close it (straight ``os`` calls: a Python file object
    costs three more system calls per file, and most of the store's files are small)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _read_fd(fd: int, limit: int | None) -> bytes:
    """Up to ``limit`` bytes of ``fd`` (all of it when None)."""
    chunks, left = [], limit
    while left is None or left > 0:
        chunk = os.read(fd, 1 << 20 if left is None else min(1 << 20, left))
        if not chunk:
            break
        chunks.append(chunk)
        if left is not None:
            left -= len(chunk)
    return b"".join(chunks)
