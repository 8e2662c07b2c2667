"""Cache records: where the provider's lineage-based cache keeps what an earlier run returned.

A record is a JSON object kept under a key (64 lowercase hex digits, a SHA-256), written by
``torchx_airflow.policies.cache.inputs`` when a cached task's app SUCCEEDED and read before the next one is
submitted. The stores keep records where TorchX's own readers never look, so they list exactly the
runs they listed before:

- fsspec: one file per key directly under the root, ``<root>/.c.<key>`` (TorchX's reader lists
  only the root's directories, and this store's ``run_ids()`` skips dot-names);
- MLflow: one run per key in the experiment ``.torchx-cache.<experiment id>``, beside the store's
  experiment (whose runs are the store's runs), tagged ``torchx.cache_key``; the record is the
  run's ``torchx.cache.record`` tag (split into part tags when long, as every value of that store).

The stores never interpret a record: expiry and everything else is the caller's. Dropping every key
of a store: delete its ``.c.*`` files, or the MLflow experiment ``.torchx-cache.<id>`` (the next
write starts a new one).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from torchx_airflow_tracker.store_files import FileTooLargeError

if TYPE_CHECKING:
    from torchx_airflow_tracker.store_files import StoreFiles


class FsspecSide(Protocol):
    """What the records use of an ``FsspecStore``: its root, filesystem and file helpers."""

    root: str
    fs: Any
    files: StoreFiles


class MlflowSide(Protocol):
    """What the records use of an ``MlflowStore``: its client and its experiment."""

    @property
    def client(self) -> Any: ...  # an MlflowClient

    @property
    def experiment_id(self) -> str: ...


CACHE_FILE_PREFIX = ".c."
#: Records of one key a reader tries at most (newest first): anyone may add one, the launcher's verifies
MAX_CANDIDATES = 20
#: A record larger than this is not read (an honest one fingerprints at most a few thousand outputs)
MAX_RECORD_BYTES = 8 << 20
CACHE_EXPERIMENT_PREFIX = ".torchx-cache."
KEY_TAG = "torchx.cache_key"
RECORD_TAG = "torchx.cache.record"
MAX_EXPERIMENT_GENERATIONS = 100
_KEY = re.compile(r"^[0-9a-f]{64}$")


def check_cache_key(key: str) -> str:
    """``key`` if it is a cache key (a SHA-256 in lowercase hex), else ``ValueError``.

    >>> check_cache_key("0" * 64) == "0" * 64
    True
    """
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError(
            f"{key!r} is not a cache key: keys are SHA-256 digests, 64 lowercase hex digits "
            "(the 'cache_key' a cached task logs and returns)."
        )
    return key


def _record(text: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if text else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class FsspecCacheRecords:
    """Records as ``<root>/.c.<key>`` files of an fsspec store, each replaced whole on a write."""

    def __init__(self, store: FsspecSide) -> None:
        self.store = store

    def _path(self, key: str) -> str:
        return posixpath.join(self.store.root, CACHE_FILE_PREFIX + check_cache_key(key))

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        path = self._path(key)
        text = json.dumps(dict(record), sort_keys=True, default=str)
        # a reader sees the old record or the new one, never a part (local disks: written beside it,
        # then renamed over whatever stands there, a link included; one put is whole on object stores)
        self.store.files.write(path, text, self.store.root)

    def get(self, key: str) -> dict[str, Any] | None:
        return _record(self.store.files.read_small(self._path(key), MAX_RECORD_BYTES))

    def candidates(self, key: str) -> list[dict[str, Any]]:
        """The one record a key has here (a write replaces it)."""
        record = self.get(key)
        return [] if record is None else [record]

    def delete(self, key: str) -> bool:
        path = self._path(key)
        try:
            if self.store.files.read_text(path, 0) is None:  # missing or refused (a byte read at most)
                return False
        except FileTooLargeError:
            pass  # there, and not empty
        try:
            self.store.files.remove(path)
        except FileNotFoundError:
            return False
        return True

    def keys(self) -> list[str]:
        names = self.store.files.names(self.store.root, hidden=True)
        found = (n[len(CACHE_FILE_PREFIX) :] for n in names if n.startswith(CACHE_FILE_PREFIX))
        return sorted(k for k in found if _KEY.match(k))


class MlflowCacheRecords:
    """Records as one run per key in the experiment ``.torchx-cache.<experiment id>``."""

    def __init__(self, store: MlflowSide) -> None:
        self.store = store
        self._experiment_id: str | None = None

    def _experiment(self, create: bool) -> str | None:
        """The cache experiment's id; a deleted one is skipped (its keys were dropped)."""
        if self._experiment_id is not None:
            return self._experiment_id
        client = self.store.client
        base = f"{CACHE_EXPERIMENT_PREFIX}{self.store.experiment_id}"
        for generation in range(MAX_EXPERIMENT_GENERATIONS):
            name = base if generation == 0 else f"{base}.{generation}"
            found = client.get_experiment_by_name(name)
            if found is not None and found.lifecycle_stage == "deleted":
                continue
            if found is None:
                if not create:
                    return None
                try:
                    self._experiment_id = client.create_experiment(name)
                except Exception as e:  # MlflowException: created meanwhile by another writer
                    if getattr(e, "error_code", None) != "RESOURCE_ALREADY_EXISTS":
                        raise
                    found = client.get_experiment_by_name(name)
                    if found is None or found.lifecycle_stage == "deleted":
                        continue
                    self._experiment_id = found.experiment_id
            else:
                self._experiment_id = found.experiment_id
            return self._experiment_id
        raise RuntimeError(f"{MAX_EXPERIMENT_GENERATIONS} cache experiments {base}.* are deleted.")

    def _runs(self, key: str | None = None) -> list[Any]:
        """The runs of ``key`` (every key's without one), newest first."""
        experiment = self._experiment(create=False)
        if experiment is None:
            return []
        from torchx_airflow_tracker.mlflow_tags import quote as _quote

        where = f"tags.`{KEY_TAG}` = {_quote(key)}" if key else f"tags.`{KEY_TAG}` LIKE '%'"
        runs: list[Any] = []
        token = None
        while True:
            page = self.store.client.search_runs(
                [experiment], filter_string=where, max_results=1000, page_token=token
            )
            runs.extend(page)
            token = page.token
            if not token:
                break
        return sorted(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id), reverse=True)

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        """A run of its own for each record: a run another writer made under the same key (any job
        may) is never written to, and the newest record that verifies is the one readers take."""
        from torchx_airflow_tracker.mlflow_tags import encode as _encode
        from torchx_airflow_tracker.mlflow_tags import log_tags

        check_cache_key(key)
        parts, tags = _encode(RECORD_TAG, dict(record))  # ValueTooLargeError before anything is written
        client = self.store.client
        experiment = self._experiment(create=True)
        run_id = client.create_run(str(experiment), run_name=key[:16], tags={KEY_TAG: key}).info.run_id
        # parts first (immutable, named by their digest): the record tag never points at a missing part
        log_tags(client, run_id, parts)
        log_tags(client, run_id, tags)

    def get(self, key: str) -> dict[str, Any] | None:

        found = self.candidates(key)
        return found[0] if found else None

    def candidates(self, key: str) -> list[dict[str, Any]]:
        """The records of ``key`` that decode, newest first (at most ``MAX_CANDIDATES``)."""
        from torchx_airflow_tracker.mlflow_tags import decode as _decode

        check_cache_key(key)
        found: list[dict[str, Any]] = []
        for run in self._runs(key):
            tags = run.data.tags
            if RECORD_TAG in tags:
                try:
                    value = _decode(tags[RECORD_TAG], tags)
                except (KeyError, ValueError):
                    continue
                if isinstance(value, dict):
                    found.append(value)
                if len(found) >= MAX_CANDIDATES:
                    break
        return found

    def delete(self, key: str) -> bool:
        check_cache_key(key)
        runs = self._runs(key)
        for run in runs:
            self.store.client.delete_run(run.info.run_id)
        return bool(runs)

    def keys(self) -> list[str]:
        return sorted({run.data.tags[KEY_TAG] for run in self._runs() if _KEY.match(run.data.tags[KEY_TAG])})
