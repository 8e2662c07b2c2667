"""The fields of tracker connections, checked: what a ``torchx_fsspec`` or ``mlflow`` connection may say.

Each function takes the raw field values and returns them ready to use, or raises
``TorchXConnectionError`` naming the connection, the field, the value and the fix. No message shows
a password or a ``storage_options`` value. Importing this module imports neither fsspec nor mlflow.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import MutableMapping
from typing import Any

from torchx_airflow.exceptions import TorchXConnectionError

# How a connection's login/password reach fsspec, per protocol.
FSSPEC_CREDENTIALS = {
    "s3": ("key", "secret"),
    "s3a": ("key", "secret"),
    "abfs": ("account_name", "account_key"),
    "abfss": ("account_name", "account_key"),
    "az": ("account_name", "account_key"),
    "ftp": ("username", "password"),
    "sftp": ("username", "password"),
    "ssh": ("username", "password"),
    "smb": ("username", "password"),
    "webdav": ("username", "password"),
}
# Tracking URI schemes MLflow itself takes (a database URI may name its driver: postgresql+psycopg2)
MLFLOW_SCHEMES = frozenset(
    {"http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks", "databricks-uc"}
)
_HOST_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(:\d{1,5})?$")


def protocol_of(root: str) -> str:
    """The protocol of an fsspec URL (the outermost of a chained one); ``file`` for a path."""
    first = root.split("::", 1)[0]
    if "://" in first:
        return first.split("://", 1)[0]
    return first if "::" in root else "file"


def fsspec_root(conn_id: str, root: Any, example: str) -> str:
    """The ``root`` extra: an absolute path or a URL of a protocol fsspec knows."""
    import fsspec

    if not isinstance(root, str) or not root.strip():
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: extra 'root' must name where runs are stored (a path, "
            f"file://..., s3://bucket/prefix, memory://...), got {root!r}. E.g. {example}"
        )
    root = root.strip()
    if "://" not in root and "::" not in root and not root.startswith("/"):
        # the worker, the triggerer and the job each run in a directory of their own
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: extra 'root' {root!r} is a relative path, which each process "
            "(worker, job) would resolve in its own directory. Give an absolute path "
            "(/data/torchx-runs) or a URL (s3://bucket/prefix)."
        )
    protocol = protocol_of(root)
    known = fsspec.available_protocols()
    if protocol not in known:
        close = difflib.get_close_matches(protocol, known, n=1, cutoff=0.5)  # names are short
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: extra 'root' {root!r} uses protocol {protocol!r}, which fsspec "
            f"does not know.{hint} Use a path or a URL such as file://, s3://, gs://, abfs://, memory://."
        )
    return root


def add_fsspec_credentials(
    conn_id: str, root: str, login: str | None, password: str | None, options: MutableMapping[str, Any]
) -> None:
    """Put login/password into ``options`` under the names the root's protocol uses for them."""
    if not (login or password):
        return
    protocol = protocol_of(root)
    names = FSSPEC_CREDENTIALS.get(protocol)
    if names is None:
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: root {root!r} uses protocol {protocol!r}, which takes no "
            "login/password. Clear them, or pass that filesystem's credentials in extra 'storage_options'."
        )
    if names[0] == "key" and bool(login) != bool(password):
        given, missing = ("login", "password") if login else ("password", "login")
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: root {root!r} takes an access key (login) and a secret key "
            f"(password) together; the {given} is set and the {missing} is empty. Set the {missing} "
            "too, or clear both to use the environment's credentials."
        )
    for field_name, option, value in (("login", names[0], login), ("password", names[1], password)):
        if value and option in options:
            raise TorchXConnectionError(
                f"Connection {conn_id!r}: the {field_name} and extra 'storage_options' key {option!r} "
                f"both set the store's {option}. Keep one of them."
            )
        if value:
            options[option] = value


def mlflow_tracking_uri(conn_id: str, host: str | None, port: int | None, example: str) -> str:
    """The tracking URI from host (and port when host has no scheme)."""
    host = (host or "").strip()
    if not host:
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: host must be the MLflow tracking URI (http://mlflow:5000 or "
            f"sqlite:////path/mlflow.db), got an empty host. E.g. {example}"
        )
    if port is not None and not 0 < port < 65536:
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: port {port!r} is not a TCP port. Give one from 1 to 65535 "
            "(MLflow's default is 5000), or clear it."
        )
    if "://" not in host:
        return _host_and_port(conn_id, host, port)
    scheme = host.split("://", 1)[0].lower()
    if scheme.split("+", 1)[0] not in MLFLOW_SCHEMES and not _mlflow_plugin_scheme(scheme):
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: host {host!r} has scheme {scheme!r}, which MLflow does not take "
            f"as a tracking URI. Use one of {', '.join(sorted(MLFLOW_SCHEMES))}, e.g. http://mlflow:5000."
        )
    if port is not None and _uri_port(host) != port:
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: host {host!r} is a full URI and the port field is {port!r}, which "
            "it does not use. Put the port in the URI and clear the port field."
        )
    return host


def _host_and_port(conn_id: str, host: str, port: int | None) -> str:
    if not _HOST_RE.match(host):
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: host {host!r} is neither a tracking URI with a scheme nor a host "
            "name. Write it as e.g. http://mlflow:5000 or sqlite:////data/mlflow.db."
        )
    if port is not None and ":" in host.rsplit("]", 1)[-1]:
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: host {host!r} has a port and the port field is {port!r}. "
            "Keep one of them."
        )
    return f"http://{host}:{port}" if port else f"http://{host}"


def check_mlflow_credentials(conn_id: str, uri: str, login: str | None, password: str | None) -> None:
    """Login/password are HTTP basic auth: both are needed, and only an http(s) server takes them."""
    if not (login or password):
        return
    if not uri.startswith(("http://", "https://")):
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: login/password are HTTP basic auth for an MLflow server, but "
            f"host {uri!r} is not an http(s) URI. Clear them, or point host at the server."
        )
    if bool(login) != bool(password):
        given, missing = ("login", "password") if login else ("password", "login")
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: MLflow basic auth needs a login and a password; the {given} is "
            f"set and the {missing} is empty. Set the {missing} too, or clear both."
        )


def _mlflow_plugin_scheme(scheme: str) -> bool:
    """Whether an installed MLflow plugin registers ``scheme`` as a tracking store."""
    from importlib.metadata import entry_points

    return any(ep.name == scheme for ep in entry_points(group="mlflow.tracking_store"))


def _uri_port(uri: str) -> int | None:
    from urllib.parse import urlsplit

    try:
        return urlsplit(uri).port
    except ValueError:
        return None
