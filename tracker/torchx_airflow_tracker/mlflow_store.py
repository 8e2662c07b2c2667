"""An MLflow tracker store, through ``MlflowClient`` only (no fluent active run, no torch import).

Each TorchX run id maps to one MLflow run (run name and tag ``torchx.run_id`` = the id) in the
configured experiment. Everything is kept in tags, so the store reads back exactly what was written:

    torchx.metadata.<key>      JSON {"key": ..., "value": ...}; numbers are also logged as metrics
    torchx.artifact.<name>     JSON {"name": ..., "path": ..., "metadata": ...}
    torchx.source.<digest>     JSON {"source": <parent run id>, "artifact_names": [...]}

``<digest>`` is derived from the parent's run id, so "which runs have X as a source" (descendants)
is one search on that tag, and a run's parents are one read of its tags.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from torchx.tracker.api import TrackerArtifact, TrackerBase

from torchx_airflow_tracker.config import parse_config
from torchx_airflow_tracker.lineage import EdgeQueries, artifact_names_key

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

RUN_ID_TAG = "torchx.run_id"
METADATA_PREFIX = "torchx.metadata."
ARTIFACT_PREFIX = "torchx.artifact."
SOURCE_PREFIX = "torchx.source."
DEFAULT_EXPERIMENT = "torchx"
MAX_TAG_VALUE = 8000  # MLflow's limit on a tag value
MAX_KEY = 250
BATCH = 100  # MLflow accepts at most 100 tags (and 100 params) per log_batch call
_SAFE_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")
_SETTLE_SECONDS = 0.5
_ENV_USERNAME = "MLFLOW_TRACKING_USERNAME"
_ENV_PASSWORD = "MLFLOW_TRACKING_PASSWORD"
_CREDENTIALS_LOCK = threading.RLock()


@contextlib.contextmanager
def _credentials_env(username: str | None, password: str | None) -> Iterator[None]:
    """MLflow reads basic-auth credentials from the environment on every request: set them for one call."""
    wanted = {_ENV_USERNAME: username, _ENV_PASSWORD: password}
    with _CREDENTIALS_LOCK:
        saved = {name: os.environ.get(name) for name in wanted}
        try:
            for name, value in wanted.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


class _AuthenticatedClient:
    """An ``MlflowClient`` whose calls carry this store's own credentials, not the process's."""

    def __init__(self, client: MlflowClient, username: str | None, password: str | None) -> None:
        self._client = client
        self._username = username
        self._password = password

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with _credentials_env(self._username, self._password):
                return attr(*args, **kwargs)

        return call


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def _tag_key(prefix: str, name: str) -> str:
    """A valid MLflow tag key for ``name``; names MLflow cannot hold get a digest suffix (never collide)."""
    safe = _SAFE_KEY.sub("_", name)
    if safe != name or len(prefix) + len(safe) > MAX_KEY:
        safe = f"{safe[: MAX_KEY - len(prefix) - 26]}-{_digest(name)}"
    return prefix + safe


def _fit(tag_key: str, payload: Mapping[str, Any], field: str) -> str:
    """JSON for a tag value; a ``field`` too large for MLflow is truncated (as a string), with a warning."""
    text = json.dumps(payload, default=str)
    if len(text) <= MAX_TAG_VALUE:
        return text
    log.warning("MLflow cannot hold %s (%d characters): stored truncated", tag_key, len(text))
    value = payload[field]
    value_text = value if isinstance(value, str) else json.dumps(value, default=str)
    keep = len(value_text) - (len(text) - MAX_TAG_VALUE) - 64
    while True:  # escaping can make the JSON longer than the text: shrink until it fits
        text = json.dumps({**payload, field: value_text[: max(0, keep)] + "...[truncated]"}, default=str)
        if len(text) <= MAX_TAG_VALUE:
            return text
        keep -= len(text) - MAX_TAG_VALUE + 64


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class MlflowStore(EdgeQueries, TrackerBase):
    """TorchX tracker backend on an MLflow tracking server (``http://...``) or store (``sqlite:///...``).

    :param tracking_uri: the tracking URI.
    :param experiment: experiment name, created if missing.
    :param username: basic-auth user for this store only. Without ``username``/``password`` the
        credentials come from ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` /
        ``MLFLOW_TRACKING_TOKEN`` as MLflow reads them (inside a job, that is how they arrive).
    :param password: basic-auth password for this store only.
    """

    def __init__(
        self,
        tracking_uri: str,
        experiment: str = DEFAULT_EXPERIMENT,
        *,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self._username = username
        self._password = password
        self._mlflow_ids: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"MlflowStore(tracking_uri={self.tracking_uri!r}, experiment={self.experiment!r})"

    @cached_property
    def client(self) -> MlflowClient:
        try:
            from mlflow.tracking import MlflowClient
        except ImportError as e:
            raise ImportError(
                "Install torchx-airflow-tracker[mlflow] (mlflow-skinny) to use the MLflow store"
            ) from e
        client = MlflowClient(tracking_uri=self.tracking_uri)
        if self._username is None and self._password is None:
            return client
        return _AuthenticatedClient(client, self._username, self._password)  # type: ignore[return-value]

    @cached_property
    def experiment_id(self) -> str:
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(self.experiment)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(self.experiment)
        except MlflowException:  # created meanwhile by another rank
            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                raise
            return found.experiment_id

    # run resolution

    def _search(self, filter_string: str) -> list[Run]:
        runs: list[Run] = []
        token = None
        while True:
            page = self.client.search_runs(
                [self.experiment_id], filter_string=filter_string, max_results=1000, page_token=token
            )
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def _runs_of(self, run_id: str) -> list[Run]:
        runs = self._search(f"tags.`{RUN_ID_TAG}` = {_quote(run_id)}")
        return sorted(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))

    def mlflow_run_id(self, run_id: str, create: bool = False) -> str | None:
        """The MLflow run of a TorchX run id; with ``create``, made if missing (one, however many race)."""
        if run_id in self._mlflow_ids:
            return self._mlflow_ids[run_id]
        runs = self._runs_of(run_id)
        if not runs and not create:
            return None
        if not runs:
            mine = self.client.create_run(self.experiment_id, run_name=run_id, tags={RUN_ID_TAG: run_id})
            # Ranks that created concurrently all see every run after the settle time and keep the
            # same (earliest) one; the others delete their own.
            time.sleep(_SETTLE_SECONDS)
            runs = self._runs_of(run_id)
            winner = runs[0].info.run_id if runs else mine.info.run_id
            if winner != mine.info.run_id:
                self.client.delete_run(mine.info.run_id)
        else:
            winner = runs[0].info.run_id
        self._mlflow_ids[run_id] = winner
        return winner

    def _tags(self, run_id: str, prefix: str) -> dict[str, str]:
        mlflow_id = self.mlflow_run_id(run_id)
        if mlflow_id is None:
            return {}
        tags = self.client.get_run(mlflow_id).data.tags
        return {k: v for k, v in sorted(tags.items()) if k.startswith(prefix)}

    def _log_tags(
        self, run_id: str, tags: Mapping[str, str], metrics: Mapping[str, float] | None = None
    ) -> None:
        from mlflow.entities import Metric, RunTag

        mlflow_id = self.mlflow_run_id(run_id, create=True)
        assert mlflow_id is not None
        tag_list = [RunTag(k, v) for k, v in tags.items()]
        now = int(time.time() * 1000)
        metric_list = [Metric(k, v, now, 0) for k, v in (metrics or {}).items()]
        for i in range(0, max(len(tag_list), len(metric_list)), BATCH):
            self.client.log_batch(mlflow_id, metrics=metric_list[i : i + BATCH], tags=tag_list[i : i + BATCH])

    # TrackerBase

    def add_metadata(self, run_id: str, **kwargs: object) -> None:
        tags, metrics = {}, {}
        for key, value in kwargs.items():
            tag_key = _tag_key(METADATA_PREFIX, key)
            tags[tag_key] = _fit(tag_key, {"key": key, "value": value}, "value")
            if isinstance(value, int | float) and not isinstance(value, bool):
                metrics[_tag_key("", key)] = float(value)  # shown as metrics in the MLflow UI
        self._log_tags(run_id, tags, metrics)

    def metadata(self, run_id: str) -> Mapping[str, object]:
        entries = [json.loads(v) for v in self._tags(run_id, METADATA_PREFIX).values()]
        return {entry["key"]: entry["value"] for entry in entries}

    def add_artifact(
        self, run_id: str, name: str, path: str, metadata: Mapping[str, object] | None = None
    ) -> None:
        tag_key = _tag_key(ARTIFACT_PREFIX, name)
        self._log_tags(
            run_id, {tag_key: _fit(tag_key, {"name": name, "path": path, "metadata": metadata}, "metadata")}
        )

    def artifacts(self, run_id: str) -> Mapping[str, TrackerArtifact]:
        entries = [json.loads(v) for v in self._tags(run_id, ARTIFACT_PREFIX).values()]
        return {e["name"]: TrackerArtifact(e["name"], e["path"], e["metadata"]) for e in entries}

    def _parents(self, run_id: str) -> dict[str, tuple[str | None, ...]]:
        entries = [json.loads(v) for v in self._tags(run_id, SOURCE_PREFIX).values()]
        return {e["source"]: artifact_names_key(e["artifact_names"]) for e in entries}

    def _children(self, run_id: str) -> dict[str, tuple[str | None, ...]]:
        tag_key = SOURCE_PREFIX + _digest(run_id)
        children: dict[str, tuple[str | None, ...]] = {}
        for run in self._search(f"tags.`{tag_key}` LIKE '%'"):
            entry = json.loads(run.data.tags[tag_key])
            child = run.data.tags.get(RUN_ID_TAG)
            if child and entry["source"] == run_id:
                children[child] = artifact_names_key(entry["artifact_names"])
        return children

    def add_source(self, run_id: str, source_id: str, artifact_name: str | None = None) -> None:
        names = self._parents(run_id).get(source_id, ())
        artifact_name = artifact_name or None
        if artifact_name in names:
            return  # the same edge twice is one edge
        value = json.dumps(
            {"source": source_id, "artifact_names": list(artifact_names_key((*names, artifact_name)))}
        )
        self._log_tags(run_id, {SOURCE_PREFIX + _digest(source_id): value})

    def run_ids(self, **kwargs: str) -> Iterable[str]:
        parent_run_id = kwargs.pop("parent_run_id", None)
        if kwargs:
            raise ValueError(
                f"Unknown run_ids filter(s) {sorted(kwargs)}; the MLflow store filters by parent_run_id only."
            )
        if parent_run_id:
            return sorted(self._children(parent_run_id))
        runs = self._search(f"tags.`{RUN_ID_TAG}` LIKE '%'")
        return sorted({r.data.tags[RUN_ID_TAG] for r in runs})

    def run_url(self, run_id: str) -> str | None:
        """The MLflow UI page of the run, for http(s) tracking URIs."""
        mlflow_id = self.mlflow_run_id(run_id)
        if mlflow_id is None or not self.tracking_uri.startswith(("http://", "https://")):
            return None
        return f"{self.tracking_uri.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{mlflow_id}"


def create(config: str | None) -> MlflowStore:
    """``torchx.tracker`` entry point: inline JSON ``{"tracking_uri": <uri>, "experiment": <name>}``."""
    parsed = parse_config("mlflow", config, ("tracking_uri",), ("experiment",))
    return MlflowStore(str(parsed["tracking_uri"]), str(parsed.get("experiment") or DEFAULT_EXPERIMENT))
