"""A task's cache records: made when a run SUCCEEDED, found and checked before submitting.

A record ``{app_handle, result, created, expires, outputs, airflow}`` goes to every tracker store of
the task under its key (the stores keep it where TorchX's readers do not look:
``torchx_airflow_tracker.cache_records``). A lookup takes the first store's record that is unexpired
and whose outputs (the run's artifacts) still hold what they held.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchx_airflow.policies.cache.inputs import KEY_VERSION

if TYPE_CHECKING:
    from torchx.tracker.api import TrackerBase


def new_record(
    key: str, app_handle: str, result: Mapping[str, Any], ttl: float, airflow: Mapping[str, Any]
) -> dict[str, Any]:
    """The record of a run that SUCCEEDED: its result, when it expires, what its outputs hold now
    (a fingerprint per artifact path; None for one this process cannot read, not checked later)."""
    from torchx_airflow.apps import json_safe
    from torchx_airflow.policies.cache.fingerprints import FingerprintError, fingerprint

    outputs: dict[str, Any] = {}
    for artifact in (result.get("artifacts") or {}).values():
        path = str(artifact.get("path") or "")
        if path:
            try:
                outputs[path] = fingerprint(path)
            except FingerprintError:
                outputs[path] = None
    now = time.time()
    return {
        "version": KEY_VERSION,
        "key": key,
        "app_handle": app_handle,
        "result": json_safe(dict(result)),
        "created": now,
        "expires": now + ttl,
        "outputs": outputs,
        "airflow": json_safe(dict(airflow)),
    }


def usable(record: Any, key: str, now: float | None = None) -> str | None:
    """Why ``record`` cannot be used for ``key`` (not one, expired, outputs changed), or None."""
    from torchx_airflow.policies.cache.fingerprints import FingerprintError, fingerprint

    if not isinstance(record, dict) or record.get("key") != key or record.get("version") != KEY_VERSION:
        return "not a record of this key"
    if not isinstance(record.get("result"), dict) or not isinstance(record.get("app_handle"), str):
        return "not a record of this key"
    if float(record.get("expires") or 0) <= (time.time() if now is None else now):
        return "expired"
    for path, held in (record.get("outputs") or {}).items():
        if held is None:
            continue
        try:
            now_holds = fingerprint(path)
        except FingerprintError as e:
            return f"its output {path!r} is gone ({e})"
        if now_holds != held:
            return f"its output {path!r} changed since"
    return None


def cache_records(store: TrackerBase) -> Any:
    """The store's cache records (``put/get/delete/keys``), or None for a store without them."""
    return getattr(store, "cache_records", None)


def find_record(stores: Sequence[TrackerBase], key: str, task_log: Any) -> dict[str, Any] | None:
    """The first usable record of ``key`` in ``stores`` (in order); reasons to skip one are logged."""
    for store in stores:
        records = cache_records(store)
        if records is None:
            continue
        record = records.get(key)
        if record is None:
            continue
        reason = usable(record, key)
        if reason is None:
            return record
        task_log.info("Cache record %s in %r not used: %s", key, store, reason)
    return None


def write_record(stores: Sequence[TrackerBase], key: str, record: Mapping[str, Any], task_log: Any) -> int:
    """Write ``record`` to every store that keeps records; a store that fails is a warning. Returns
    how many stores have it."""
    from torchx_airflow.retry import tracker_retrying

    written = 0
    for store in stores:
        records = cache_records(store)
        if records is None:
            continue
        try:
            tracker_retrying(f"Writing cache record {key} to {store!r}")(lambda r=records: r.put(key, record))
            written += 1
        except Exception as e:
            task_log.warning("Could not write cache record %s to %r: %s: %s", key, store, type(e).__name__, e)
    return written
