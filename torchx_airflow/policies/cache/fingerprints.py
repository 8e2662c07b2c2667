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
"""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from torchx_airflow.exceptions import TorchXError

if TYPE_CHECKING:
    from torchx.specs import AppDef

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


class FingerprintError(TorchXError):
    """A cache input (a parent's artifact, a file named in the arguments) could not be read."""


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def local_path(path: str) -> str | None:
    """The local path ``path`` names (a plain path or a ``file://`` URL), or None for a remote URL.

    >>> local_path("/data/x.csv"), local_path("file:///data/x.csv"), local_path("s3://b/x.csv")
    ('/data/x.csv', '/data/x.csv', None)
    """
    parts = urlsplit(path)
    if not parts.scheme or len(parts.scheme) == 1:  # a path (or a Windows drive letter)
        return path
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return parts.path or "/"
    return None


def _local_file(path: str, st: os.stat_result) -> dict[str, Any]:
    if st.st_size <= CONTENT_HASH_LIMIT:
        return {"size": st.st_size, "sha256": _sha256_file(path)}
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def _local_files(root: str) -> Iterator[tuple[str, str]]:
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(directory, name)
            yield os.path.relpath(full, root), full


def _local(path: str) -> dict[str, Any]:
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            entries = {}
            for count, (relative, full) in enumerate(_local_files(path), start=1):
                if count > MAX_DIRECTORY_FILES:
                    raise FingerprintError(
                        f"{path!r} holds more than {MAX_DIRECTORY_FILES} files: too many to fingerprint."
                    )
                entries[relative] = _local_file(full, os.stat(full))
            return {"directory": entries}
        return _local_file(path, st)
    except OSError as e:
        raise FingerprintError(f"{path!r} cannot be read: {type(e).__name__}: {e}") from e


def _stable(info: dict[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in info.items() if str(k).lower() in _STABLE_INFO and v}


def _remote_file(fs: Any, path: str, info: dict[str, Any]) -> dict[str, Any]:
    told = {"size": info.get("size"), **_stable(info)}
    size = info.get("size")
    if not _CHECKSUMS & set(told) and isinstance(size, int) and size <= CONTENT_HASH_LIMIT:
        told["sha256"] = hashlib.sha256(fs.cat_file(path)).hexdigest()
    return told


def _remote(url: str) -> dict[str, Any]:
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(url)
        info = fs.info(path)
        if info.get("type") != "directory":
            return _remote_file(fs, path, info)
        found = fs.find(path, detail=True)
        if len(found) > MAX_DIRECTORY_FILES:
            raise FingerprintError(
                f"{url!r} holds more than {MAX_DIRECTORY_FILES} files: too many to fingerprint."
            )
        base = path.rstrip("/") + "/"
        return {
            "directory": {
                name.removeprefix(base): _remote_file(fs, name, i) for name, i in sorted(found.items())
            }
        }
    except FingerprintError:
        raise
    except Exception as e:  # a missing file, no driver for the URL (ImportError), no access
        raise FingerprintError(f"{url!r} cannot be read: {type(e).__name__}: {e}") from e


def fingerprint(path: str) -> dict[str, Any]:
    """What ``path`` (a local path or any fsspec URL, a file or a directory) holds; raises
    ``FingerprintError`` when it cannot be read."""
    local = local_path(path)
    return _local(local) if local is not None else _remote(path)


def _words(arg: str) -> Iterable[str]:
    """The words of one argument that may name a file: itself, ``--opt=value``'s value, the words of
    a shell command (``bash -c "torchrun ... train.py"``), the items of a ``a,b,c`` list."""
    words = [arg]
    if any(c.isspace() for c in arg):
        try:
            words += shlex.split(arg)
        except ValueError:
            words += arg.split()
    for word in list(words):
        if "=" in word:
            words.append(word.split("=", 1)[1])
        if "," in word:
            words += word.split(",")
    return words


def named_files(app: AppDef) -> list[str]:
    """The existing local files the app's entrypoints and arguments name (job scripts, configs, data
    read by path), relative ones as seen from this process's directory; the first ``MAX_NAMED_FILES``."""
    found: dict[str, None] = {}
    for role in app.roles:
        for arg in [role.entrypoint, *role.args]:
            for word in _words(str(arg)):
                if len(found) >= MAX_NAMED_FILES:
                    return list(found)
                if word and ("/" in word or "." in word) and len(word) < 4096 and os.path.isfile(word):
                    found.setdefault(os.path.abspath(word))
    return list(found)
