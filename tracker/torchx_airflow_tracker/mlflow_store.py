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
agree through a claim (an experiment name, which MLflow keeps unique), with no fixed wait. The
claims are params of one run kept in the experiment ``.torchx-claims.<experiment id>``, so every run
of the configured experiment is a TorchX run (TorchX's own ``MLflowTracker`` lists them all).

**A TorchX run id is bound once, to the MLflow run its claim names.** MLflow lets any client create
a run (dated 1970, if it likes) and tag it with any run id; readers and writers alike take the run
the claim (a param, which MLflow never lets anyone change) names, never the earliest or the first
run a search finds, and ignore every other run carrying the same tag: such a run changes nothing a
reader sees, and the claimed run's later writes stay in it.
"""

from __future__ import annotations

import hashlib
import logging
import math
import posixpath
import re
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from torchx.tracker.api import TrackerArtifact, TrackerBase

from torchx_airflow_tracker.compat import cached_property
from torchx_airflow_tracker.config import parse_config
from torchx_airflow_tracker.mlflow_tags import MAX_SPLIT_VALUE as MAX_SPLIT_VALUE  # re-exported
from torchx_airflow_tracker.mlflow_tags import MAX_TAG_VALUE as MAX_TAG_VALUE  # re-exported
from torchx_airflow_tracker.mlflow_tags import ValueTooLargeError as ValueTooLargeError  # re-exported
from torchx_airflow_tracker.mlflow_tags import _batches, _encode_all, log_tags
from torchx_airflow_tracker.mlflow_tags import decode as _decode
from torchx_airflow_tracker.mlflow_tags import quote as _quote
from torchx_airflow_tracker.read_limits import ReadLimits
from torchx_airflow_tracker.run_graph import EdgeGraph, EdgeQueries, artifact_names_key

if TYPE_CHECKING:
    from mlflow.entities import Run
    from mlflow.tracking import MlflowClient

    from torchx_airflow_tracker.cache_records import MlflowCacheRecords

log = logging.getLogger(__name__)

RUN_ID_TAG = "torchx.run_id"
METADATA_PREFIX = "torchx.metadata."
ARTIFACT_PREFIX = "torchx.artifact."
SOURCE_PREFIX = "torchx.source."
# a metric logged with steps (``torchx_airflow_tracker.metrics``): tag value = the metric's key
SERIES_PREFIX = "torchx.series."
DEFAULT_EXPERIMENT = "torchx"
MAX_KEY = 250
CLAIM_PREFIX = ".torchx-claim."
MAX_CLAIM_GENERATIONS = 20
MAX_METRICS_WITH_TAGS = 900  # 1,000 entities per call, less a full batch of tags
_SAFE_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")
# how long metadata()/artifacts() answer from the tags the last graph() read (a lineage view reads
# the graph, then the details of its runs; a store object is made per view)
SNAPSHOT_SECONDS = 60.0
#: the runs a bounded graph reads (``graph(max_reads=...)``: the views): the newest first
MAX_GRAPH_RUNS = 5000
REGISTRY_TAG = "torchx.claims_run"  # experiment tag: the run whose params are the claims
REGISTRY_RUN_NAME = ".torchx-claims"
# the claims run lives in its own experiment beside the store's: every run of the store's experiment
# is a TorchX run, so TorchX's own MLflowTracker (which lists all of them) lists what run_ids() does
CLAIMS_EXPERIMENT_PREFIX = ".torchx-claims."
# a run made to be claimed carries this tag; RUN_ID_TAG only once it won, so searches for a run id
# never meet a losing rank's run before it is deleted
CANDIDATE_TAG = "torchx.candidate_for"


def _http_client(tracking_uri: str, username: str | None, password: str | None) -> MlflowClient:
    """An ``MlflowClient`` of an http(s) tracking server, built without MLflow's store registry.

    ``MlflowClient(uri)`` resolves its store through the registry, which builds every store of the
    process under one lock (``mlflow.tracking._tracking_service.registry._building_store_lock``): a
    store that cannot be reached (a database URI whose server is down, retried for minutes) would hold
    back every other client of the process, e.g. every lineage view of the API server. Credentials
    given here go with every request, whatever the process environment holds (MLflow reads
    ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` there otherwise); none given: the environment's.
    """
    from mlflow.store.tracking.rest_store import RestStore
    from mlflow.tracking import MlflowClient
    from mlflow.tracking._tracking_service.client import TrackingServiceClient
    from mlflow.utils.credentials import get_default_host_creds

    def host_creds() -> Any:
        creds = get_default_host_creds(tracking_uri)  # TLS settings and the like, as MLflow reads them
        if username is not None or password is not None:
            creds.username, creds.password, creds.token = username, password, None
        return creds

    class _Tracking(TrackingServiceClient):
        @property
        def store(self) -> RestStore:
            return rest_store

    rest_store = RestStore(host_creds)
    # MlflowClient.__init__ would build its stores through the registry; these are the attributes it
    # sets (the tracing and workspace clients are not used by this store)
    client = MlflowClient.__new__(MlflowClient)
    client._registry_uri = tracking_uri
    client._tracking_client = _Tracking(tracking_uri)  # the one seam MLflow has for its store
    client._workspace_store_uri = None
    client._workspace_client = None
    return client


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def _path_safe(key: str) -> bool:
    """MLflow's rule for keys (they may become file paths): no ``a//b``, ``x/``, ``/abs``, ``..``."""
    norm = posixpath.normpath(key)
    return norm == key and norm != "." and not norm.startswith(("..", "/"))


def _tag_key(prefix: str, name: str) -> str:
    """A valid MLflow tag key for ``name``; names MLflow cannot hold get a digest suffix (never collide)."""
    safe = _SAFE_KEY.sub("_", name)
    if safe != name or len(prefix) + len(safe) > MAX_KEY or not _path_safe(prefix + safe):
        # no '/' and no '.', so that no form of the key is a path MLflow refuses ('..', '/abs')
        readable = safe.replace("/", "_").replace(".", "_")
        safe = f"{readable[: MAX_KEY - len(prefix) - 26]}-{_digest(name)}"
    return prefix + safe


def _fits_float(value: float) -> bool:
    """Whether a number can be a metric (an int past float range stays a tag only)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _first_batch(tags: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The first ``log_batch``-sized group of ``tags`` (in order), and the rest."""
    first = dict(next(_batches(tags), []))
    return first, {k: v for k, v in tags.items() if k not in first}


def _metadata_entries(kwargs: Mapping[str, object]) -> tuple[dict[str, Any], dict[str, float]]:
    entries, metrics = {}, {}
    for key, value in kwargs.items():
        entries[_tag_key(METADATA_PREFIX, key)] = {"key": key, "value": value}
        if isinstance(value, int | float) and not isinstance(value, bool) and _fits_float(value):
            metrics[_tag_key("", key)] = float(value)  # shown as metrics in the MLflow UI
    return entries, metrics


#: the fields each kind of entry has (what a tag under its prefix must decode to)
_FIELDS = {
    METADATA_PREFIX: ("key", "value"),
    ARTIFACT_PREFIX: ("name", "path"),
    SOURCE_PREFIX: ("source", "artifact_names"),
}


def _entry(key: str, value: str, tags: Mapping[str, str]) -> dict[str, Any] | None:
    """The entry a tag holds, or None (logged) for one that is not whole or not of its kind: any
    client may set tags on any run, and one such tag never hides the run's others."""
    fields = next((f for prefix, f in _FIELDS.items() if key.startswith(prefix)), ())
    try:
        entry = _decode(value, tags)
    except (KeyError, ValueError, TypeError) as e:
        log.warning("Skipping tag %s: not a whole entry (%s: %s)", key, type(e).__name__, e)
        return None
    if not isinstance(entry, dict) or any(f not in entry for f in fields):
        log.warning("Skipping tag %s: not an entry of its kind: %.200s", key, entry)
        return None
    if "artifact_names" in fields and not isinstance(entry["artifact_names"], list):
        log.warning("Skipping tag %s: artifact_names is not a list: %.200s", key, entry)
        return None
    return entry


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
        self._series_keys: set[str] = set()  # metric keys this object logged with steps
        self._known_claims_run: str | None = None
        self._claims_read: dict[str, str] | None = None
        # graph(): (when, {TorchX run id: its run's tags})
        self._snapshot: tuple[float, dict[str, dict[str, str]]] | None = None
        #: searches cut at their limit (``graph(max_reads=...)``, children of a run)
        self.searches_cut = 0
        #: readers of what any job wrote bound their reads (``ReadLimits.for_readers()``): a run's
        #: tags are charged as they are read (the server bounds each tag's size itself)
        self.limits = ReadLimits()
        self.oversized: dict[str, set[str]] = {}

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
        if self.tracking_uri.startswith(("http://", "https://")):
            return _http_client(self.tracking_uri, self._username, self._password)
        if self._username is not None or self._password is not None:
            raise ValueError(
                f"username/password apply to http(s) tracking URIs only, got {self.tracking_uri!r}: "
                "drop them, or give the server's http(s) URI."
            )
        return MlflowClient(tracking_uri=self.tracking_uri)

    @cached_property
    def experiment_id(self) -> str:
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(self.experiment)
        if found is not None:
            self._known_claims_run = found.tags.get(REGISTRY_TAG)  # saves a lookup when creating a run
            return found.experiment_id
        try:
            return self.client.create_experiment(self.experiment)
        except MlflowException:  # created meanwhile by another rank
            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                raise
            return found.experiment_id

    # run resolution

    def _search(self, filter_string: str, limit: int | None = None) -> list[Run]:
        """The experiment's runs that match, newest first; with ``limit``, at most that many (a
        longer answer is cut there: ``self.searches_cut`` counts it)."""
        runs: list[Run] = []
        token = None
        while True:
            size = 1000 if limit is None else max(1, min(1000, limit - len(runs)))
            page = self.client.search_runs(
                [self.experiment_id], filter_string=filter_string, max_results=size, page_token=token
            )
            runs.extend(page)
            token = page.token
            if not token:
                return runs
            if limit is not None and len(runs) >= limit:
                self.searches_cut += 1
                return runs

    def mlflow_run_id(self, run_id: str, create: bool = False) -> str | None:
        """The MLflow run of a TorchX run id (its claim's); with ``create``, made if missing (one,
        however many race)."""
        if run_id not in self._mlflow_ids:
            claimed = self._claimed(run_id)
            if claimed is not None:
                self._mlflow_ids[run_id] = claimed
            elif create:
                mlflow_id, won = self._create_once(run_id)
                if won:
                    self.client.set_tag(mlflow_id, RUN_ID_TAG, run_id)
                self._mlflow_ids[run_id] = mlflow_id
        return self._mlflow_ids.get(run_id)

    def _claims(self, fresh: bool = False) -> dict[str, str]:
        """The claims: ``{<digest of run id>.<generation>: MLflow run id}``, one read of the claims run
        (kept per store object; ``fresh``: read again)."""
        if self._claims_read is None or fresh:
            run = self.client.get_run(self._claims_run) if self._claims_known() else None
            self._claims_read = dict(run.data.params) if run is not None else {}
        return self._claims_read

    def _claims_known(self) -> bool:
        """Whether the experiment has a claims run yet (readers never make one)."""
        _ = self.experiment_id  # its lookup names the claims run, once there is one
        if self._known_claims_run or "_claims_run" in self.__dict__:
            return True
        return bool(self.client.get_experiment(self.experiment_id).tags.get(REGISTRY_TAG))

    def _claimed(self, run_id: str, runs: Mapping[str, Run] | None = None) -> str | None:
        """The MLflow run ``run_id``'s claim names: the first generation whose run is alive and is
        that run id's (``runs``: the experiment's runs by MLflow id, when a search has them)."""
        read_before = self._claims_read is not None
        for fresh in (False, True):  # claims this object read earlier may predate the run's
            if fresh and not read_before:
                return None  # the claims were just read: they are current
            claims = self._claims(fresh)
            for generation in range(MAX_CLAIM_GENERATIONS):
                mlflow_id = claims.get(f"{_digest(run_id)}.{generation}")
                if mlflow_id is None:
                    break
                if self._is_run_of(mlflow_id, run_id, runs):
                    return mlflow_id
            if runs is not None:
                return None
        return None

    def _is_run_of(self, mlflow_id: str, run_id: str, runs: Mapping[str, Run] | None) -> bool:
        """Whether ``mlflow_id`` is a live run made for ``run_id`` (a claimed run may not carry
        ``RUN_ID_TAG`` yet: its winner tags it right after its claim)."""
        from mlflow.exceptions import MlflowException

        if runs is not None:
            run = runs.get(mlflow_id)
        else:
            try:
                run = self.client.get_run(mlflow_id)
            except MlflowException:
                return False
        if run is None or run.info.lifecycle_stage == "deleted":
            return False
        tags = run.data.tags
        return run_id in (tags.get(RUN_ID_TAG), tags.get(CANDIDATE_TAG))

    @cached_property
    def _claims_run(self) -> str:
        """The run whose params are this experiment's claims (one per experiment, made once).

        MLflow keeps a param's first value (a different one is refused), so a param is a
        compare-and-set: the first rank to set ``<claim of run id> = <its run>`` wins.
        """
        from mlflow.exceptions import MlflowException

        experiment_id = self.experiment_id  # its lookup names the claims run, once there is one
        if self._known_claims_run:
            return self._known_claims_run
        experiment = self.client.get_experiment(experiment_id)
        if experiment.tags.get(REGISTRY_TAG):
            return experiment.tags[REGISTRY_TAG]
        candidate = self.client.create_run(self._claims_experiment(), run_name=REGISTRY_RUN_NAME).info.run_id
        # experiment names are unique: the one rank whose claim experiment is created wins; it is
        # deleted at once (out of sight), and a deleted experiment still answers by name
        name = f"{CLAIM_PREFIX}{self.experiment_id}"
        try:
            claim_id = self.client.create_experiment(name, tags={REGISTRY_TAG: candidate})
            self.client.delete_experiment(claim_id)
            winner = candidate
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            existing = self.client.get_experiment_by_name(name)
            if existing is None:  # deleted again between the two calls: claim on the next try
                raise
            winner = existing.tags[REGISTRY_TAG]
            self.client.delete_run(candidate)
        try:
            self.client.set_experiment_tag(self.experiment_id, REGISTRY_TAG, winner)
        except MlflowException:  # ranks setting the same value at once (SQLite refuses the second)
            if self.client.get_experiment(self.experiment_id).tags.get(REGISTRY_TAG) != winner:
                raise
        return winner

    def _claims_experiment(self) -> str:
        """The experiment ``.torchx-claims.<experiment id>`` that holds the claims run (made once)."""
        from mlflow.exceptions import MlflowException

        name = f"{CLAIMS_EXPERIMENT_PREFIX}{self.experiment_id}"
        try:
            return str(self.client.create_experiment(name))
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            found = self.client.get_experiment_by_name(name)  # made by another rank meanwhile
            if found is None:
                raise
            if found.lifecycle_stage == "deleted":  # a new claims run needs a live experiment
                self.client.restore_experiment(found.experiment_id)
            return str(found.experiment_id)

    def _create_once(self, run_id: str, tags: Mapping[str, str] | None = None) -> tuple[str, bool]:
        """Create the MLflow run of ``run_id`` unless another rank's is claimed.

        Returns the run and whether it is this call's: the caller then tags it with ``RUN_ID_TAG``. The run is
        created *before* it is claimed, so a claim always names a run that exists: nothing waits
        for a slow ``create_run``, and no rank polls. A rank that loses deletes its own run and
        finds the winner among the runs of ``run_id`` (setting the claim to the winner's value is
        allowed). A claim whose run a user deleted passes to the next generation.

        ``tags``: the first write's tags, carried by ``create_run`` (MLflow takes them in the same
        request at the same cost); a rank that loses must write them to the winner's run itself.
        """
        claims = self._claims_run
        mine = self.client.create_run(
            self.experiment_id, run_name=run_id, tags={**(tags or {}), CANDIDATE_TAG: run_id}
        ).info.run_id
        for generation in range(MAX_CLAIM_GENERATIONS):
            key = f"{_digest(run_id)}.{generation}"
            if self._claim(claims, key, mine):
                return mine, True
            # lost: the winner's run was created before its claim, so the search shows it
            for other in self._search(f"tags.`{CANDIDATE_TAG}` = {_quote(run_id)}"):
                if other.info.run_id != mine and self._claim(claims, key, other.info.run_id):
                    self.client.delete_run(mine)
                    return other.info.run_id, False
        raise RuntimeError(
            f"Could not claim an MLflow run for {run_id!r} in experiment {self.experiment!r}: "
            f"{MAX_CLAIM_GENERATIONS} claims name runs that are gone. Check that no one deletes the "
            "run while jobs still write to it."
        )

    def _claim(self, claims_run: str, key: str, mlflow_id: str) -> bool:
        """Set claim ``key`` to ``mlflow_id``: True if it holds that value now (set, or set before)."""
        from mlflow.exceptions import MlflowException

        try:
            self.client.log_param(claims_run, key, mlflow_id)
        except MlflowException as e:
            if e.error_code != "INVALID_PARAMETER_VALUE":
                raise
            return False  # another run holds this claim
        return True

    def _all_tags(self, run_id: str, snapshot: bool = False) -> dict[str, str]:
        """The tags of the run; ``snapshot``: as the last ``graph()`` read them, while recent."""
        if snapshot and self._snapshot is not None and run_id in self._snapshot[1]:
            if time.monotonic() - self._snapshot[0] < SNAPSHOT_SECONDS:
                return self._snapshot[1][run_id]
        mlflow_id = self.mlflow_run_id(run_id)
        return {} if mlflow_id is None else self._charged(run_id, self.client.get_run(mlflow_id).data.tags)

    def _charged(self, run_id: str, tags: Mapping[str, str]) -> dict[str, str]:
        """The run's tags in key order as far as the limits allow (charged to them); the rest is
        named in ``oversized``."""
        if not self.limits.bounded:
            return dict(tags)
        kept: dict[str, str] = {}
        self.limits.start(run_id)
        for key in sorted(tags):
            size = len(key.encode("utf-8")) + len(tags[key].encode("utf-8"))
            room = self.limits.room(run_id)
            if room is not None and size > room:
                why = self.limits.why(run_id, room)
                self.oversized.setdefault(run_id, set()).add(f"{len(tags) - len(kept)} tags: {why}")
                log.warning("Not reading %d tags of %s: %s", len(tags) - len(kept), run_id, why)
                break
            self.limits.charge(run_id, size)
            kept[key] = tags[key]
        return kept

    def _entries(self, run_id: str, prefix: str, snapshot: bool = False) -> list[Any]:
        """The payloads of a run's tags under ``prefix``, in tag-key order."""
        tags = self._all_tags(run_id, snapshot)
        return [e for k, v in sorted(tags.items()) if k.startswith(prefix) and (e := _entry(k, v, tags))]

    def make_ready(self) -> None:
        """Before a job's ranks write: the experiment exists (and a new SQLite store's tables)."""
        _ = self.experiment_id

    def reindex(self) -> None:
        """MLflow keeps no index of edges: the search finds them (``graph``)."""
        return None

    def filesystem(self) -> None:
        """An MLflow store is no store of files."""
        return None

    def graph(self, source_id: str | None = None, max_reads: int | None = None) -> EdgeGraph:
        """Every edge of the experiment from one search of its runs (a request per 1,000 runs);
        ``source_id``: only the edges from it. With ``max_reads`` (a view) the search stops at
        ``MAX_GRAPH_RUNS`` runs, the newest, and the graph counts the cut as ``unread``.

        The runs' tags are kept: for ``SNAPSHOT_SECONDS`` ``metadata()`` and ``artifacts()`` of a run
        read in it make no request (this object's own writes to a run drop it from the snapshot).
        The lineage view reads a store's graph, then the details of the runs it draws.
        """
        cut = self.searches_cut
        runs = self._search(f"tags.`{RUN_ID_TAG}` LIKE '%'", None if max_reads is None else MAX_GRAPH_RUNS)
        by_mlflow_id = {run.info.run_id: run for run in runs}
        tags_of: dict[str, dict[str, str]] = {}
        for run_id in {run.data.tags[RUN_ID_TAG] for run in runs}:  # each id: the run its claim names
            claimed = self._claimed(run_id, by_mlflow_id)
            if claimed is not None:
                tags_of[run_id] = self._charged(run_id, by_mlflow_id[claimed].data.tags)
                self._mlflow_ids[run_id] = claimed
        graph = EdgeGraph()
        graph.unread = self.searches_cut - cut  # a cut search: the experiment's older runs
        for run_id, tags in tags_of.items():
            for tag_key, value in tags.items():
                if tag_key.startswith(SOURCE_PREFIX) and (entry := _entry(tag_key, value, tags)):
                    if source_id is not None and entry["source"] != source_id:
                        continue
                    for name in artifact_names_key(entry["artifact_names"]):
                        graph.add(entry["source"], run_id, name)
        self._snapshot = (time.monotonic(), tags_of)
        return graph

    def _log_tags(
        self,
        run_id: str,
        entries: Mapping[str, Mapping[str, Any]],
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        """Write ``{tag key: payload}`` (split where too long, parts first) and metrics in few calls."""
        from mlflow.entities import Metric, RunTag

        parts, tags = _encode_all(entries)  # all first: a bad value writes nothing
        if self._snapshot is not None:
            self._snapshot[1].pop(run_id, None)
        mlflow_id = self.mlflow_run_id(run_id)
        if mlflow_id is None:
            # a new run: its creation carries the first batch (parts before the tags that point to
            # them); the run id tag rides with the next call, so the run shows once it has data
            first, rest = _first_batch({**parts, **tags})
            mlflow_id, won = self._create_once(run_id, first)
            self._mlflow_ids[run_id] = mlflow_id
            if won:
                parts, tags = {}, {RUN_ID_TAG: run_id, **rest}
            # a rank that lost writes all of it to the winner's run (its own, and the batch it
            # carried, are gone)
        log_tags(self.client, mlflow_id, parts)
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
        entries, metrics = _metadata_entries(kwargs)
        # a number named like a curve stays a tag: a metric at step 0 would join the curve
        self._log_tags(run_id, entries, {k: v for k, v in metrics.items() if k not in self._series_keys})

    def log_metrics(
        self,
        run_id: str,
        metrics: Mapping[str, float],
        step: int,
        entry: object = None,
        entry_name: str = "",
        key: str = "",
    ) -> None:
        """Step metrics as MLflow metrics with their step (``torchx_airflow_tracker.metrics``).

        The first point of a metric also tags the run ``torchx.series.<key>``, so readers tell a
        curve from a number logged once; ``entry`` (the fsspec form) is not needed here.
        """
        from mlflow.entities import Metric, RunTag

        keys = {_tag_key("", name): value for name, value in metrics.items()}
        new = [key for key in keys if key not in self._series_keys]
        mlflow_id = self.mlflow_run_id(run_id, create=True)
        if mlflow_id is None:  # create=True always makes one
            raise RuntimeError(f"No MLflow run for {run_id!r} in experiment {self.experiment!r}.")
        if self._snapshot is not None:
            self._snapshot[1].pop(run_id, None)
        now = int(time.time() * 1000)
        self.client.log_batch(
            mlflow_id,
            metrics=[Metric(key, value, now, step) for key, value in keys.items()],
            tags=[RunTag(_tag_key(SERIES_PREFIX, key), key) for key in new],
        )
        self._series_keys.update(new)

    def check_metadata(self, **kwargs: object) -> None:
        """Raise what ``add_metadata`` would, without writing (a multi-store checks every store first)."""
        _encode_all(_metadata_entries(kwargs)[0])

    def check_artifact(self, name: str, path: str, metadata: Mapping[str, object] | None = None) -> None:
        """Raise what ``add_artifact`` would, without writing."""
        _encode_all({_tag_key(ARTIFACT_PREFIX, name): {"name": name, "path": path, "metadata": metadata}})

    def metadata(self, run_id: str) -> Mapping[str, object]:
        return {entry["key"]: entry["value"] for entry in self._entries(run_id, METADATA_PREFIX, True)}

    def add_artifact(
        self, run_id: str, name: str, path: str, metadata: Mapping[str, object] | None = None
    ) -> None:
        self._log_tags(
            run_id, {_tag_key(ARTIFACT_PREFIX, name): {"name": name, "path": path, "metadata": metadata}}
        )

    def artifacts(self, run_id: str) -> Mapping[str, TrackerArtifact]:
        entries = self._entries(run_id, ARTIFACT_PREFIX, True)
        return {
            str(e["name"]): TrackerArtifact(
                str(e["name"]),
                str(e["path"]),
                e.get("metadata") if isinstance(e.get("metadata"), dict) else None,
            )
            for e in entries
        }

    def _parents(self, run_id: str) -> dict[str, tuple[str | None, ...]]:
        entries = self._entries(run_id, SOURCE_PREFIX)
        return {e["source"]: artifact_names_key(e["artifact_names"]) for e in entries}

    def _children(self, run_id: str) -> dict[str, tuple[str | None, ...]]:
        tag_key = SOURCE_PREFIX + _digest(run_id)
        children: dict[str, tuple[str | None, ...]] = {}
        for run in self._search(f"tags.`{tag_key}` LIKE '%'", self.limits.run_entries):
            entry = _entry(tag_key, run.data.tags[tag_key], run.data.tags)
            child = run.data.tags.get(RUN_ID_TAG)
            if child and entry and entry["source"] == run_id:
                children[child] = artifact_names_key(entry["artifact_names"])
        return children

    def add_source(self, run_id: str, source_id: str, artifact_name: str | None = None) -> None:
        # the edge's own tag, read whole: a writer's read is never cut by the readers' limits (a cut
        # read would rewrite the edge without the names it held)
        tag_key = SOURCE_PREFIX + _digest(source_id)
        mlflow_id = self.mlflow_run_id(run_id)
        tags = {} if mlflow_id is None else self.client.get_run(mlflow_id).data.tags
        entry = _entry(tag_key, tags[tag_key], tags) if tag_key in tags else None
        names = artifact_names_key(entry["artifact_names"]) if entry and entry["source"] == source_id else ()
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

    @cached_property
    def cache_records(self) -> MlflowCacheRecords:
        """The provider's cache records, one run per key in experiment ``.torchx-cache.<id>``."""
        from torchx_airflow_tracker.cache_records import MlflowCacheRecords

        return MlflowCacheRecords(self)

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
