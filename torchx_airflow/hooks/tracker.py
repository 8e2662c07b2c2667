"""Tracker connections: the hooks of the two tracker connection types.

``torchx_fsspec`` (default id ``torchx_fsspec_default``)
    extra ``root``: any fsspec URL (a path, ``file://``, ``s3://bucket/prefix``, ``memory://``);
    extra ``storage_options``: JSON object passed to fsspec (``endpoint_url``, ``client_kwargs``...);
    login/password: the store's key and secret where the protocol has them (``s3``: key/secret,
    ``abfs``/``az``: account_name/account_key, ``ftp``/``sftp``/``smb``/``webdav``: username/password).

``mlflow`` (default id ``mlflow_default``)
    host: the tracking URI (``http://mlflow:5000`` or ``sqlite:////data/mlflow.db``; a host without a
    scheme gets ``http://`` and the port field); login/password: basic auth; extra ``experiment``
    (default ``torchx``).

Each hook resolves its connection into a ``torchx_airflow.lineage.stores.TrackerBackend``;
``trackers_for(conn_ids)`` resolves a task's connections into its ``TrackerSet``, their secrets
registered with Airflow's masker. Importing this module imports neither mlflow nor s3fs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from torchx_airflow_tracker.compat import cached_property

from torchx_airflow.exceptions import TorchXConnectionError
from torchx_airflow.lineage.stores import (
    DEFAULT_EXPERIMENT,
    ENV_MLFLOW_PASSWORD,
    ENV_MLFLOW_USERNAME,
    TrackerBackend,
    TrackerSet,
)
from torchx_airflow.secrets import option_secrets, register_secret, strip_userinfo, uri_secrets
from torchx_airflow.settings.conn_fields import validate_extra
from torchx_airflow.settings.extras import parse_json_object
from torchx_airflow.settings.tracker_fields import (
    add_fsspec_credentials,
    check_mlflow_credentials,
    fsspec_root,
    mlflow_tracking_uri,
)

if TYPE_CHECKING:
    from airflow.sdk import Connection

FSSPEC_CONN_TYPE = "torchx_fsspec"
MLFLOW_CONN_TYPE = "mlflow"


def _probe_failure(conn_id: str, what: str, error: Exception) -> tuple[bool, str]:
    return False, f"Connection {conn_id!r}: {what} failed: {type(error).__name__}: {error}"


class _TrackerHook(BaseHook):
    """Shared by the tracker connection hooks: fetch and describe the connection."""

    conn_name_attr = "conn_id"
    default_conn_name = ""
    conn_type = ""

    def __init__(self, conn_id: str | None = None) -> None:
        super().__init__()
        self.conn_id = conn_id or self.default_conn_name

    @cached_property
    def connection(self) -> Connection:
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            return self.get_connection(self.conn_id)
        except AirflowNotFoundException as e:
            raise TorchXConnectionError(
                f"Tracker connection {self.conn_id!r} is not defined. Create a connection of type "
                f"{self.conn_type or f'{FSSPEC_CONN_TYPE!r} or {MLFLOW_CONN_TYPE!r}'} with that id, "
                f"e.g. {self.example_env()}"
            ) from e

    @classmethod
    def example_env(cls) -> str:
        return f"{TorchXFsspecHook.example_env()} or {MlflowTrackerHook.example_env()}"

    def backend(self) -> TrackerBackend:
        raise NotImplementedError

    def test_connection(self) -> tuple[bool, str]:
        raise NotImplementedError


class TorchXFsspecHook(_TrackerHook):
    """A tracker store on any fsspec filesystem, from a ``torchx_fsspec`` connection."""

    conn_name_attr = "torchx_fsspec_conn_id"
    default_conn_name = "torchx_fsspec_default"
    conn_type = FSSPEC_CONN_TYPE
    hook_name = "TorchX tracker store (fsspec)"

    def __init__(self, torchx_fsspec_conn_id: str = default_conn_name) -> None:
        # Connection.get_hook() (the UI's, REST API's and CLI's "Test") passes the id by this name
        super().__init__(torchx_fsspec_conn_id)

    @classmethod
    def example_env(cls) -> str:
        return (
            f'AIRFLOW_CONN_{cls.default_conn_name.upper()}=\'{{"conn_type": "{FSSPEC_CONN_TYPE}", '
            '"extra": {"root": "s3://bucket/torchx-runs"}}\''
        )

    def backend(self) -> TrackerBackend:
        conn = self.connection
        extras = validate_extra(self.conn_id, self.conn_type, conn.extra_dejson)
        root = fsspec_root(self.conn_id, extras.get("root"), self.example_env())
        options = parse_json_object(
            self.conn_id,
            "storage_options",
            extras.get("storage_options"),
            '{"endpoint_url": "http://minio:9000"}',
            show_value=False,  # it may hold credentials
        )
        add_fsspec_credentials(self.conn_id, root, conn.login, conn.password, options)
        # the root's URL user info (sftp://user:pw@host), storage options on Airflow's or our list
        # (secrets.SECRET_OPTION_KEYS), and the password field, which is one of those options now
        secrets = [*uri_secrets(root), *option_secrets(options)]
        if conn.password:
            secrets.append(conn.password)
        config: dict[str, Any] = {"root": root}
        if options:
            config["storage_options"] = options
        return TrackerBackend(self.conn_id, "fsspec", config, secrets=tuple(dict.fromkeys(secrets)))

    def test_connection(self) -> tuple[bool, str]:
        """Write a probe file under the root, read it back and delete it; report the step that failed."""
        try:
            backend = self.backend()
        except TorchXConnectionError as e:
            return False, str(e)
        try:
            import fsspec

            root = backend.config["root"]
            fs, path = fsspec.core.url_to_fs(root, **backend.config.get("storage_options", {}))
        except Exception as e:
            return _probe_failure(self.conn_id, "reading the connection", e)
        probe_dir = f"{path.rstrip('/')}/.torchx-airflow-probe"
        probe = f"{probe_dir}/{uuid.uuid4().hex}"
        token = uuid.uuid4().hex
        try:
            fs.makedirs(probe_dir, exist_ok=True)
            fs.pipe_file(probe, token.encode())
        except Exception as e:
            return _probe_failure(self.conn_id, f"writing {probe!r}", e)
        try:
            read = fs.cat_file(probe).decode()
        except Exception as e:
            return _probe_failure(self.conn_id, f"reading back {probe!r}", e)
        finally:
            try:
                fs.rm(probe)
            except Exception:  # noqa: S110 - a probe file left behind is harmless
                pass
        if read != token:
            return False, f"Connection {self.conn_id!r}: read back {read!r} from {probe!r}, wrote {token!r}"
        return True, f"Wrote, read back and deleted a probe file under {strip_userinfo(root)}"


class MlflowTrackerHook(_TrackerHook):
    """An MLflow tracking server (or store) for TorchX runs, from an ``mlflow`` connection."""

    conn_name_attr = "mlflow_conn_id"
    default_conn_name = "mlflow_default"
    conn_type = MLFLOW_CONN_TYPE
    hook_name = "MLflow"

    def __init__(self, mlflow_conn_id: str = default_conn_name) -> None:
        # Connection.get_hook() (the UI's, REST API's and CLI's "Test") passes the id by this name
        super().__init__(mlflow_conn_id)

    @classmethod
    def example_env(cls) -> str:
        return (
            f'AIRFLOW_CONN_{cls.default_conn_name.upper()}=\'{{"conn_type": "{MLFLOW_CONN_TYPE}", '
            '"host": "http://mlflow:5000"}\''
        )

    def tracking_uri(self) -> str:
        """The tracking URI from host (and port when host has no scheme)."""
        conn = self.connection
        return mlflow_tracking_uri(self.conn_id, conn.host, conn.port, self.example_env())

    def backend(self) -> TrackerBackend:
        conn = self.connection
        extras = validate_extra(self.conn_id, self.conn_type, conn.extra_dejson)
        uri = self.tracking_uri()
        experiment = extras.get("experiment")
        if experiment is not None and not isinstance(experiment, str):
            raise TorchXConnectionError(
                f"Connection {self.conn_id!r}: extra 'experiment' must be an experiment name, "
                f'got {experiment!r}. Write it as a JSON string, e.g. {{"experiment": "resnet"}}.'
            )
        check_mlflow_credentials(self.conn_id, uri, conn.login, conn.password)
        job_env: dict[str, str] = {}
        if conn.login:
            job_env[ENV_MLFLOW_USERNAME] = conn.login
        if conn.password:
            job_env[ENV_MLFLOW_PASSWORD] = conn.password
        return TrackerBackend(
            self.conn_id,
            "mlflow",
            {"tracking_uri": uri, "experiment": (experiment or "").strip() or DEFAULT_EXPERIMENT},
            job_env=job_env,
            # a database URI (postgresql://user:pw@db/mlflow) can carry its password only there
            secrets=tuple(dict.fromkeys([*uri_secrets(uri), *([conn.password] if conn.password else [])])),
        )

    def test_connection(self) -> tuple[bool, str]:
        """Write a probe tag on the experiment and read it back; report the step that failed."""
        try:
            backend = self.backend()
        except TorchXConnectionError as e:
            return False, str(e)
        try:
            store = backend.open_store()
            # an MLflow backend opens an MlflowStore (open_store is typed for every kind)
            client = store.client  # type: ignore[attr-defined]
            experiment_id = store.experiment_id  # type: ignore[attr-defined]
        except Exception as e:
            return _probe_failure(self.conn_id, "opening the experiment", e)
        token = uuid.uuid4().hex
        try:
            client.set_experiment_tag(experiment_id, "torchx_airflow.probe", token)
        except Exception as e:
            return _probe_failure(self.conn_id, "writing a probe tag", e)
        try:
            read = client.get_experiment(experiment_id).tags.get("torchx_airflow.probe")
        except Exception as e:
            return _probe_failure(self.conn_id, "reading the probe tag back", e)
        if read != token:
            return False, f"Connection {self.conn_id!r}: probe tag read back as {read!r}, wrote {token!r}"
        return (
            True,
            f"Wrote and read back a probe tag on experiment {backend.config['experiment']!r} "
            f"at {strip_userinfo(backend.config['tracking_uri'])}",
        )


_HOOKS: dict[str, type[_TrackerHook]] = {
    FSSPEC_CONN_TYPE: TorchXFsspecHook,
    MLFLOW_CONN_TYPE: MlflowTrackerHook,
}


def tracker_hook(conn_id: str) -> _TrackerHook:
    """The hook for a tracker connection, chosen by its connection type."""
    conn = _TrackerHook(conn_id).connection
    hook_class = _HOOKS.get(conn.conn_type or "")
    if hook_class is None:
        raise TorchXConnectionError(
            f"Connection {conn_id!r} has type {conn.conn_type!r}, which is not a tracker. "
            f"Tracker connections have type {FSSPEC_CONN_TYPE!r} (an fsspec store) or "
            f"{MLFLOW_CONN_TYPE!r} (an MLflow server); "
            "fix the connection or remove it from 'trackers' / tracker_conn_ids."
        )
    hook = hook_class(conn_id)
    hook.__dict__["connection"] = conn
    return hook


def trackers_for(conn_ids: Iterable[str]) -> TrackerSet:
    """Resolve tracker connections into a ``TrackerSet``; their secrets (and the forms they take in
    URLs and base64 text) are masked at once."""
    backends = [tracker_hook(conn_id).backend() for conn_id in conn_ids]
    for backend in backends:
        for secret in backend.secrets:
            register_secret(secret)
    return TrackerSet(backends)
