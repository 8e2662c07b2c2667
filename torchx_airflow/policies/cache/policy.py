"""A task's cache (``policies.cache.inputs``) as the operator drives it: key, lookup, hit, record.

``TaskCache`` takes values (the task's hook, trackers, context), never the operator. Before
submitting, ``key`` computes the task's key and ``lookup`` finds a usable record; a hit is turned
into the task's result by ``use`` (no submission), a miss is remembered (``remember``: Airflow's
``task_state_store``, so a retry that reattaches, or a deferred task that resumes, records the key
of the job it waited on) and recorded by ``record`` once the app SUCCEEDED.

A hit leaves the same traces as a run: XCom ``app_handle`` (the earlier run's handle),
``torchx_run_id``, the asset events of ``artifact_assets`` and the OpenLineage events. Its tracker
run is the task's own ``airflow://<dag>/<run>/<task>[/<map>]`` run: its sources are the task's DAG
parents (named by artifact, as for an app) and the earlier run, its metadata the Airflow identity
plus ``airflow_cached_from`` (the earlier handle) and ``airflow_cache_key``, its artifacts the
earlier run's; children of the task link to it as to any tracked run. A hit's result is the
signed record's (``policies.cache.records``); its extra links are only ever http(s) URLs, and its
``cost`` is 0 (nothing was spent), the earlier run's usage and cost under ``cached_usage``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXComponentError, TorchXConfigError
from torchx_airflow.lineage.keys import CACHE_KEY_KEY, CACHED_FROM_KEY, XCOM_CACHE_KEY
from torchx_airflow.policies.cache.inputs import (
    IGNORED,
    file_inputs,
    ignore_args,
    key_inputs,
    key_of,
    parent_inputs,
    with_prepared_changes,
)
from torchx_airflow.policies.cache.records import find_record, new_record, write_record
from torchx_airflow.policies.cache.signing import CacheKeys, deployment_keys
from torchx_airflow.run.execution import NEW, REATTACHED
from torchx_airflow.run.points import RunPolicy, ShortCut
from torchx_airflow.run.state import CACHE_KEY, HANDLE_KEY
from torchx_airflow.settings.options import BY_NAME

if TYPE_CHECKING:
    from airflow.sdk import Asset, AssetAlias, Context
    from torchx.specs import AppDef

    from torchx_airflow.hooks.torchx import TorchXHook
    from torchx_airflow.lineage.stores import TrackerSet
    from torchx_airflow.policies.cache.fingerprints import ReadScope
    from torchx_airflow.run.execution import TaskRun


@dataclass(frozen=True)
class CacheSettings:
    """What a task's cache needs to know besides its app: ``cache_salt``, ``cache_ignore_args``,
    ``cache_ttl`` (seconds), the scope (``dag:<dag_id>`` or ``deployment``) and the deployment's keys."""

    keys: CacheKeys
    salt: str = ""
    ignore_args: tuple[str, ...] = ()
    ttl: float = float(BY_NAME["cache_ttl"].default)
    scope: str = "deployment"
    #: the deployment's output roots (``settings.resolve.output_roots``): what is read besides the
    #: task's own arguments' outputs and its stores
    output_roots: tuple[str, ...] = ()


def scope_of(cache_scope: str, dag_id: str) -> str:
    """The scope a key and its record carry: ``dag:<dag_id>`` for ``"dag"``, else ``deployment``.

    >>> scope_of("dag", "train")
    'dag:train'
    """
    return f"dag:{dag_id}" if cache_scope == "dag" else "deployment"


def is_web_url(value: Any) -> bool:
    """Whether ``value`` may become an extra link: an http(s) URL (never ``javascript:`` or ``data:``).

    >>> is_web_url("javascript:alert(1)"), is_web_url("https://ui.example/app/1")
    (False, True)
    """
    from urllib.parse import urlsplit

    if not isinstance(value, str) or any(ord(c) < 33 for c in value):
        return False
    parts = urlsplit(value)
    return parts.scheme.lower() in ("http", "https") and bool(parts.netloc)


def hit_result(record: Mapping[str, Any], key: str) -> dict[str, Any]:
    """A hit's result from a verified record: nothing was spent (``cost`` 0), the earlier run's
    usage and cost are referenced under ``cached_usage``; a ``ui_url`` that is not http(s) is dropped."""
    handle = str(record["app_handle"])
    result = {**record["result"], "cache_hit": True, "cached_from": handle, "cache_key": key}
    spent = {k: result.pop(k) for k in ("usage", "cost") if k in result}
    if spent:
        result["cached_usage"] = {**spent, "app_handle": handle}
        result["cost"] = 0.0
    if "ui_url" in result and not is_web_url(result["ui_url"]):
        result.pop("ui_url")
    return result


def cache_enabled(task_value: bool | None, connection_value: bool, wait_for_completion: bool) -> bool:
    """The task's ``cache``, else its connection's; off for a task that does not wait (it never
    sees its app succeed, so it could never record a key)."""
    enabled = connection_value if task_value is None else task_value
    return bool(enabled) and wait_for_completion


def key_app(
    task_id: str,
    *,
    component: str | None,
    component_args: Any,
    app: AppDef | None,
    env: Any,
    app_name: str | None,
    rules: Sequence[str],
) -> AppDef:
    """The task's app as its key sees it: without the provider's env, ignored arguments replaced
    (in ``component_args`` for a component, in each role's arguments for an ``AppDef``)."""
    from torchx_airflow.apps import build_task_app, normalize_component_args

    if component is not None:
        args = ignore_args(normalize_component_args(component_args), rules)
        try:
            return build_task_app(
                task_id, component=component, component_args=args, env=env, app_name=app_name
            )
        except TorchXComponentError as e:
            if IGNORED not in args:
                raise
            raise TorchXConfigError(
                f"Task {task_id!r}: with the arguments cache_ignore_args {list(rules)!r} leaves out, "
                f"component {component!r} does not build ({e}). Ignore only arguments the job reads, such "
                "as the value of an option after '--'."
            ) from e
    built = build_task_app(task_id, app=app, env=env, app_name=app_name)
    for role in built.roles:
        role.args = ignore_args([str(a) for a in role.args], rules)
    return built


class TaskCache:
    """One task execution's cache.

    :param settings: the task's salt, ignored arguments and expiry.
    :param trackers: the task's trackers (records live in their stores).
    :param tracker_timeout: seconds each tracker step gets; past it, caching is off for the step.
    :param task_log: the task's logger.
    """

    def __init__(
        self, settings: CacheSettings, trackers: TrackerSet, tracker_timeout: float, task_log: Any
    ) -> None:
        self.settings = settings
        self.trackers = trackers
        self.tracker_timeout = tracker_timeout
        self.log = task_log

    def key(self, hook: TorchXHook, app: AppDef, context: Context) -> str | None:
        """The key of ``app`` (``key_app``) on the hook's scheduler, given the task's parents; None,
        with a warning, when an input cannot be read (then nothing is cached)."""
        from torchx_airflow.lineage.edges import parent_runs
        from torchx_airflow.retry import call_within

        scheduler = hook.scheduler
        cfg = hook.resolve_cfg(scheduler, hook.cfg)
        support = hook.support(scheduler)
        digests = {r.image: d for r in app.roles if (d := support.image_digest(r.image)) is not None}
        try:  # Airflow is asked in this thread (its API client is the task's); the stores in another
            parents = parent_runs(context)
        except Exception as e:
            self.log.warning("Not caching this run: its parents cannot be read: %s: %s", type(e).__name__, e)
            return None

        def compute() -> tuple[str, dict[str, Any]]:
            # a parent's artifact is read only under what the task's arguments and stores name
            scope = self.read_within(app)
            inputs = key_inputs(
                app,
                scheduler,
                cfg,
                keys=self.settings.keys,
                scope=self.settings.scope,
                files=file_inputs(app),
                parents=parent_inputs(self.trackers.stores[0], parents, scope) if parents else [],
                salt=self.settings.salt,
                image_digests=digests,
            )
            return key_of(inputs), inputs

        done, value = call_within(self.tracker_timeout, "Computing the cache key", compute)
        if not done:
            self.log.warning("Not caching this run: its cache key could not be computed (see above)")
            return None
        key, inputs = value
        self.log.info("TorchX cache key %s of: %s", key, json.dumps(inputs, sort_keys=True))
        return str(key)

    def read_within(self, app: AppDef) -> ReadScope:
        """Where this task reads outputs and parents' artifacts: what ``app``'s own arguments and the
        task's stores name (``fingerprints.read_scope``)."""
        from torchx_airflow.policies.cache.fingerprints import read_scope

        return read_scope(app, self.trackers.stores, self.settings.output_roots)

    def lookup(self, key: str, app: AppDef) -> dict[str, Any] | None:
        """The usable record of ``key`` in the task's stores (the first that has one), or None; its
        outputs are checked within the read scope of ``app`` (the task's app)."""
        from torchx_airflow.retry import call_within

        def find() -> dict[str, Any] | None:
            settings = self.settings
            stores, within = self.trackers.stores, self.read_within(app)
            return find_record(stores, key, settings.scope, settings.ttl, settings.keys, self.log, within)

        done, record = call_within(self.tracker_timeout, f"Looking up cache key {key}", find)
        return record if done else None

    def remember(self, key: str, store: Any, ti: Any) -> None:
        """Keep the key of the run about to be submitted, for whichever try or resume sees it end
        (in the task's state ``store`` when it has one, and in XCom)."""
        if store is not None:
            store.set(CACHE_KEY, key)
        ti.xcom_push(key=XCOM_CACHE_KEY, value=key)

    def recall(self, store: Any, ti: Any) -> str | None:
        """The key ``remember`` kept for this task instance, if any."""
        key = store.get(CACHE_KEY) if store is not None else None
        if not key:
            key = ti.xcom_pull(task_ids=ti.task_id, key=XCOM_CACHE_KEY, map_indexes=ti.map_index)
        return key if isinstance(key, str) and key else None

    def record(
        self, key: str, app_handle: str, result: Mapping[str, Any], context: Context, app: AppDef
    ) -> dict[str, Any]:
        """The result of a run that SUCCEEDED, marked a miss, after writing its record to every store
        (its outputs fingerprinted within the read scope of ``app``, the task's app)."""
        from torchx_airflow.lineage.edges import airflow_metadata
        from torchx_airflow.retry import call_within

        result = {**result, "cache_hit": False, "cache_key": key}
        airflow = airflow_metadata(context)  # asked of Airflow here, not in the writing thread

        def write() -> int:
            settings = self.settings
            within = self.read_within(app)
            record = new_record(
                key, settings.scope, app_handle, result, settings.ttl, airflow, settings.keys, within
            )
            self._unchecked_outputs(record, app_handle)
            return write_record(self.trackers.stores, key, record, self.log)

        done, written = call_within(self.tracker_timeout, f"Writing cache record {key}", write)
        if done and written:
            self.log.info("Recorded cache key %s for %s in %d tracker store(s)", key, app_handle, written)
        return result

    def _unchecked_outputs(self, record: Mapping[str, Any], app_handle: str) -> None:
        """Warn about the outputs a record holds no fingerprint of: they lie outside the task's
        output roots, so a later hit cannot check that they still hold what they held."""
        unread = sorted(path for path, held in (record.get("outputs") or {}).items() if held is None)
        if unread:
            self.log.warning(
                "Cache record of %s: its outputs %s lie outside the task's output roots, so a later hit "
                "cannot check that they are unchanged. Add the directory the task's jobs write to, to "
                "output_roots (the torchx connection's extra, or [torchx] output_roots).",
                app_handle,
                unread,
            )

    def use(
        self,
        record: Mapping[str, Any],
        key: str,
        app: AppDef,
        context: Context,
        artifact_assets: Mapping[str, Asset | AssetAlias],
        output_roots: Sequence[str] = (),
    ) -> dict[str, Any]:
        """The task's result from a hit: the earlier run's, with its XComs, lineage and asset events
        (its artifacts under the task's ``output_roots``)."""
        from torchx_airflow.lineage.assets import emit_asset_events
        from torchx_airflow.lineage.keys import XCOM_RUN_ID, XCOM_TRACKER_URL, XCOM_UI_URL

        handle = str(record["app_handle"])
        result = hit_result(record, key)
        when = (record.get("airflow") or {}).get("airflow_run_id", "?")
        self.log.info(
            "TorchX cache hit: key %s is that of %s (run %s), which SUCCEEDED: nothing submitted",
            key,
            handle,
            when,
        )
        ti = context["ti"]
        if is_web_url(result.get("ui_url")):
            ti.xcom_push(key=XCOM_UI_URL, value=result["ui_url"])
        run_id, tracker_url = self._record_hit(handle, key, result, app, context)
        ti.xcom_push(key=XCOM_RUN_ID, value=run_id)
        if is_web_url(tracker_url):
            ti.xcom_push(key=XCOM_TRACKER_URL, value=tracker_url)
        # the earlier run's artifacts lie under the roots its task recorded them within (signed)
        recorded_roots = [str(r) for r in record.get("read_roots") or () if isinstance(r, str)]
        emit_asset_events(context, artifact_assets, result, (*output_roots, *recorded_roots))
        return result

    def _record_hit(
        self, handle: str, key: str, result: Mapping[str, Any], app: AppDef, context: Context
    ) -> tuple[str, str | None]:
        """The hit's tracker run (see the module's docstring) and its MLflow page."""
        from torchx_airflow.apps import airflow_run_id
        from torchx_airflow.lineage.edges import airflow_metadata, artifact_labels, parent_runs, record_run
        from torchx_airflow.retry import call_within

        ti = context["ti"]
        run_id = airflow_run_id(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
        stores = self.trackers.stores
        try:
            parents = parent_runs(context)
        except Exception as e:  # the hit stands; only its edges to the DAG's parents are missing
            self.log.warning("Cache hit %s: its parents cannot be read: %s: %s", run_id, type(e).__name__, e)
            parents = []
        metadata = {**airflow_metadata(context), CACHED_FROM_KEY: handle, CACHE_KEY_KEY: key}

        def write() -> str | None:
            labels = artifact_labels(stores[0], parents, app) if parents else {}
            for store in stores:
                for name, artifact in (result.get("artifacts") or {}).items():
                    store.add_artifact(run_id, name, artifact["path"], artifact.get("metadata") or None)
            record_run(stores, run_id, [*parents, handle], metadata, labels)
            return self.trackers.run_url(run_id)

        done, url = call_within(self.tracker_timeout, f"Recording the cache hit of {run_id}", write)
        if done:
            self.log.info(
                "Tracked %s in %s, cached from %s", run_id, ", ".join(self.trackers.conn_ids), handle
            )
        return run_id, url if done else None


class CachePolicy(RunPolicy):
    """Before submitting, the result of an earlier run with the task's key (nothing submitted);
    after a run SUCCEEDED, its record. The key is the prepared app's (``run.points``): what every
    policy's ``prepare`` changed is in it.

    :param cache: the task's ``cache`` (None: the connection's extra ``cache``, else off).
    :param salt: ``cache_salt`` (rendered); :param ignore_args: ``cache_ignore_args``.
    :param ttl: the task's ``cache_ttl`` (None: the connection's, else ``[torchx] cache_ttl``).
    :param scope: the task's ``cache_scope`` (None: the connection's, else ``[torchx] cache_scope``).
    """

    name = "cache"

    def __init__(
        self,
        cache: bool | None,
        salt: str,
        ignore_args: tuple[str, ...],
        ttl: float | None,
        scope: str | None = None,
    ) -> None:
        self.cache, self.salt, self.ignore_args, self.ttl = cache, salt, ignore_args, ttl
        self.scope = scope

    def task_cache(self, run: TaskRun) -> TaskCache | None:
        """This execution's cache, or None when caching is off (``cache``, else the connection's)."""
        memo = run.memo(self)
        if "cache" not in memo:
            memo["cache"] = self._task_cache(run)
        cache: TaskCache | None = memo["cache"]
        return cache

    def _task_cache(self, run: TaskRun) -> TaskCache | None:
        from torchx_airflow.settings.resolve import resolve

        settings = run.hook.settings
        if not cache_enabled(self.cache, settings.cache, run.wait_for_completion):
            return None
        if not run.trackers:
            raise TorchXConfigError(
                f"{run.where} is cached (cache={self.cache!r}, connection {run.hook.torchx_conn_id!r} "
                f"cache={settings.cache!r}) but has no tracker: cache records live in the task's trackers. "
                "Give it tracker connections (tracker_conn_ids or the connection's extra 'trackers'), or "
                "set cache=False. Nothing was submitted."
            )
        keys = deployment_keys(run.where)  # before anything is submitted: no key, no cache
        ttl = float(resolve("cache_ttl", self.ttl, settings.cache_ttl))
        scope = scope_of(str(resolve("cache_scope", self.scope, settings.cache_scope)), run.ti.dag_id)
        from torchx_airflow.settings.resolve import output_roots

        roots = output_roots(settings)
        settings_ = CacheSettings(keys, str(self.salt or ""), self.ignore_args, ttl, scope, roots)
        return TaskCache(settings_, run.trackers, run.tracker_timeout, run.log)

    def _key(self, run: TaskRun, cache: TaskCache, app: AppDef) -> str | None:
        """The key of ``app``, the prepared app: the task's app as its key sees it (``key_app``), with
        what the policies' ``prepare`` changed of the built app (``with_prepared_changes``)."""
        run.trackers.check_within(run.tracker_timeout, run.where)
        rules = cache.settings.ignore_args
        keyed = with_prepared_changes(
            key_app(run.task_id, **run.app_parts, rules=rules), run.built_app, app, rules
        )
        return cache.key(run.hook, keyed, run.context)

    def before_submit(self, run: TaskRun, *, app: AppDef, **kwargs: Any) -> ShortCut | None:
        """A hit's result; None to submit. A task with a job of its own (an earlier try's, to
        replace) never takes another run's result: it keeps the key of its own submission."""
        cache = self.task_cache(run) if run.submission == NEW else None
        if cache is None:
            return None
        if run.store is not None and run.store.get(HANDLE_KEY):
            self._remember_own(run, cache, app)
            return None
        key = self._key(run, cache, app)
        if key is None:
            return None
        record = cache.lookup(key, app)
        if record is None:
            run.log.info("TorchX cache miss: key %s has no usable record; submitting", key)
            cache.remember(key, run.store, run.ti)
            return None
        result = cache.use(record, key, app, run.context, run.artifact_assets, run.output_roots)
        return ShortCut(result, str(record["app_handle"]))

    def _remember_own(self, run: TaskRun, cache: TaskCache, app: AppDef) -> None:
        if cache.recall(run.store, run.ti) is None and (key := self._key(run, cache, app)):
            cache.remember(key, run.store, run.ti)

    def submitted(self, run: TaskRun, *, app_handle: str, **kwargs: Any) -> None:
        if run.submission == REATTACHED and (cache := self.task_cache(run)) is not None:
            self._remember_own(run, cache, run.app)

    def finished(
        self, run: TaskRun, *, app_handle: str, result: dict[str, Any], **kwargs: Any
    ) -> dict[str, Any]:
        """A run that SUCCEEDED records its key (``finish_run`` raised for any other end)."""
        cache = self.task_cache(run)
        if cache is not None and (key := cache.recall(run.store, run.ti)):
            result = cache.record(key, app_handle, result, run.context, run.app)
        return result
