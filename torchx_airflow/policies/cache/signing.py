"""The deployment's cache key: cache records only the launcher can make, secret digests no one can test.

Every TorchX job receives its tracker stores' credentials, so any job of any DAG tracking to a store
can write a cache record there. A record is therefore used only when it carries an HMAC-SHA256, over
every field of it, under a key no job receives: the *deployment cache key*, read from Airflow's
secrets. ``[torchx] cache_key_secret`` names an Airflow Variable (or, when no Variable has that
name, a Connection whose password holds it) whose value is one key, or a JSON list of keys for a
rotation: the first signs (and keys the secret digests), every one verifies. A key is at least
``MIN_KEY_CHARS`` characters (``python -c "import secrets; print(secrets.token_hex(32))"``).

With no key configured a cached task refuses to run (``TorchXConfigError`` naming the option and
the fix) before anything is submitted: an unsigned cache would hand any job's forgery to the next
task as its result.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchx_airflow.exceptions import TorchXConfigError

OPTION = "cache_key_secret"
MIN_KEY_CHARS = 32
#: The record's field that holds its signature (every other field is signed).
SIGNATURE_FIELD = "signature"
_FIX = (
    'Generate a key (python -c "import secrets; print(secrets.token_hex(32))"), store it in an Airflow '
    "Variable (e.g. AIRFLOW_VAR_TORCHX_CACHE_KEY=<key>, or your secrets backend), and name that Variable "
    "in [torchx] cache_key_secret (e.g. AIRFLOW__TORCHX__CACHE_KEY_SECRET=torchx_cache_key); or set "
    "cache=False."
)


def canonical(fields: Mapping[str, Any]) -> bytes:
    """The bytes a signature covers: the fields' JSON with sorted keys and no whitespace."""
    return json.dumps(dict(fields), sort_keys=True, separators=(",", ":"), default=str).encode("utf-8")


@dataclass(frozen=True)
class CacheKeys:
    """The deployment's cache keys: the first signs and keys digests, every one verifies.

    >>> keys = CacheKeys((b"k" * 32,))
    >>> keys.verify({"a": 1}, keys.sign({"a": 1}))
    True
    """

    keys: tuple[bytes, ...]

    def sign(self, fields: Mapping[str, Any]) -> str:
        """The HMAC-SHA256 of ``fields`` (``canonical``) under the signing key, in hex."""
        return hmac.new(self.keys[0], b"record\0" + canonical(fields), hashlib.sha256).hexdigest()

    def verify(self, fields: Mapping[str, Any], signature: Any) -> bool:
        """Whether ``signature`` is that of ``fields`` under one of the keys (in constant time)."""
        if not isinstance(signature, str):
            return False
        payload = b"record\0" + canonical(fields)
        return any(
            hmac.compare_digest(hmac.new(key, payload, hashlib.sha256).hexdigest(), signature)
            for key in self.keys
        )

    def digest(self, name: str, value: str) -> str:
        """What a secret value adds to a cache key: its HMAC-SHA256 under the signing key, so a
        digest in a task log cannot be tested against guesses without the deployment's key."""
        message = b"secret\0" + name.encode("utf-8") + b"\0" + value.encode("utf-8")
        return hmac.new(self.keys[0], message, hashlib.sha256).hexdigest()


def parse_keys(text: Any, where: str) -> CacheKeys:
    """The keys a secret holds: one key, or a JSON list of keys (the first signs)."""
    value: Any = text.strip() if isinstance(text, str) else text
    if isinstance(value, str) and value.startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
    keys = [value] if isinstance(value, str) else value
    if (
        not isinstance(keys, list)
        or not keys
        or not all(isinstance(k, str) and len(k.strip()) >= MIN_KEY_CHARS for k in keys)
    ):
        # the value is a secret: the message says what is wrong with it, never what it is
        raise TorchXConfigError(
            f"{where} must hold a cache key of at least {MIN_KEY_CHARS} characters, or a JSON list of "
            f"such keys (the first signs, all verify). {_FIX}"
        )
    return CacheKeys(tuple(k.strip().encode("utf-8") for k in keys))


def _secret_text(name: str) -> str | None:
    """The value of the Airflow Variable ``name``, else the password of the Connection ``name``."""
    from airflow.sdk import Connection, Variable

    text = Variable.get(name, default=None)
    if text is not None:
        return str(text)
    try:
        return Connection.get(name).password
    except Exception:  # AirflowNotFoundException (its module moves between Airflow versions)
        return None


def deployment_keys(where: str) -> CacheKeys:
    """The deployment's cache keys (``[torchx] cache_key_secret``), masked in every log; raises
    ``TorchXConfigError`` naming the option and the fix when none is configured."""
    from torchx_airflow.secrets import mask_secret
    from torchx_airflow.settings.options import site_value

    name = site_value(OPTION)
    if not name:
        raise TorchXConfigError(
            f"{where} is cached, but this deployment has no cache key: [torchx] {OPTION} is not set. "
            "Cache records are signed with a key no job receives, so that no job can forge another "
            f"task's result. {_FIX} Nothing was submitted."
        )
    text = _secret_text(name)
    if text is None:
        raise TorchXConfigError(
            f"{where} is cached, but [torchx] {OPTION} names {name!r}, and no Airflow Variable or "
            f"Connection of that id exists. {_FIX} Nothing was submitted."
        )
    keys = parse_keys(text, f"The Airflow Variable or Connection {name!r} ([torchx] {OPTION})")
    for key in keys.keys:
        mask_secret(key.decode("utf-8"))
    return keys
