"""A task's cache records: made when a run SUCCEEDED, found and checked before submitting.

A record ``{version, key, scope, app_handle, state, result, created, expires, outputs, read_roots,
airflow, signature}`` goes to every tracker store of the task under its key (the stores keep it where
TorchX's readers do not look: ``torchx_airflow_tracker.cache_records``). ``signature`` is the
HMAC-SHA256 of every other field under the deployment's cache key (``policies.cache.signing``),
which no job receives: a store is writable by every job tracking to it, so a record is used only
when its signature verifies, it names this key, this scope and a run that SUCCEEDED, it has not
expired (the shorter of the writer's ``expires`` and the reader's ``cache_ttl``), and its outputs
(the run's artifacts) still hold what they held. Outputs are read only within the task's read scope
(``fingerprints.read_scope``: what its arguments and stores name) and, at a lookup, the directories
the recording task read them under (``read_roots``, signed): a job's artifact path elsewhere is
never read, not even to be hashed into a record. Anything else is a miss; one the launcher could not
have written (unsigned, badly signed, inconsistent, malformed) is a miss with a warning.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchx_airflow.policies.cache.inputs import KEY_VERSION
from torchx_airflow.policies.cache.signing import SIGNATURE_FIELD

if TYPE_CHECKING:
    from torchx_airflow_tracker.protocol import ProviderStore

    from torchx_airflow.policies.cache.fingerprints import ReadScope
    from torchx_airflow.policies.cache.signing import CacheKeys

SUCCEEDED = "SUCCEEDED"


def new_record(
    key: str,
    scope: str,
    app_handle: str,
    result: Mapping[str, Any],
    ttl: float,
    airflow: Mapping[str, Any],
    keys: CacheKeys,
    read_within: ReadScope | None = None,
) -> dict[str, Any]:
    """The signed record of a run that SUCCEEDED: its result, when it expires, what its outputs hold
    now (a fingerprint per artifact path; None for one this process cannot read, not checked later).

    ``read_within``: where the outputs may be read (the task's ``fingerprints.read_scope``; the job
    chose these paths, so a path outside it is not read, not even to be hashed into the record)."""
    from torchx_airflow.apps import json_safe
    from torchx_airflow.policies.cache.fingerprints import FingerprintError, fingerprint

    outputs: dict[str, Any] = {}
    for artifact in (result.get("artifacts") or {}).values():
        path = str(artifact.get("path") or "")
        if path:
            try:
                outputs[path] = fingerprint(path, read_within)
            except FingerprintError:
                outputs[path] = None
    now = time.time()
    # the directories the outputs were read under: signed, so a later task of the key (whose own
    # arguments may name another run's directory) checks them there and nowhere else
    roots = list(read_within.local_roots or ()) if read_within is not None else []
    record = {
        "version": KEY_VERSION,
        "key": key,
        "scope": scope,
        "app_handle": app_handle,
        "state": SUCCEEDED,
        "result": json_safe(dict(result)),
        "created": now,
        "expires": now + ttl,
        "outputs": outputs,
        "read_roots": roots,
        "airflow": json_safe(dict(airflow)),
    }
    record[SIGNATURE_FIELD] = keys.sign(record)
    return record


class Forged(Exception):  # noqa: N818 - a reason, not an error
    """A record the launcher could not have written as it is: a miss with a warning."""


def _number(record: Mapping[str, Any], name: str) -> float:
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Forged(f"its {name!r} is not a finite number ({value!r})")
    return float(value)


def _check_trusted(record: Any, key: str, scope: str, keys: CacheKeys) -> None:
    """Raise ``Forged`` unless ``record`` is signed under the deployment's keys and consistent."""
    if not isinstance(record, dict):
        raise Forged("it is not a JSON object")
    fields = {k: v for k, v in record.items() if k != SIGNATURE_FIELD}
    if SIGNATURE_FIELD not in record:
        raise Forged("it is unsigned")
    if not keys.verify(fields, record[SIGNATURE_FIELD]):
        raise Forged("its signature does not verify under this deployment's cache key")
    # signed, so written by a launcher of this deployment: still, it must be this key's, this scope's
    if record.get("version") != KEY_VERSION or record.get("key") != key:
        raise Forged("it is the record of another key")
    if record.get("scope") != scope:
        raise Forged(f"it belongs to the scope {record.get('scope')!r}, not {scope!r}")
    handle, result = record.get("app_handle"), record.get("result")
    if record.get("state") != SUCCEEDED or not isinstance(handle, str) or not isinstance(result, dict):
        raise Forged("it names no run that SUCCEEDED")
    if result.get("app_handle", handle) != handle or not isinstance(record.get("outputs") or {}, dict):
        raise Forged("its result is not that of the run it names")
    roots = record.get("read_roots", [])
    if not isinstance(roots, list) or not all(isinstance(r, str) and r.startswith("/") for r in roots):
        raise Forged("its read roots are not a list of absolute paths")
    _number(record, "created"), _number(record, "expires")


def _output_scope(record: Mapping[str, Any], read_within: ReadScope | None) -> ReadScope | None:
    """Where a record's outputs may be read: the task's own scope, plus the directories the task
    that recorded them read them under (signed in the record)."""
    if read_within is None or read_within.local_roots is None:
        return read_within
    roots = dict.fromkeys([*read_within.local_roots, *record.get("read_roots", [])])
    return dataclasses.replace(read_within, local_roots=tuple(roots))


def usable(
    record: Any,
    key: str,
    scope: str,
    ttl: float,
    keys: CacheKeys,
    now: float | None = None,
    read_within: ReadScope | None = None,
) -> tuple[str, bool] | None:
    """Why ``record`` cannot be used for ``key`` in ``scope``, and whether that is suspicious (the
    launcher could not have written it so), or None when it is usable. Its outputs are read only
    within ``read_within`` (the task's read scope) and the roots they were recorded under: one
    elsewhere is gone, a miss."""
    from torchx_airflow.policies.cache.fingerprints import FingerprintError, fingerprint

    try:
        _check_trusted(record, key, scope, keys)
    except Forged as e:
        return str(e), True
    until = min(float(record["expires"]), float(record["created"]) + ttl)  # the reader's TTL too
    if until <= (time.time() if now is None else now):
        return "expired", False
    within = _output_scope(record, read_within)
    for path, held in (record.get("outputs") or {}).items():
        if held is None:
            continue
        try:
            now_holds = fingerprint(path, within)
        except FingerprintError as e:
            return f"its output {path!r} is gone ({e})", False
        if now_holds != held:
            return f"its output {path!r} changed since", False
    return None


def find_record(
    stores: Sequence[ProviderStore],
    key: str,
    scope: str,
    ttl: float,
    keys: CacheKeys,
    task_log: Any,
    read_within: ReadScope | None = None,
) -> dict[str, Any] | None:
    """The first usable record of ``key`` in ``stores`` (in order), its outputs read within
    ``read_within``. A record skipped is logged once (a warning when the launcher could not have
    written it); a store that cannot be read is a warning and the next store is asked."""
    for store in stores:
        try:
            candidates = store.cache_records.candidates(key)
        except Exception as e:  # a malformed record or an unreadable store never stops the lookup
            task_log.warning("Cache record %s in %r not read: %s: %s", key, store, type(e).__name__, e)
            continue
        for record in candidates:  # newest first: a newer record someone else wrote never hides ours
            why = usable(record, key, scope, ttl, keys, read_within=read_within)
            if why is None:
                return record
            _skipped(key, store, why, task_log)
    return None


def _skipped(key: str, store: ProviderStore, why: tuple[str, bool], task_log: Any) -> None:
    reason, suspicious = why
    if suspicious:
        task_log.warning(
            "Cache record %s in %r ignored: %s. Only the launcher of this deployment signs records; this "
            "one may have been written by a job or anyone with the store's credentials.",
            key,
            store,
            reason,
        )
    else:
        task_log.info("Cache record %s in %r not used: %s", key, store, reason)


def write_record(stores: Sequence[ProviderStore], key: str, record: Mapping[str, Any], task_log: Any) -> int:
    """Write ``record`` to every store; a store that fails is a warning. Returns how many stores
    have it."""
    from torchx_airflow.retry import tracker_retrying

    written = 0
    for store in stores:
        try:
            tracker_retrying(f"Writing cache record {key} to {store!r}")(
                lambda s=store: s.cache_records.put(key, record)
            )
            written += 1
        except Exception as e:
            task_log.warning("Could not write cache record %s to %r: %s: %s", key, store, type(e).__name__, e)
    return written
