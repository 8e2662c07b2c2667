"""Parsing connection extras and options: a JSON-object extra, a boolean extra, a list setting
(``settings.conn_fields`` checks every extra against its form schema first, unknown keys included)."""

from __future__ import annotations

import json
from typing import Any

from torchx_airflow.exceptions import TorchXConnectionError


def split_list(value: Any, what: str, example: str, error: type[Exception] = TorchXConnectionError) -> Any:
    """A list setting as written: a JSON list's text parsed, a comma-separated string split (parts
    stripped, empty ones dropped); any other value as it is, for the caller to check. ``what`` names
    the setting in the error (``Connection 'c': extra 'trackers'``), ``example`` shows the fix."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise error(
                f"{what} is not a valid JSON list ({e}): {value!r}. Write it as e.g. {example}."
            ) from e
    if isinstance(value, str):
        return [part for part in (p.strip() for p in value.split(",")) if part]
    return value


def parse_bool(conn_id: str, key: str, value: Any) -> bool:
    """A boolean extra: JSON true/false, or the text "true"/"false" the connection form may store."""
    if value is None:
        return False
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: extra {key!r} must be true or false, got {value!r}. "
            f'Write it as JSON, e.g. {{"{key}": true}}.'
        )
    return value


def parse_json_object(
    conn_id: str, key: str, value: Any, example: str = '{"partition": "gpu"}', show_value: bool = True
) -> dict[str, Any]:
    """A connection extra that holds a JSON object (a dict, or its JSON text); ``{}`` when empty.

    The error names the connection, the key and an example; ``show_value=False`` keeps the value
    (which may hold credentials) out of it.
    """
    if value is None or value == "":
        return {}
    shown = f": {value!r}" if show_value else ""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            reason = f" ({e})" if show_value else ""  # the decoder's message quotes the text
            raise TorchXConnectionError(
                f"Connection {conn_id!r}: extra {key!r} is not valid JSON{reason}{shown}. "
                f"Write it as a JSON object, e.g. {example}."
            ) from (e if show_value else None)  # the decoder's error holds the text it read
    if not isinstance(value, dict):
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: extra {key!r} must be a JSON object, got a {type(value).__name__}"
            f"{shown}. Write it as e.g. {example}."
        )
    return value
