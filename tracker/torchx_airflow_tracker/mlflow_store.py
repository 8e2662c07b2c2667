"""An MLflow tracker store, through ``MlflowClient`` only (no fluent active run, no torch import).

Each TorchX run id maps to one MLflow run (run name and tag ``torchx.run_id`` = the id) in the
configured experiment. Everything is kept in tags, so the store reads back exactly what was written:

    torchx.metadata.<key>      JSON {"key": ..., "value": ...}; numbers are also logged as metrics
    torchx.artifact.<name>     JSON {"name": ..., "path": ..., "metadata": ...}
    torchx.source.<digest>     JSON {"source": <parent run id>, "artifact_names": [...]}

``<digest>`` is derived from the parent's run id, so "which runs have X as a source" (descendants)
is one search on that tag, and a run's parents are one read of its tags.

A value whose JSON is longer than MLflow's 8,000-character tag limit is split into immutable
``torchx.part.<digest>.<i>`` tags and read back whole; past ``MAX_SPLIT_VALUE`` it is a
``ValueTooLargeError`` raised before anything is written. Ranks racing to create the same run
agree through a claim (an experiment name, which MLflow keeps unique), with no fixed wait.
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
PART_PREFIX = "torchx.part."
PARTS_FIELD = "torchx.parts"
MAX_TAG_VALUE = 8000  # MLflow's limit on a tag value
MAX_SPLIT_VALUE = 8_000_000  # larger values belong in a file, recorded with add_artifact
MAX_KEY = 250
CLAIM_PREFIX = ".torchx-claim."
CLAIM_TIMEOUT_SECONDS = 30.0  # how long a claimed run may take to appear before it is claimed again
MAX_CLAIM_GENERATIONS = 20
BATCH = 100  # MLflow accepts at most 100 tags (and 100 params) per log_batch call
MAX_BATCH_BYTES = 600_000  # MLflow refuses log_batch bodies over 1 MB
MAX_METRICS_WITH_TAGS = 900  # 1,000 entities per call, less a full batch of tags
_SAFE_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")
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


class ValueTooLargeError(ValueError):
    """A metadata value, artifact or source too large to keep in MLflow tags even when split."""


def _encode(tag_key: str, payload: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
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


def _decode(value: str, all_tags: Mapping[str, str]) -> Any:
    """The payload a tag holds, joined from its part tags when it was split."""
    entry = json.loads(value)
    if isinstance(entry, dict) and PARTS_FIELD in entry:
        digest, count = entry[PARTS_FIELD], int(entry["count"])
        entry = json.loads("".join(all_tags[f"{PART_PREFIX}{digest}.{i}"] for i in range(count)))
    return entry


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
        from torchx_airflow_tracker.config import without_userinfo

        uri = without_userinfo(self.tracking_uri)  # a database URI carries its password there
        return f"MlflowStore(tracking_uri={uri!r}, experiment={self.experiment!r})"

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
        if runs:
            winner: str | None = runs[0].info.run_id
        else:
            winner = self._create_once(run_id) if create else None
        if winner is not None:
            self._mlflow_ids[run_id] = winner
        return winner

    def _create_once(self, run_id: str) -> str:
        """Create the MLflow run of ``run_id`` unless another process is doing so; its MLflow run id.

        MLflow has no conditional run creation, but experiment names are unique in its store: the
        process that creates the claim experiment creates the run, the others wait for that run to
        show up. The claim is deleted afterwards (hidden in the UI; its name stays taken). A claim
        whose run never appears (its creator died, or a user deleted the run) is passed over to
        the next generation, so this always ends.
        """
        from mlflow.exceptions import MlflowException

        for generation in range(MAX_CLAIM_GENERATIONS):
            name = f"{CLAIM_PREFIX}{_digest(f'{self.experiment_id}/{run_id}')}.{generation}"
            try:
                claim_id = self.client.create_experiment(name)
            except MlflowException as e:
                if e.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                found = self._await_run(run_id, name)
                if found is not None:
                    return found
                continue
            run = self.client.create_run(self.experiment_id, run_name=run_id, tags={RUN_ID_TAG: run_id})
            self.client.delete_experiment(claim_id)
            return run.info.run_id
        raise RuntimeError(
            f"Could not create the MLflow run of {run_id!r} in experiment {self.experiment!r}: "
            f"{MAX_CLAIM_GENERATIONS} claims were taken without a run appearing. Check the MLflow "
            "server's logs, and that no one deletes the run while jobs still write to it."
        )

    def _await_run(self, run_id: str, claim_name: str) -> str | None:
        """The run another process claimed, once it shows; None if that claim will never make one."""
        deadline = time.monotonic() + CLAIM_TIMEOUT_SECONDS
        delay = 0.01
        while True:
            # The claim is read before the search: its creator deletes it only once the run exists,
            # so a claim seen deleted and then no run found means the run was deleted since.
            claim = self.client.get_experiment_by_name(claim_name)
            runs = self._runs_of(run_id)
            if runs:
                return runs[0].info.run_id
            if claim is None or claim.lifecycle_stage == "deleted":
                return None
            if time.monotonic() > deadline:
                log.warning(
                    "No MLflow run of %s after %s s: claiming it again", run_id, CLAIM_TIMEOUT_SECONDS
                )
                return None
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def _all_tags(self, run_id: str) -> dict[str, str]:
        mlflow_id = self.mlflow_run_id(run_id)
        return {} if mlflow_id is None else dict(self.client.get_run(mlflow_id).data.tags)

    def _entries(self, run_id: str, prefix: str) -> list[Any]:
        """The payloads of a run's tags under ``prefix``, in tag-key order."""
        tags = self._all_tags(run_id)
        return [_decode(v, tags) for k, v in sorted(tags.items()) if k.startswith(prefix)]

    def _log_tags(
        self,
        run_id: str,
        entries: Mapping[str, Mapping[str, Any]],
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        """Write ``{tag key: payload}`` (split where too long, parts first) and metrics in few calls."""
        from mlflow.entities import Metric, RunTag

        parts: dict[str, str] = {}
        tags: dict[str, str] = {}
        for tag_key, payload in entries.items():  # encode all first: a bad value writes nothing
            entry_parts, entry_tags = _encode(tag_key, payload)
            parts.update(entry_parts)
            tags.update(entry_tags)
        mlflow_id = self.mlflow_run_id(run_id, create=True)
        if mlflow_id is None:
            raise RuntimeError(f"No MLflow run for {run_id!r} after creating it")
        for batch in _batches(parts):
            self.client.log_batch(mlflow_id, tags=[RunTag(k, v) for k, v in batch])
        now = int(time.time() * 1000)
        metric_list = [Metric(k, v, now, 0) for k, v in (metrics or {}).items()]
        tag_batches = list(_batches(tags)) or ([[]] if metric_list else [])
        for i, batch in enumerate(tag_batches):
            # metrics ride along with the first tag batch (up to MLflow's 1,000 entities a call)
            extra = metric_list if i == 0 and len(metric_list) <= MAX_METRICS_WITH_TAGS else []
            self.client.log_batch(mlflow_id, metrics=extra, tags=[RunTag(k, v) for k, v in batch])
        if len(metric_list) > MAX_METRICS_WITH_TAGS:
            for i in range(0, len(metric_list), MAX_METRICS_WITH_TAGS):
                self.client.log_batch(mlflow_id, metrics=metric_list[i : i + MAX_METRICS_WITH_TAGS])

    # TrackerBase

    def add_metadata(self, run_id: str, **kwargs: object) -> None:
        entries, metrics = {}, {}
        for key, value in kwargs.items():
            entries[_tag_key(METADATA_PREFIX, key)] = {"key": key, "value": value}
            if isinstance(value, int | float) and not isinstance(value, bool):
                metrics[_tag_key("", key)] = float(value)  # shown as metrics in the MLflow UI
        self._log_tags(run_id, entries, metrics)

    def metadata(self, run_id: str) -> Mapping[str, object]:
        return {entry["key"]: entry["value"] for entry in self._entries(run_id, METADATA_PREFIX)}

    def add_artifact(
        self, run_id: str, name: str, path: str, metadata: Mapping[str, object] | None = None
    ) -> None:
        self._log_tags(
            run_id, {_tag_key(ARTIFACT_PREFIX, name): {"name": name, "path": path, "metadata": metadata}}
        )

    def artifacts(self, run_id: str) -> Mapping[str, TrackerArtifact]:
        entries = self._entries(run_id, ARTIFACT_PREFIX)
        return {e["name"]: TrackerArtifact(e["name"], e["path"], e["metadata"]) for e in entries}

    def _parents(self, run_id: str) -> dict[str, tuple[str | None, ...]]:
        entries = self._entries(run_id, SOURCE_PREFIX)
        return {e["source"]: artifact_names_key(e["artifact_names"]) for e in entries}

    def _children(self, run_id: str) -> dict[str, tuple[str | None, ...]]:
        tag_key = SOURCE_PREFIX + _digest(run_id)
        children: dict[str, tuple[str | None, ...]] = {}
        for run in self._search(f"tags.`{tag_key}` LIKE '%'"):
            entry = _decode(run.data.tags[tag_key], run.data.tags)
            child = run.data.tags.get(RUN_ID_TAG)
            if child and entry["source"] == run_id:
                children[child] = artifact_names_key(entry["artifact_names"])
        return children

    def add_source(self, run_id: str, source_id: str, artifact_name: str | None = None) -> None:
        names = self._parents(run_id).get(source_id, ())
        artifact_name = artifact_name or None
        if artifact_name in names:
            return  # the same edge twice is one edge
        payload = {"source": source_id, "artifact_names": list(artifact_names_key((*names, artifact_name)))}
        self._log_tags(run_id, {SOURCE_PREFIX + _digest(source_id): payload})

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
