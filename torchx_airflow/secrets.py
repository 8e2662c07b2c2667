"""Keeping secrets out of task logs, dry-run output, rendered fields and XCom.

Airflow's secrets masker redacts every value registered with ``mask_secret`` wherever Airflow
prints it. This module registers the values the provider knows to be secret (passwords from
connections, env values whose names look sensitive, such as ``*_TOKEN`` or ``*_PASSWORD``) and
redacts text that the provider builds itself, such as the scheduler's request.

Only the Task SDK's public ``airflow.sdk.log`` is used (the path apache-airflow-providers-common-compat
also prefers): which names are sensitive is asked of ``redact`` itself rather than of the masker's
private module, so ``[core] sensitive_var_conn_names`` applies as it does everywhere in Airflow.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, quote_plus, unquote

from airflow.sdk.log import mask_secret, redact

if TYPE_CHECKING:
    from torchx.specs import AppDef

__all__ = [
    "SECRET_OPTION_KEYS",
    "mask_secret",
    "mask_sensitive_env",
    "option_secrets",
    "redact_text",
    "register_secret",
    "should_hide_value_for_key",
    "strip_userinfo",
    "uri_secrets",
]

#: ``storage_options`` keys whose values are credentials although Airflow's sensitive-name list
#: (``password``, ``secret``, ``token``, ``api_key``, ``private_key``...) does not hide them all.
#: Matched on the key's lower-case name at any depth of the options (``client_kwargs.credential``).
SECRET_OPTION_KEYS: dict[str, str] = {
    "account_key": "adlfs (abfs/az): the storage account's shared key",
    "connection_string": "adlfs: holds AccountKey=... or SharedAccessSignature=...",
    "sas_token": "adlfs: a shared access signature grants access by itself",
    "credential": "adlfs: an account key, SAS or credential object given as a string",
    "client_secret": "adlfs / Azure AD service principal secret",
    "key": "s3fs: the AWS access key id (half of the key pair; the pair is what grants access)",
    "secret": "s3fs: the AWS secret access key",
    "token": "s3fs: a session token; gcsfs: a token dict or JSON text (see _gcs_token_is_reference)",
    "session_token": "botocore-style session token in client_kwargs",
    "aws_access_key_id": "botocore client_kwargs: the access key id",
    "aws_secret_access_key": "botocore client_kwargs: the secret access key",
    "aws_session_token": "botocore client_kwargs: the session token",
    "password": "ftp/sftp/smb/webdav and paramiko connect options",
    "passphrase": "sshfs / paramiko: unlocks a private key",
    "pkey": "paramiko (sftp): a private key given inline",
    "private_key": "sshfs: a private key given inline",
    "client_key": "webdav / http client certificates given inline",
    "refresh_token": "OAuth-based filesystems (gdrive, dropbox, onedrive)",
    "access_token": "OAuth-based filesystems",
}
# gcsfs's ``token`` may also name where credentials are, which is not itself a secret
_GCS_TOKEN_METHODS = frozenset({"google_default", "cache", "anon", "browser", "cloud"})
# shorter base64 pieces of a secret would mask unrelated text too
_MIN_ENCODED = 6
# scheme://user:password@ in any text: the user info of a URL
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]*@)")


def should_hide_value_for_key(name: str) -> bool:
    """Whether Airflow hides a value stored under ``name`` (``API_KEY``, ``*_SECRET``, ``password``...).

    Airflow's function of that name lives in a private module; this one asks the public ``redact``.

    >>> should_hide_value_for_key("MLFLOW_TRACKING_PASSWORD"), should_hide_value_for_key("LR")
    (True, False)
    """
    probe = uuid.uuid4().hex  # matches no registered secret: only the name can make redact hide it
    return redact(probe, name) != probe


def strip_userinfo(text: str) -> str:
    """``text`` with the user info of every URL in it removed: what is shown to people (links, XCom,
    OpenLineage namespaces, reprs) never carries a login or password.

    >>> strip_userinfo("https://bob:hunter2@host/x and sftp://u@h:22/p")
    'https://host/x and sftp://h:22/p'
    """
    return _USERINFO.sub(r"\g<scheme>", text)


def uri_secrets(text: str) -> list[str]:
    """The passwords in the user info of every URL in ``text``, as written and percent-decoded.

    >>> uri_secrets("postgresql://mlflow:p%40ss@db/mlflow")
    ['p%40ss', 'p@ss']
    """
    found: list[str] = []
    for match in _USERINFO.finditer(text):
        _, sep, password = match.group("userinfo")[:-1].partition(":")
        if sep and password:
            found += [password, unquote(password)]
    return list(dict.fromkeys(found))


def encoded_forms(secret: str) -> list[str]:
    """``secret`` and the forms it takes inside URLs, query strings and base64 text: what a masker
    must know to hide it wherever it is written.

    Inside a longer base64 text the secret's bytes start at one of three offsets within a 3-byte
    group, and the characters at its edges also depend on the bytes around it: for each offset the
    characters that depend on the secret's bytes alone are registered (standard and URL-safe
    alphabets), so that what is left around a mask cannot be decoded back into the secret.
    """
    forms = {secret, quote(secret, safe=""), quote_plus(secret), quote(secret)}
    data = secret.encode()
    for offset in range(3):
        padded = b"\0" * offset + data + b"\0\0"
        start = -(-8 * offset // 6)  # the first character whose 6 bits all come from the secret
        end = 8 * (offset + len(data)) // 6
        for encoder in (base64.b64encode, base64.urlsafe_b64encode):
            inner = encoder(padded).decode()[start:end]
            if len(inner) >= _MIN_ENCODED:
                forms.add(inner)
    return sorted(forms, key=len, reverse=True)


def register_secret(secret: str, name: str | None = None) -> None:
    """Register ``secret`` and its URL-encoded and base64 forms with Airflow's masker."""
    if not secret:
        return
    for form in encoded_forms(secret):
        mask_secret(form, name) if name else mask_secret(form)


def _gcs_token_is_reference(value: str) -> bool:
    """gcsfs's ``token`` naming a method or a credentials file, not holding credentials itself."""
    return value in _GCS_TOKEN_METHODS or (
        not value.lstrip().startswith("{") and (value.startswith(("/", "~")) or value.endswith(".json"))
    )


def _is_secret_option(key: str, value: str) -> bool:
    name = key.lower()
    if name == "token" and _gcs_token_is_reference(value):
        return False
    return name in SECRET_OPTION_KEYS or should_hide_value_for_key(key)


def option_secrets(options: Mapping[str, Any]) -> list[str]:
    """The secrets in ``storage_options``: values under ``SECRET_OPTION_KEYS`` or names Airflow hides
    (every string inside such a value when it is a mapping, e.g. a gcsfs token dict), and passwords in
    URL user info anywhere (``endpoint_url``)."""
    found: list[str] = []
    for key, value in options.items():
        if isinstance(value, Mapping):
            if _is_secret_option(str(key), ""):
                found += [str(v) for v in _leaves(value) if str(v)]
            else:
                found += option_secrets(value)
        elif isinstance(value, str) and value:
            if _is_secret_option(str(key), value):
                found.append(value)
            found += uri_secrets(value)
    return list(dict.fromkeys(found))


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    elif value is not None and not isinstance(value, bool):
        yield value


def mask_sensitive_env(env: dict[str, str]) -> None:
    """Register the values of env variables whose names look sensitive (``API_KEY``, ``*_SECRET``...),
    and every URL password inside any env value (``DATABASE_URL=postgresql://u:pw@db/x``)."""
    for name, value in env.items():
        if not value:
            continue
        if should_hide_value_for_key(name):
            register_secret(str(value), name)
        for secret in uri_secrets(str(value)):
            register_secret(secret)


def _role_envs(app: AppDef | None) -> Iterable[dict[str, str]]:
    return [role.env for role in app.roles] if app is not None else []


def redact_text(text: str, app: AppDef | None = None) -> str:
    """``text`` with every registered secret, and every sensitive env value of ``app``, replaced by ***."""
    for env in _role_envs(app):
        mask_sensitive_env(env)
    redacted: Any = redact(text)
    return str(redacted)
