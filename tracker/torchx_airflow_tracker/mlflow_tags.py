"""How the MLflow store keeps JSON payloads in run tags: split into part tags past MLflow's limit on
a tag value, written in as few ``log_batch`` calls as MLflow accepts, read back joined.

Shared by the store (``mlflow_store``) and its cache records (``cache_records``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

PART_PREFIX = "torchx.part."
PARTS_FIELD = "torchx.parts"
MAX_TAG_VALUE = 8000  # MLflow's limit on a tag value
MAX_SPLIT_VALUE = 8_000_000  # larger values belong in a file, recorded with add_artifact
BATCH = 100  # MLflow accepts at most 100 tags (and 100 params) per log_batch call
MAX_BATCH_BYTES = 600_000  # MLflow refuses log_batch bodies over 1 MB


class ValueTooLargeError(ValueError):
    """A metadata value, artifact or source too large to keep in MLflow tags even when split."""


def encode(tag_key: str, payload: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """``(parts, tags)`` that hold ``payload`` under ``tag_key``, whatever its size.

    JSON that fits one tag value is the tag itself (no parts). Longer JSON is split into part tags
    named by its digest (immutable, so a reader never mixes two writes) and ``tag_key`` holds a
    pointer to them: ``{"torchx.parts": <digest>, "count": <n>}``. Write the parts first.
    """
    text = json.dumps(payload, default=str)  # ensure_ascii: characters == bytes on the wire
    if len(text) <= MAX_TAG_VALUE:
        return {}, {tag_key: text}
    if len(text) > MAX_SPLIT_VALUE:
        raise ValueTooLargeError(
            f"{tag_key!r} is {len(text)} characters of JSON, over the {MAX_SPLIT_VALUE} this store keeps "
            "in MLflow tags. Write the value to a file and record its path with add_artifact instead."
        )
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    parts = {
        f"{PART_PREFIX}{digest}.{i}": text[start : start + MAX_TAG_VALUE]
        for i, start in enumerate(range(0, len(text), MAX_TAG_VALUE))
    }
    return parts, {tag_key: json.dumps({PARTS_FIELD: digest, "count": len(parts)})}


def _encode_all(entries: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    """``(parts, tags)`` of several payloads; ``ValueTooLargeError`` before anything is written."""
    parts: dict[str, str] = {}
    tags: dict[str, str] = {}
    for tag_key, payload in entries.items():
        entry_parts, entry_tags = encode(tag_key, payload)
        parts.update(entry_parts)
        tags.update(entry_tags)
    return parts, tags


def _batches(tags: Mapping[str, str]) -> Iterator[list[tuple[str, str]]]:
    """Tags in groups MLflow accepts in one ``log_batch``: at most 100, and well under its 1 MB body."""
    batch: list[tuple[str, str]] = []
    size = 0
    for key, value in tags.items():
        item_size = len(key) + len(json.dumps(value))  # as escaped in the request's JSON
        if batch and (len(batch) == BATCH or size + item_size > MAX_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append((key, value))
        size += item_size
    if batch:
        yield batch


def log_tags(client: MlflowClient, mlflow_id: str, tags: Mapping[str, str]) -> None:
    """Set ``tags`` on an MLflow run in as few ``log_batch`` calls as MLflow accepts."""
    from mlflow.entities import RunTag

    for batch in _batches(tags):
        client.log_batch(mlflow_id, tags=[RunTag(k, v) for k, v in batch])


def decode(value: str, all_tags: Mapping[str, str]) -> Any:
    """The payload a tag holds, joined from its part tags when it was split."""
    entry = json.loads(value)
    if isinstance(entry, dict) and PARTS_FIELD in entry:
        digest, count = entry[PARTS_FIELD], int(entry["count"])
        entry = json.loads("".join(all_tags[f"{PART_PREFIX}{digest}.{i}"] for i in range(count)))
    return entry


def quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
