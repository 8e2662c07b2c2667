"""Tracker connections: where TorchX runs record metadata, artifacts and lineage.

Two connection types, each turned into a ``torchx-airflow-tracker`` backend:

``torchx_fsspec`` (default id ``torchx_fsspec_default``)
    extra ``root``: any fsspec URL (a path, ``file://``, ``s3://bucket/prefix``, ``memory://``);
    extra ``storage_options``: JSON object passed to fsspec (``endpoint_url``, ``client_kwargs``...);
    login/password: the store's key and secret where the protocol has them (``s3``: key/secret,
    ``abfs``/``az``: account_name/account_key, ``ftp``/``sftp``/``smb``/``webdav``: username/password).

``mlflow`` (default id ``mlflow_default``)
    host: the tracking URI (``http://mlflow:5000`` or ``sqlite:////data/mlflow.db``; a host without a
    scheme gets ``http://`` and the port field); login/password: basic auth; extra ``experiment``
    (default ``torchx``).

``TrackerSet.for_conn_ids`` resolves a task's tracker connections into the job environment
(``TORCHX_TRACKERS`` and one ``TORCHX_TRACKER_<NAME>_CONFIG`` per store) and into launcher-side stores
that write lineage and read results. Importing this module imports neither mlflow nor s3fs.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from torchx_airflow.exceptions import TorchXConnectionError
from torchx_airflow.hooks.torchx import check_extra_keys, parse_json_object
from torchx_airflow.hooks.tracker_fields import (
    add_fsspec_credentials,
    check_mlflow_credentials,
    fsspec_root,
    mlflow_tracking_uri,
)
from torchx_airflow.secrets import mask_secret, should_hide_value_for_key

if TYPE_CHECKING:
    from airflow.sdk import Connection
    from torchx.tracker.api import TrackerBase

FSSPEC_CONN_TYPE = "torchx_fsspec"
MLFLOW_CONN_TYPE = "mlflow"
DEFAULT_EXPERIMENT = "torchx"
ENV_TRACKERS = "TORCHX_TRACKERS"
ENV_MLFLOW_URI = "MLFLOW_TRACKING_URI"
ENV_MLFLOW_USERNAME = "MLFLOW_TRACKING_USERNAME"
ENV_MLFLOW_PASSWORD = "MLFLOW_TRACKING_PASSWORD"  # noqa: S105 - an env variable name
MULTI_ENTRY_POINT = "airflow_stores"
# The torchx-airflow-tracker entry point of a task with one store (it also has _2.._4 aliases,
# for several stores set by hand; the provider passes several stores as MULTI_ENTRY_POINT).
ENTRY_POINT = {"fsspec": "airflow_fsspec", "mlflow": "airflow_mlflow"}
MAX_PER_KIND = 4


def config_env_name(entry_point: str) -> str:
    """TorchX's name for a tracker's config variable (``TORCHX_TRACKER_<NAME>_CONFIG``)."""
    return f"TORCHX_TRACKER_{entry_point.upper()}_CONFIG"


@dataclass(frozen=True)
class TrackerBackend:
    """One tracker connection, resolved: what the job gets and how the launcher opens the same store.

    ``config`` is the JSON the job's ``torchx.tracker`` entry point receives; ``job_env`` holds other
    variables the job needs (MLflow credentials); ``secrets`` are the values never to show.
    """

    conn_id: str
    kind: str  # "fsspec" or "mlflow"
    config: dict[str, Any]
    job_env: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()

    def __repr__(self) -> str:  # never show the config: it may hold storage secrets
        return f"TrackerBackend(conn_id={self.conn_id!r}, kind={self.kind!r})"

    def open_store(self) -> TrackerBase:
        """The launcher-side store: same backend as the job's, for lineage and results."""
        if self.kind == "fsspec":
            from torchx_airflow_tracker.fsspec_store import FsspecStore

            return FsspecStore(self.config["root"], self.config.get("storage_options") or {})
        from torchx_airflow_tracker.mlflow_store import MlflowStore

        return MlflowStore(
            self.config["tracking_uri"],
            self.config.get("experiment") or DEFAULT_EXPERIMENT,
            username=self.job_env.get(ENV_MLFLOW_USERNAME),
            password=self.job_env.get(ENV_MLFLOW_PASSWORD),
        )


def _extra(conn: Connection, conn_type: str, key: str) -> Any:
    extra = conn.extra_dejson
    value = extra.get(key, extra.get(f"extra__{conn_type}__{key}"))
    return None if value == "" else value


def _sensitive_values(options: Mapping[str, Any], prefix: str = "") -> Iterable[str]:
    for key, value in options.items():
        if isinstance(value, Mapping):
            yield from _sensitive_values(value, f"{prefix}{key}.")
        elif isinstance(value, str) and value and should_hide_value_for_key(str(key)):
            yield value


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
        check_extra_keys(self.conn_id, self.conn_type, conn.extra_dejson, ("root", "storage_options"))
        root = fsspec_root(self.conn_id, _extra(conn, self.conn_type, "root"), self.example_env())
        options = parse_json_object(
            self.conn_id,
            "storage_options",
            _extra(conn, self.conn_type, "storage_options"),
            '{"endpoint_url": "http://minio:9000"}',
            show_value=False,  # it may hold credentials
        )
        secrets = list(_sensitive_values(options))
        add_fsspec_credentials(self.conn_id, root, conn.login, conn.password, options)
        if conn.password:
            secrets.append(conn.password)
        config: dict[str, Any] = {"root": root}
        if options:
            config["storage_options"] = options
        return TrackerBackend(self.conn_id, "fsspec", config, secrets=tuple(secrets))

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
        return True, f"Wrote, read back and deleted a probe file under {root}"


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
        check_extra_keys(self.conn_id, self.conn_type, conn.extra_dejson, ("experiment",))
        uri = self.tracking_uri()
        experiment = _extra(conn, self.conn_type, "experiment")
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
            secrets=(conn.password,) if conn.password else (),
        )

    def test_connection(self) -> tuple[bool, str]:
        """Write a probe tag on the experiment and read it back; report the step that failed."""
        try:
            backend = self.backend()
        except TorchXConnectionError as e:
            return False, str(e)
        try:
            store = backend.open_store()
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
            f"at {backend.config['tracking_uri']}",
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


def normalize_conn_ids(value: str | Sequence[str] | None, where: str) -> tuple[str, ...] | None:
    """``tracker_conn_ids`` as a tuple: a list, or one comma-separated string; None keeps the default."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.split(",")
    if (
        isinstance(value, bytes | Mapping)
        or not isinstance(value, Iterable)
        or not all(isinstance(v, str) for v in value)
    ):
        raise TorchXConnectionError(
            f"{where}: tracker_conn_ids must be connection ids (a list of strings), got {value!r}. "
            'Write it as e.g. ["torchx_fsspec_default", "mlflow_default"], or [] to track nothing.'
        )
    return tuple(dict.fromkeys(v.strip() for v in value if v.strip()))


class TrackerSet:
    """The tracker backends of one task, in order; the first is where results are read from.

    :param backends: resolved tracker connections.
    """

    def __init__(self, backends: Sequence[TrackerBackend]) -> None:
        self.backends = tuple(backends)
        for kind, count in Counter(b.kind for b in self.backends).items():
            if count > MAX_PER_KIND:
                raise TorchXConnectionError(
                    f"Too many {kind} tracker connections ({count}): a task can use at most "
                    f"{MAX_PER_KIND} of each kind. Remove some from 'trackers' / tracker_conn_ids."
                )
        credentials = {
            (b.job_env.get(ENV_MLFLOW_USERNAME), b.job_env.get(ENV_MLFLOW_PASSWORD))
            for b in self.backends
            if b.kind == "mlflow" and b.job_env
        }
        if len(credentials) > 1:
            raise TorchXConnectionError(
                "The MLflow tracker connections "
                f"{[b.conn_id for b in self.backends if b.kind == 'mlflow']} have different credentials, "
                "but a job reads MLflow credentials from one pair of variables "
                "(MLFLOW_TRACKING_USERNAME/PASSWORD). Use one MLflow connection per task, "
                "or the same login for all of them."
            )

    @classmethod
    def for_conn_ids(cls, conn_ids: Iterable[str]) -> TrackerSet:
        """Resolve tracker connections; their secrets are registered with Airflow's masker at once."""
        backends = [tracker_hook(conn_id).backend() for conn_id in conn_ids]
        for backend in backends:
            for secret in backend.secrets:
                mask_secret(secret)
        return cls(backends)

    def __bool__(self) -> bool:
        return bool(self.backends)

    def __repr__(self) -> str:
        return f"TrackerSet({[b.conn_id for b in self.backends]})"

    @property
    def conn_ids(self) -> list[str]:
        return [b.conn_id for b in self.backends]

    def job_env(self) -> dict[str, str]:
        """Variables every role gets: ``TORCHX_TRACKERS``, each store's config, MLflow credentials.

        No value holds a comma, since TorchX's Slurm scheduler passes env through
        ``srun --export=ALL,K=V,...``: one store is ``airflow_fsspec``/``airflow_mlflow`` with its
        config, several are the one entry point ``airflow_stores`` whose config lists them; a config
        whose JSON holds a comma is passed as ``base64:...`` (``encode_config``).

        With exactly one MLflow tracker, ``MLFLOW_TRACKING_URI`` points at it too, so the job's own
        ``mlflow`` calls land on the same server.
        """
        if not self.backends:
            return {}
        from torchx_airflow_tracker.config import encode_config

        config: Any
        if len(self.backends) == 1:
            (backend,) = self.backends
            name, config = ENTRY_POINT[backend.kind], backend.config
        else:
            # TORCHX_TRACKERS is comma-separated, and Slurm's `srun --export=ALL,K=V,...` would split
            # it: several stores travel as one entry point whose config lists them all.
            name = MULTI_ENTRY_POINT
            config = [{"kind": b.kind, "config": b.config} for b in self.backends]
        encoded = encode_config(config)
        if any(b.secrets for b in self.backends) and encoded.startswith("base64:"):
            mask_secret(encoded)  # the secrets are inside, encoded: never show the whole value
        env = {ENV_TRACKERS: name, config_env_name(name): encoded}
        for backend in self.backends:
            env.update(backend.job_env)
        mlflow = [b for b in self.backends if b.kind == "mlflow"]
        if len(mlflow) == 1:
            env[ENV_MLFLOW_URI] = mlflow[0].config["tracking_uri"]
        return env

    def secret_env_names(self) -> set[str]:
        """Names in ``job_env()`` whose values carry a connection's credentials: never to be written
        where others can read them (a Slurm batch script, a rendered field, a log)."""
        env = self.job_env()
        secrets = [s for b in self.backends for s in b.secrets if s]
        names = {name for name, value in env.items() if any(secret in value for secret in secrets)}
        if secrets:  # encoded configs hold the secrets in a form a substring test does not see
            names |= {name for name in env if name.startswith("TORCHX_TRACKER_") and name.endswith("_CONFIG")}
        for backend in self.backends:
            names |= {n for n in backend.job_env if n in (ENV_MLFLOW_USERNAME, ENV_MLFLOW_PASSWORD)}
        return names

    @cached_property
    def stores(self) -> list[TrackerBase]:
        """Launcher-side stores, one per backend, opened on first use."""
        return [backend.open_store() for backend in self.backends]

    def check(self) -> None:
        """Open every store before anything is submitted: an unreachable tracker fails the task here.

        For MLflow this also creates the experiment (and a new SQLite store's tables) once, before
        the job's ranks start writing.
        """
        stores = []
        for backend in self.backends:
            try:
                store = backend.open_store()
                if backend.kind == "mlflow":
                    _ = store.experiment_id  # type: ignore[attr-defined]
            except Exception as e:
                raise TorchXConnectionError(
                    f"Tracker connection {backend.conn_id!r} ({backend.kind}) cannot be opened: "
                    f"{type(e).__name__}: {e}. Fix the connection, or leave it out of 'trackers' / "
                    "tracker_conn_ids. Nothing was submitted."
                ) from e
            stores.append(store)
        self.__dict__["stores"] = stores

    def run_url(self, run_id: str) -> str | None:
        """The MLflow UI page of ``run_id`` on the first MLflow backend with an http(s) tracking URI."""
        for backend, store in zip(self.backends, self.stores, strict=True):
            if backend.kind == "mlflow" and backend.config["tracking_uri"].startswith(
                ("http://", "https://")
            ):
                return store.run_url(run_id)  # type: ignore[attr-defined]
        return None
