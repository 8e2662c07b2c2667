"""Inline tracker configuration: the JSON in ``TORCHX_TRACKER_<NAME>_CONFIG``.

The JSON may also come as ``base64:<urlsafe base64 of the JSON>``: some schedulers pass env values
through comma-separated lists (TorchX's Slurm scheduler uses ``srun --export=ALL,K=V,...``), which
would cut a JSON object at its first comma.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any

BASE64_PREFIX = "base64:"


def encode_config(config: Any) -> str:
    """A config as env-safe text: compact JSON, or ``base64:...`` when the JSON holds a comma."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    if "," not in text:
        return text
    return BASE64_PREFIX + base64.urlsafe_b64encode(text.encode()).decode()


class TrackerConfigError(ValueError):
    """A tracker configuration that is missing, not JSON, or has a bad key or value."""


def load_json_text(what: str, text: str, example: str) -> Any:
    """Parse a config's text: JSON, or ``base64:`` of JSON. Errors name ``what`` and an example."""
    if text.startswith(BASE64_PREFIX):
        try:
            text = base64.urlsafe_b64decode(text[len(BASE64_PREFIX) :].encode()).decode()
        except (binascii.Error, UnicodeDecodeError) as e:
            raise TrackerConfigError(
                f"The {what} config starts with {BASE64_PREFIX!r} but is not base64 of JSON ({e}). "
                f"Expected e.g. {example} or its encode_config() form."
            ) from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TrackerConfigError(
            f"The {what} config is not valid JSON ({e}). Expected e.g. {example}."
        ) from e


def parse_config(
    kind: str, config: str | Mapping[str, Any] | None, required: tuple[str, ...], optional: tuple[str, ...]
) -> dict[str, Any]:
    """Parse and check a tracker's inline JSON config.

    >>> parse_config("fsspec", '{"root": "memory://t"}', ("root",), ("storage_options",))
    {'root': 'memory://t'}
    """
    example = json.dumps({key: f"<{key}>" for key in required})
    if config is None or (isinstance(config, str) and not config.strip()):
        raise TrackerConfigError(
            f"The {kind} tracker needs a config: set TORCHX_TRACKER_<NAME>_CONFIG to JSON such as {example}."
        )
    if isinstance(config, str):
        config = load_json_text(f"{kind} tracker", config, example)
    if not isinstance(config, Mapping):
        raise TrackerConfigError(
            f"The {kind} tracker config must be a JSON object such as {example}, got {config!r}."
        )
    unknown = sorted(set(config) - set(required) - set(optional))
    if unknown:
        raise TrackerConfigError(
            f"Unknown key(s) {unknown} in the {kind} tracker config. Allowed: {sorted(required + optional)}."
        )
    missing = [key for key in required if not config.get(key)]
    if missing:
        raise TrackerConfigError(f"The {kind} tracker config is missing {missing}. Expected e.g. {example}.")
    return dict(config)


def is_config_file(config: object) -> bool:
    """Whether a tracker config names a file (TorchX's form) rather than holding JSON (ours)."""
    if not isinstance(config, str):
        return False
    text = config.strip()
    return bool(text) and not text.startswith(("{", "[", BASE64_PREFIX))


def _put_nested(config: dict[str, Any], key: str, value: str, config_file: str) -> None:
    head, dot, rest = key.partition(".")
    if not dot:
        config[key] = value
        return
    if not rest or not head:
        raise TrackerConfigError(
            f"Illegal key {key!r} in the tracker config file {config_file!r}: no empty part around a '.'."
        )
    nested = config.setdefault(head, {})
    if not isinstance(nested, dict):
        raise TrackerConfigError(
            f"Key {key!r} in {config_file!r} nests under {head!r}, which has a value already."
        )
    _put_nested(nested, rest, value, config_file)


def read_torchx_fsspec_config(config_file: str) -> tuple[str, dict[str, Any]]:
    """``(root URL, storage options)`` from a TorchX ``FsspecTracker`` config file.

    The file's format is TorchX's: ``key=value`` lines, ``#`` comments, ``protocol`` and
    ``root_path`` required, every other key (``a.b=v`` nests) passed to the filesystem as a string::

        protocol=s3
        root_path=bucket/tracker
        client_kwargs.endpoint_url=http://127.0.0.1:9000
    """
    import fsspec

    try:
        with fsspec.open(config_file, "rt") as f:
            lines = f.read().splitlines()
    except (FileNotFoundError, IsADirectoryError, ValueError) as e:
        raise TrackerConfigError(
            f"The fsspec tracker config {config_file!r} is neither JSON nor a readable file ({e}). Give "
            'inline JSON such as {"root": "/data/tracker"}, or the path of a TorchX config file with '
            "protocol= and root_path=."
        ) from e
    options: dict[str, Any] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if line.startswith("#") or not (key.strip() and sep and value.strip()):
            continue  # TorchX's reader skips these lines too
        _put_nested(options, key.strip(), value.strip(), config_file)
    missing = [k for k in ("protocol", "root_path") if k not in options]
    if missing:
        raise TrackerConfigError(
            f"Missing {missing} in the tracker config file {config_file!r}: add e.g. protocol=file and "
            "root_path=/data/tracker."
        )
    protocol, root = str(options.pop("protocol")), str(options.pop("root_path"))
    return (root if "://" in root else f"{protocol}://{root}"), options


_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]*@")


def without_userinfo(url: str) -> str:
    """``url`` without its user info (``https://bob:pw@host/x`` -> ``https://host/x``): what a
    ``repr`` shows, since a database or fsspec URL may carry its password there.

    >>> without_userinfo("postgresql://mlflow:pw@db:5432/mlflow")
    'postgresql://db:5432/mlflow'
    """
    return _USERINFO.sub(r"\1", url)
