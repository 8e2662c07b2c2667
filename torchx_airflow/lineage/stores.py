"""The tracker domain: a task's tracker backends, the job env that carries them, the stores they open.

A ``TrackerBackend`` is one tracker connection resolved (by ``torchx_airflow.hooks.tracker``): what the
job's ``torchx.tracker`` entry point gets as its config, other job variables, and its secrets. A
``TrackerSet`` is the backends of one task, in order: their job environment (``TORCHX_TRACKERS`` and
one ``TORCHX_TRACKER_<NAME>_CONFIG``), which of those variables carry credentials, and the
launcher-side stores that write lineage and read results. No Airflow connection is read here, and
importing this module imports neither mlflow nor s3fs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torchx_airflow_tracker.compat import cached_property

from torchx_airflow.exceptions import TorchXConnectionError, TorchXError
from torchx_airflow.secrets import mask_secret, strip_userinfo

if TYPE_CHECKING:
    from torchx_airflow_tracker.protocol import ProviderStore

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

    def open_store(self) -> ProviderStore:
        """The launcher-side store: same backend as the job's, for lineage and results. It reads what
        any job wrote, so within ``ReadLimits.for_readers()`` (per entry, per run, in all: one store
        object per task, or per request of a view)."""
        from torchx_airflow_tracker.read_limits import ReadLimits

        store: ProviderStore
        if self.kind == "fsspec":
            from torchx_airflow_tracker.fsspec_store import FsspecStore

            store = FsspecStore(self.config["root"], self.config.get("storage_options") or {})
        else:
            from torchx_airflow_tracker.mlflow_store import MlflowStore

            store = MlflowStore(
                self.config["tracking_uri"],
                self.config.get("experiment") or DEFAULT_EXPERIMENT,
                username=self.job_env.get(ENV_MLFLOW_USERNAME),
                password=self.job_env.get(ENV_MLFLOW_PASSWORD),
            )
        store.limits = ReadLimits.for_readers()
        return store


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
        if any(b.secrets for b in self.backends):
            # the secrets are inside, maybe encoded: masking only them would leave the rest of a
            # base64 value decodable around the mask, so the whole value is never shown
            mask_secret(encoded)
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
    def stores(self) -> list[ProviderStore]:
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
                store.make_ready()  # the job will write there: an fsspec root, an MLflow experiment
            except Exception as e:
                raise TorchXConnectionError(
                    f"Tracker connection {backend.conn_id!r} ({backend.kind}) cannot be opened: "
                    f"{type(e).__name__}: {strip_userinfo(str(e))}. Fix the connection, or leave it "
                    "out of 'trackers' / "
                    "tracker_conn_ids. Nothing was submitted."
                ) from e
            stores.append(store)
        self.__dict__["stores"] = stores

    def check_within(self, seconds: float, where: str) -> None:
        """``check`` within ``seconds``: past them ``TorchXError`` (nothing submitted, retryable)."""
        if not self.backends:
            return
        from torchx_airflow.retry import call_within

        done, _ = call_within(seconds, "Opening the trackers", self.check, reraise=True)
        if not done:
            raise TorchXError(
                f"{where}: the trackers {self.conn_ids} did not answer within tracker_timeout={seconds!r} s. "
                "Nothing was submitted; the task's next try tries again. Check that the tracker servers "
                "answer, or raise tracker_timeout."
            )

    def run_url(self, run_id: str) -> str | None:
        """The MLflow UI page of ``run_id`` on the first MLflow backend with an http(s) tracking URI,
        without the URI's user info: the link is shown to people, the browser asks them to log in."""
        for backend, store in zip(self.backends, self.stores, strict=True):
            if backend.kind == "mlflow" and backend.config["tracking_uri"].startswith(
                ("http://", "https://")
            ):
                url = store.run_url(run_id)
                return None if url is None else strip_userinfo(url)
        return None
