"""What a file or an artifact holds, told in a few bytes: the inputs of a cache key.

A fingerprint changes when the content does. Local files up to ``CONTENT_HASH_LIMIT`` bytes are
hashed whole (SHA-256): size and modification time alone miss a same-size change written within the
filesystem's timestamp resolution. Larger local files are told by size, modification and change time
(nanoseconds). A remote file is told by what its store offers about it (ETag, MD5, CRC32C, version,
modification time, size); one for which the store offers no checksum is hashed whole when small
enough. A directory is the fingerprints of its files, relative paths included, at most
``MAX_DIRECTORY_FILES`` of them.

What cannot be read raises ``FingerprintError``: the caller then does not cache (a key that left
out an input it could not read could match a run whose input was different).

Reads with limits. Artifact paths come from tracker stores, which any job tracking to them can
write, so a path is read only where the task may read (``ReadScope``): a local file must be a
regular file (never a device, a FIFO or a socket; opened without blocking and checked again once
open), never under ``/proc``, ``/sys`` or ``/dev``, and, where the scope names roots, under one of
them (the directories the task's own arguments name, the local stores' roots); a remote URL only
under a configured store's root, read with that store's own filesystem (its protocol and
credentials), never with whatever credentials the worker has. Every read stops at
``MAX_READ_BYTES`` and ``READ_SECONDS`` per fingerprint, in the calling thread (no thread is
started, none is left behind). Anything else is "unknown": ``FingerprintError``, a miss.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXError

if TYPE_CHECKING:
    from torchx.specs import AppDef
    from torchx_airflow_tracker.protocol import ProviderStore

#: Files up to this size are hashed by content; larger ones are told by size and times.
CONTENT_HASH_LIMIT = 32 * 1024 * 1024
#: A directory with more files than this is not fingerprinted (its task is not cached).
MAX_DIRECTORY_FILES = 10_000
#: Files named in an app's arguments that are fingerprinted at most (the first ones).
MAX_NAMED_FILES = 64
# What fsspec's info() offers about a remote file that changes with its content, by store: S3 and
# Azure (ETag, VersionId, LastModified), GCS (md5Hash, crc32c, generation, updated), HDFS, SFTP
# and others (mtime, checksum). Matched case-insensitively.
_STABLE_INFO = frozenset(
    {
        "etag",
        "md5hash",
        "crc32c",
        "checksum",
        "content_md5",
        "sha256",
        "versionid",
        "version_id",
        "generation",
        "lastmodified",
        "last_modified",
        "mtime",
        "updated",
        "modified",
    }
)
# these say what the bytes are, so no content read is needed
_CHECKSUMS = frozenset({"etag", "md5hash", "crc32c", "checksum", "content_md5", "sha256"})
_CHUNK = 1 << 20
#: Bytes one fingerprint reads at most (all files of a directory together).
MAX_READ_BYTES = 256 * 1024 * 1024
#: Seconds one fingerprint reads at most.
READ_SECONDS = 30.0
# kernel and device trees: their "files" are the worker's own state (/proc/self/environ) or endless
_NEVER_READ = ("/proc", "/sys", "/dev")


class FingerprintError(TorchXError):
    """A cache input (a parent's artifact, a file named in the arguments) could not be read, or may not be."""


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass(frozen=True)
class ReadScope:
    """Where fingerprints may read.

    :param local_roots: real local directories files must lie under; None: any local regular file
        (still never under ``/proc``, ``/sys`` or ``/dev``).
    :param stores: ``(filesystem, root)`` of each configured remote store: a remote URL is read only
        under one of these roots, with that filesystem. None of them: no remote reads at all.
    """

    local_roots: tuple[str, ...] | None = None
    stores: tuple[tuple[Any, str], ...] = ()
    max_bytes: int = MAX_READ_BYTES
    seconds: float = READ_SECONDS


@dataclass
class _Budget:
    """What one fingerprint may still read: bytes, and time until its deadline."""

    scope: ReadScope
    read: int = 0
    deadline: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.scope.seconds

    def take(self, path: str, count: int) -> None:
        self.read += count
        if self.read > self.scope.max_bytes:
            raise FingerprintError(
                f"{path!r}: more than {self.scope.max_bytes} bytes to read; not read further."
            )
        if time.monotonic() > self.deadline:
            raise FingerprintError(f"{path!r}: reading took over {self.scope.seconds:g} s; not read further.")


def read_scope(
    app: AppDef | None, stores: Sequence[ProviderStore] = (), output_roots: Sequence[str] = ()
) -> ReadScope:
    """The scope of a task: the deployment's ``output_roots`` (local ones; a URL is read only through
    a store below), the directories its own arguments name as outputs (``apps.output_roots``), the
    files its arguments name (each as itself, never its directory), and its stores' roots, local ones
    as local roots, remote ones with their own filesystems."""
    from torchx_airflow.apps import argument_paths
    from torchx_airflow.apps import output_roots as argument_roots

    roots: dict[str, None] = {}
    remote: list[tuple[Any, str]] = []
    for store in stores:
        files = store.filesystem()
        if files is None:  # not a store of files (MLflow): nothing of it is read as a path
            continue
        fs, root = files
        if "file" in _protocols(fs) or "local" in _protocols(fs):
            roots.setdefault(os.path.realpath(root))
        else:
            remote.append((fs, root.rstrip("/")))
    local = [r.removeprefix("file://") for r in output_roots if "://" not in r or r.startswith("file://")]
    named = [*local, *(argument_roots(app) if app is not None else ())]
    named += [p for p in argument_paths(app) if os.path.isfile(p)]  # a file named: itself only
    for path in named:
        real = os.path.realpath(path)
        if real != "/" and not any(_under(real, never) for never in _NEVER_READ):
            roots.setdefault(real)
    return ReadScope(local_roots=tuple(roots), stores=tuple(remote))


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = getattr(fs, "protocol", ())
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _checked_local(path: str, budget: _Budget) -> str:
    """The real path of ``path`` when the scope lets it be read; else ``FingerprintError``."""
    real = os.path.realpath(path)
    if any(_under(real, never) for never in _NEVER_READ):
        raise FingerprintError(f"{path!r} is under /proc, /sys or /dev: never read.")
    roots = budget.scope.local_roots
    if roots is not None and not any(_under(real, root) for root in roots):
        raise FingerprintError(
            f"{path!r} lies outside the task's output roots (the directories its arguments name as "
            "outputs, the files they name, its stores, and output_roots): not read. If the task's jobs "
            "write there, add it to output_roots (the torchx connection's extra, or [torchx] output_roots)."
        )
    return real


def _sha256_file(path: str, size: int, budget: _Budget) -> str:
    """SHA-256 of the first ``size`` bytes of the regular file ``path`` (what stat said it holds)."""
    # O_NONBLOCK: a FIFO swapped in after the stat cannot block the open; fstat checks what opened
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb", buffering=0) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FingerprintError(f"{path!r} is not a regular file: not read.")
        return _sha256_of(f, path, size, budget)


def _sha256_of(f: Any, path: str, size: int, budget: _Budget) -> str:
    """SHA-256 of at most ``size`` bytes read from the open file ``f``, within ``budget``."""
    digest, left = hashlib.sha256(), size
    while left > 0:
        chunk = f.read(min(_CHUNK, left))
        if not chunk:
            break
        budget.take(path, len(chunk))
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest()


def _local_file(path: str, budget: _Budget) -> dict[str, Any]:
    real = _checked_local(path, budget)
    st = os.stat(real)
    if not stat.S_ISREG(st.st_mode):  # a device, a FIFO, a socket: endless or blocking
        raise FingerprintError(f"{path!r} is not a regular file: not read.")
    if st.st_size <= CONTENT_HASH_LIMIT:
        return {"size": st.st_size, "sha256": _sha256_file(real, st.st_size, budget)}
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def _local_files(path: str, root: str, budget: _Budget) -> Iterator[tuple[str, str]]:
    """``(relative, full)`` of the files under ``root``, each listing charged to ``budget`` as it
    is made (time, and every entry, a directory or not, against ``MAX_DIRECTORY_FILES``): a tree of
    empty directories costs as much as one of files."""
    listed = 0
    for directory, dirs, files in os.walk(root):
        listed += len(dirs) + len(files)
        if listed > MAX_DIRECTORY_FILES:
            raise FingerprintError(
                f"{path!r} holds more than {MAX_DIRECTORY_FILES} entries: too many to fingerprint."
            )
        budget.take(path, 0)
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(directory, name)
            yield os.path.relpath(full, root), full


def _local(path: str, budget: _Budget) -> dict[str, Any]:
    try:
        real = _checked_local(path, budget)
        if stat.S_ISDIR(os.stat(real).st_mode):
            entries = {
                relative: _local_file(full, budget) for relative, full in _local_files(path, real, budget)
            }
            return {"directory": entries}
        return _local_file(path, budget)
    except OSError as e:
        raise FingerprintError(f"{path!r} cannot be read: {type(e).__name__}: {e}") from e


def _stable(info: dict[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in info.items() if str(k).lower() in _STABLE_INFO and v}


def _remote_file(fs: Any, path: str, info: dict[str, Any], budget: _Budget) -> dict[str, Any]:
    told = {"size": info.get("size"), **_stable(info)}
    size = info.get("size")
    if not _CHECKSUMS & set(told) and isinstance(size, int) and size <= CONTENT_HASH_LIMIT:
        with fs.open(path, "rb") as f:
            told["sha256"] = _sha256_of(f, path, size, budget)
    return told


def _store_of(url: str, budget: _Budget) -> tuple[Any, str]:
    """The configured store holding ``url``, with the path in it; else ``FingerprintError``."""
    protocol = url.split("://", 1)[0] if "://" in url else ""
    for fs, root in budget.scope.stores:
        if protocol not in _protocols(fs):
            continue
        path = fs._strip_protocol(url)
        normal = posixpath.normpath(path)
        if _under(normal, fs._strip_protocol(root).rstrip("/")):
            return fs, normal
    raise FingerprintError(f"{url!r} is not under a configured tracker store: not read.")


def _remote(url: str, budget: _Budget) -> dict[str, Any]:
    fs, path = _store_of(url, budget)
    try:
        info = fs.info(path)
        if info.get("type") != "directory":
            return _remote_file(fs, path, info, budget)
        found: dict[str, Any] = {}
        listed = 0
        for _, dirs, files in fs.walk(path, detail=True):  # each listing charged as it is made
            listed += len(dirs) + len(files)
            if listed > MAX_DIRECTORY_FILES:
                raise FingerprintError(
                    f"{url!r} holds more than {MAX_DIRECTORY_FILES} entries: too many to fingerprint."
                )
            budget.take(url, 0)
            found.update({str(info["name"]): info for info in files.values()})
        base = path.rstrip("/") + "/"
        return {
            "directory": {
                name.removeprefix(base): _remote_file(fs, name, i, budget)
                for name, i in sorted(found.items())
            }
        }
    except FingerprintError:
        raise
    except Exception as e:  # a missing file, no access
        raise FingerprintError(f"{url!r} cannot be read: {type(e).__name__}: {e}") from e


def fingerprint(path: str, scope: ReadScope | None = None) -> dict[str, Any]:
    """What ``path`` (a local path or a URL of a configured store, a file or a directory) holds,
    read within ``scope`` (default: any local regular file outside /proc, /sys and /dev, and no
    remote URL); raises ``FingerprintError`` when it cannot or may not be read."""
    from torchx_airflow.apps import local_path

    budget = _Budget(scope or ReadScope())
    local = local_path(path)
    return _local(local, budget) if local is not None else _remote(path, budget)
