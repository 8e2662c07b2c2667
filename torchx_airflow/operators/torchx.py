"""Operators that dry-run and run TorchX apps.

``TorchXDryRunOperator`` (``operators/dryrun.py``) shows exactly what would be submitted;
``TorchXOperator`` submits it, keeps the app handle the moment it exists, and waits while streaming
the app's logs. Both are imported from here. Importing this module imports no TorchX scheduler,
MLflow, s3fs or docker module.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import ResumableJobMixin
from airflow.sdk.configuration import conf
from torchx_airflow_tracker.compat import cached_property

from torchx_airflow.apps import SUCCEEDED, role_replicas
from torchx_airflow.assets import check_artifact_assets
from torchx_airflow.cache import check_ignore_args, check_ttl
from torchx_airflow.exceptions import TorchXAppFailedError, TorchXConfigError
from torchx_airflow.kills import KillGuard
from torchx_airflow.links.torchx import TorchXAppLink, TorchXTrackerLink
from torchx_airflow.operators.dryrun import XCOM_APP_HANDLE, TorchXDryRunOperator

__all__ = ["XCOM_APP_HANDLE", "TorchXDryRunOperator", "TorchXOperator"]

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Asset, AssetAlias, Context
    from torchx.specs import AppDef, AppStatus
    from torchx.tracker.api import TrackerBase

    from torchx_airflow.caching import TaskCache
    from torchx_airflow.durable import DurableSubmission
    from torchx_airflow.resubmission import Resubmission
    from torchx_airflow.usage import RunAccounting
    from torchx_airflow.waiting import WorkerWait


# App states worth reattaching to; UNKNOWN is what some schedulers report right after submission.
_ACTIVE_STATES = frozenset({"UNSUBMITTED", "SUBMITTED", "PENDING", "RUNNING", "UNKNOWN"})


class TorchXOperator(ResumableJobMixin, TorchXDryRunOperator):
    """Run a TorchX app: dry run, submit, and (by default) wait while streaming its logs.

    The app handle ``scheduler://session/app_id`` goes to Airflow's ``task_state_store`` and to XCom
    key ``app_handle`` as soon as the app is submitted. Right after, every tracker records the app's
    parents (the nearest upstream TorchX apps and tracked tasks) as its sources, and the Airflow
    context as its metadata.

    A new try of the task looks at the handle of the previous one first: an app still running is
    reattached (no new submission), an app that SUCCEEDED returns its result, an app that failed, was
    cancelled or is unknown to its scheduler is submitted anew. The same holds in deferrable mode.
    On schedulers that can find a job by a mark (Slurm: a word in its comment), a try that died
    while its submission was under way leaves that mark in ``task_state_store`` first: the next try
    finds the job and reattaches to it, even if the handle was never recorded.

    The return value is ``{app_handle, state, msg, structured_error_msg, num_restarts, ui_url,
    roles: {role: [replica states]}, metadata, artifacts: {name: {name, path, metadata}}, sources}``,
    ``metadata``/``artifacts``/``sources`` read from the first tracker when the app ends. The task
    fails with ``TorchXAppFailedError`` unless the app SUCCEEDED.

    Killing the task (marking it failed or success, clearing it) cancels the app, also while it waits
    in the triggerer; ``execution_timeout`` cancels it too. The worker (or triggerer) running the wait
    going away does not: a SIGTERM while the task instance is still running (a deploy, a pod
    eviction, ``systemctl stop``) leaves the app for the next try to reattach, and a wait in the
    worker ends at once with the retryable ``TorchXWaitInterruptedError`` (see
    :mod:`torchx_airflow.kills`).

    :param wait_for_completion: wait until the app is terminal (default). With False the task
        returns after submission; a ``TorchXAppSensor`` can wait on the handle instead.
    :param deferrable: wait in the triggerer (``TorchXAppTrigger``) instead of the worker. Default:
        ``[operators] default_deferrable``. Needs a scheduler whose apps outlive the launching
        process (slurm, kubernetes, ...); on local_cwd and local_docker the task waits in the
        worker instead, with a warning, so one DAG runs on either.
    :param poll_interval: seconds between status checks while waiting (default ``[torchx]
        poll_interval``, 5; in the triggerer, at least
        ``triggers.poller.MIN_POLL_INTERVAL``: the query is shared by every wait on the connection).
    :param outage_timeout: seconds a wait goes on while the scheduler gives no answer (a controller
        restart, an API server failing over), counted from its last good answer; None takes the
        connection's ``outage_timeout`` extra, else ``[torchx] outage_timeout`` (600 s). See
        :mod:`torchx_airflow.retry`.
    :param stream_logs: write every replica's log lines into the task log, prefixed ``[role/replica]``
        (as they arrive when waiting in the worker; when the task resumes after a deferred wait).
    :param max_log_lines: after a deferred wait, at most this many last lines per replica and stream
        (default ``[torchx] max_log_lines``, 1000).
    :param durable: keep the handle in ``task_state_store`` so a retry reattaches (default True).
    :param tracker_timeout: seconds the task gives its trackers at each step (default ``[torchx]
        tracker_timeout``, 60): opening them before
        submission (past it the task fails, nothing submitted), recording lineage and metadata after
        submission, reading results at the end (past it, a warning: the app is never lost or
        duplicated because a tracker hangs).
    :param infrastructure_retries: times a job the infrastructure ended (Slurm ``NODE_FAIL``,
        ``PREEMPTED``, ``BOOT_FAIL``) is resubmitted within this try, without using ``retries``;
        None takes the connection's ``infrastructure_retries`` extra, else ``[torchx]
        infrastructure_retries`` (3). A job that fails for its own reasons is never resubmitted.
    :param checkpoint_artifact: the artifact (``AppRun.add_artifact``) whose path a resubmitted job
        gets in ``TORCHX_AIRFLOW_RESUME_FROM``, with its attempt number in ``TORCHX_AIRFLOW_ATTEMPT``
        (see :mod:`torchx_airflow.resubmission`).
    :param artifact_assets: artifact name -> ``Asset`` or ``AssetAlias`` of the task's ``outlets``:
        when the app SUCCEEDS, the asset event carries the app handle, the artifact's path and
        metadata, and the try number (see :mod:`torchx_airflow.assets`).
    :param expected_duration: how long the app is expected to run (a ``timedelta`` or seconds), for
        the cost estimate when the connection has a price table; without it, the elapsed time of the
        task's last successful run (see :mod:`torchx_airflow.usage`).
    :param max_cost: fail before submitting anything when the estimated cost is over this amount
        (in the price table's currency); needs a price table on the connection and a duration.

    When the app ends, the result's ``usage`` holds what it used by the scheduler's own accounting
    (Slurm: ``sacct``; local_cwd: the replica processes; others: requested resources x elapsed) and,
    with a price table, ``cost`` its estimate and actual cost; the same go to the trackers' metadata
    (``torchx_usage``, ``torchx_cost``), also for an app that failed.
    :param cache: before submitting, look for an earlier run with the same inputs (the app, the
        scheduler and its cfg, the files the arguments name, the parents' artifacts, ``cache_salt``)
        that SUCCEEDED, and return its result (with ``cache_hit: True`` and ``cached_from``) instead
        of submitting; a run that SUCCEEDS records its key in the task's trackers. None (default):
        the connection's extra ``cache``, else off. Needs a tracker and ``wait_for_completion``. See
        :mod:`torchx_airflow.cache`.
    :param cache_salt: any text, part of the key: change it to run again whatever the cache holds
        (templated).
    :param cache_ignore_args: arguments that do not change the result, left out of the key: an
        option name (``"--out"``) leaves out its value, anything else is an ``fnmatch`` pattern
        matched against whole arguments (``"/tmp/run-*"``).
    :param cache_ttl: seconds (or a ``timedelta``) a recorded result is reused; None: the
        connection's extra ``cache_ttl``, else 30 days.

    Other parameters are those of :class:`TorchXDryRunOperator`.
    """

    template_fields: Sequence[str] = (*TorchXDryRunOperator.template_fields, "cache_salt")
    operator_extra_links = (TorchXAppLink(), TorchXTrackerLink())
    external_id_key = "torchx_app_handle"

    def __init__(
        self,
        *,
        wait_for_completion: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = conf.getfloat("torchx", "poll_interval", fallback=5.0),
        stream_logs: bool = True,
        max_log_lines: int = conf.getint("torchx", "max_log_lines", fallback=1000),
        tracker_timeout: float = conf.getfloat("torchx", "tracker_timeout", fallback=60.0),
        outage_timeout: float | None = None,
        infrastructure_retries: int | None = None,
        checkpoint_artifact: str = "checkpoint",
        artifact_assets: Mapping[str, Asset | AssetAlias] | None = None,
        expected_duration: timedelta | float | None = None,
        max_cost: float | None = None,
        cache: bool | None = None,
        cache_salt: str = "",
        cache_ignore_args: Sequence[str] | None = None,
        cache_ttl: float | timedelta | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        from torchx_airflow.pricing import check_cost_params

        self.expected_duration, self.max_cost = check_cost_params(self.task_id, expected_duration, max_cost)
        for name, seconds in (("tracker_timeout", tracker_timeout), ("poll_interval", poll_interval)):
            if seconds <= 0:
                raise TorchXConfigError(f"{name} must be a positive number of seconds, got {seconds!r}.")
        self.artifact_assets = check_artifact_assets(
            self.task_id, artifact_assets, self.outlets, wait_for_completion
        )
        if max_log_lines < 0:
            raise TorchXConfigError(f"max_log_lines must be 0 or more, got {max_log_lines!r}.")
        self.wait_for_completion = wait_for_completion
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.stream_logs = stream_logs
        self.max_log_lines = max_log_lines
        self.tracker_timeout = tracker_timeout
        from torchx_airflow.retry import check_outage_timeout

        self.outage_timeout = check_outage_timeout(outage_timeout, f"Task {self.task_id!r}")
        from torchx_airflow.resubmission import check_checkpoint_artifact, check_infrastructure_retries

        where = f"Task {self.task_id!r}"
        self.infrastructure_retries = check_infrastructure_retries(infrastructure_retries, where)
        self.checkpoint_artifact = check_checkpoint_artifact(checkpoint_artifact, where)
        self._check_cache(cache, wait_for_completion)
        self.cache = cache
        self.cache_salt = cache_salt
        self.cache_ignore_args = check_ignore_args(cache_ignore_args, f"Task {self.task_id!r}")
        self.cache_ttl = check_ttl(cache_ttl, f"Task {self.task_id!r}")
        self._app_handle: str | None = None
        self._status: AppStatus | None = None
        self._status_of: str | None = None  # the handle self._status is of
        self._result: dict[str, Any] | None = None
        self._submitted_here = False
        self._kills = KillGuard()

    def execute(self, context: Context) -> dict[str, Any]:
        from torchx_airflow.waiting import check_waitable

        self.deferrable = check_waitable(self.hook, self.wait_for_completion, self.deferrable, self.log)
        try:
            with self._kills.running(context["ti"]):
                self._durable(context).recover()  # a try that died submitting left a mark
                cached = self._cached_result(context)
                if cached is not None:
                    return cached
                return self.execute_resumable(context)
        finally:
            self.hook.close()

    # caching (torchx_airflow.cache, torchx_airflow.caching)

    def _check_cache(self, cache: bool | None, wait_for_completion: bool) -> None:
        if cache and not wait_for_completion:
            raise TorchXConfigError(
                f"Task {self.task_id!r}: cache=True needs wait_for_completion=True: a task that does not "
                "wait never sees its app succeed, so it could never record a result to reuse. Set "
                "wait_for_completion=True, or cache=False."
            )

    @cached_property
    def _cache(self) -> TaskCache | None:
        """This task's cache, or None when caching is off (``cache``, else the connection's)."""
        from torchx_airflow.cache import DEFAULT_TTL
        from torchx_airflow.caching import CacheSettings, TaskCache, cache_enabled

        settings = self.hook.settings
        if not cache_enabled(self.cache, settings.cache, self.wait_for_completion):
            return None
        if not self.trackers:
            raise TorchXConfigError(
                f"Task {self.task_id!r} is cached (cache={self.cache!r}, connection {self.torchx_conn_id!r} "
                f"cache={settings.cache!r}) but has no tracker: cache records live in the task's trackers. "
                "Give it tracker connections (tracker_conn_ids or the connection's extra 'trackers'), or "
                "set cache=False. Nothing was submitted."
            )
        ttl = self.cache_ttl or settings.cache_ttl or DEFAULT_TTL
        cache_settings = CacheSettings(str(self.cache_salt or ""), self.cache_ignore_args, ttl)
        return TaskCache(cache_settings, self.trackers, self.tracker_timeout, self.log)

    def _cache_key(self, cache: TaskCache, context: Context) -> str | None:
        from torchx_airflow.caching import key_app

        self.trackers.check_within(self.tracker_timeout, f"Task {self.task_id!r}")
        app = key_app(self.task_id, **self.app_parts(), rules=cache.settings.ignore_args)
        return cache.key(self.hook, app, context)

    def _cached_result(self, context: Context) -> dict[str, Any] | None:
        """With caching on, the result of an earlier run with this task's key (nothing submitted);
        None to go on and submit. A task with a job of its own (an earlier try's, to reattach to or
        to replace) never takes another run's result: it keeps the key of its own submission."""
        cache = self._cache
        if cache is None:
            return None
        store = context.get("task_state_store") if self.durable else None
        if store is not None and store.get(self.external_id_key):
            if cache.recall(context, self.durable) is None and (key := self._cache_key(cache, context)):
                cache.remember(key, context, self.durable)
            return None
        key = self._cache_key(cache, context)
        if key is None:
            return None
        record = cache.lookup(key)
        if record is None:
            self.log.info("TorchX cache miss: key %s has no usable record; submitting", key)
            cache.remember(key, context, self.durable)
            return None
        self._result = cache.use(record, key, self._app, context, self.artifact_assets)
        self._publish_handle(str(record["app_handle"]), context)
        return self._result

    # ResumableJobMixin: submit once, remember the handle, reattach on the next try

    @cached_property
    def _app(self) -> AppDef:
        """The app of this execution, built once: submitted, or waited on after a reattach."""
        return self.build_app()

    def _publish_handle(self, app_handle: str, context: Context) -> None:
        """XCom ``app_handle``, once per execution (a new try starts with its XComs cleared)."""
        if self._app_handle != app_handle:
            self._app_handle = app_handle
            context["ti"].xcom_push(key=XCOM_APP_HANDLE, value=app_handle)

    def _durable(self, context: Context) -> DurableSubmission:
        from torchx_airflow.durable import DurableSubmission

        store = context.get("task_state_store") if self.durable else None
        return DurableSubmission(
            self.hook, store, self.external_id_key, self.task_id, self.log, self._outage_budget()
        )

    @cached_property
    def _accounting(self) -> RunAccounting:
        """The app's cost estimate before it is submitted, its usage and cost when it ends."""
        from torchx_airflow.usage import RunAccounting

        return RunAccounting(self.hook, self.task_id, self.max_cost, self.expected_duration, self.log)

    def submit_job(self, context: Context) -> str:
        # An earlier try's job that the infrastructure ended (its status was just asked) continues
        # its attempts, resuming from its checkpoint, instead of starting a new job from scratch.
        if self._status is not None and self._status_of is not None:
            status = self._status
            resubmitted = self._resubmitted(self._status_of, status.state.name, status.msg, context)
            if resubmitted is not None:
                return resubmitted
        attempts = self._resubmission(context).attempts
        attempts.reset()  # before submitting: an earlier try's chain must not count against this job
        app_handle = self._submit(self._app, context)
        attempts.started(app_handle)
        return app_handle

    def _submit(self, app: AppDef, context: Context) -> str:
        # the task resubmits a job the infrastructure ended, resuming it: the scheduler must not
        resubmits = self.wait_for_completion and self._resubmission(context).budget > 0
        dryrun, _ = self.dryrun(app, resubmits=resubmits)
        self._accounting.before_submit(app, context)  # raises over max_cost: nothing submitted
        self.trackers.check_within(self.tracker_timeout, f"Task {self.task_id!r}")
        self._refuse_if_killed(None)
        app_handle = self._durable(context).submit(dryrun)
        self._refuse_if_killed(app_handle)  # killed while sbatch ran: on_kill cancelled the job before
        self._accounting.submitted(app_handle, context)
        self._submitted_here = True
        self.log.info("Submitted TorchX app %s", app_handle)
        self._publish_handle(app_handle, context)
        return app_handle

    def _refuse_if_killed(self, app_handle: str | None) -> None:
        """A task killed while it resubmitted (``on_kill`` cancelled the job it knew) submits nothing
        more, and cancels ``app_handle`` if it was submitted meanwhile."""
        if not self._kills.killed:
            return
        if app_handle is not None:
            self.hook.cancel(app_handle)
        raise TorchXAppFailedError(
            app_handle or str(self._app_handle), "CANCELLED", "the task was killed while resubmitting", "", {}
        )

    def get_job_status(self, external_id: Any, context: Context) -> str:
        status = self._wait.status(str(external_id))
        self._status, self._status_of = status, str(external_id)
        return status.state.name if status is not None else "NOT_FOUND"

    def is_job_active(self, status: str) -> bool:
        return status in _ACTIVE_STATES

    def is_job_succeeded(self, status: str) -> bool:
        return status == SUCCEEDED

    # ResumableJobMixin.execute returns this method's value on a reattach, though it declares None
    def poll_until_complete(self, external_id: Any, context: Context) -> dict[str, Any]:  # type: ignore[override]
        app_handle = str(external_id)
        if not self._submitted_here:
            self.log.info("Reattached to TorchX app %s from an earlier try: not submitting again", app_handle)
            self._publish_handle(app_handle, context)
        # On a reattach too: an earlier try may have died before its lineage was written (edges are
        # idempotent in the stores).
        from torchx_airflow.dag_lineage import record_task_run

        record_task_run(self.trackers, app_handle, context, self.tracker_timeout, self.log, self._app)
        if not self.wait_for_completion:
            self._status = self._wait.status(app_handle)
            return self.get_job_result(app_handle, context)
        if self.deferrable:
            # Check once before deferring: an app already done (a quick job, a reattach after it
            # ended) finishes here, printing its logs, with no round trip through the triggerer.
            status = self._wait.status(app_handle)
            if status is None or not status.is_terminal():
                self._defer(app_handle, context)
            self._print_logs(app_handle, {})
        else:
            with self._kills.only_waiting():
                status = self.wait(app_handle, self._app)
        self._status, self._status_of = status, app_handle
        if status is not None:
            resubmitted = self._resubmitted(app_handle, status.state.name, status.msg, context)
            if resubmitted is not None:
                return self.poll_until_complete(resubmitted, context)
        return self.get_job_result(app_handle, context)

    # resubmission (torchx_airflow.resubmission): a job the infrastructure ended runs again

    def _resubmission(self, context: Context) -> Resubmission:
        if self.__dict__.get("_resubmission_of") is None:
            from torchx_airflow.resubmission import Resubmission, resolve_infrastructure_retries

            budget = resolve_infrastructure_retries(
                self.infrastructure_retries, self.hook.settings.infrastructure_retries
            )
            store = context.get("task_state_store") if self.durable else None
            if store is None and self.deferrable:  # the count would not outlive a deferral
                budget = 0
            first_store = self.trackers.stores[0] if self.trackers else None
            self.__dict__["_resubmission_of"] = Resubmission(
                store, budget, self.checkpoint_artifact, first_store, self.log, self.tracker_timeout
            )
        return self.__dict__["_resubmission_of"]

    def _resubmitted(self, app_handle: str, state: str, msg: str, context: Context) -> str | None:
        """A new job for ``app_handle`` when the infrastructure ended it and the budget allows
        (resuming from its checkpoint); None when the task ends with this job."""
        if state == SUCCEEDED:
            return None
        reason = self.hook.infrastructure_reason(app_handle, state, msg)
        if reason is None:
            return None
        from torchx_airflow.triggers.torchx import task_deadline

        deadline = task_deadline(self.execution_timeout, context["ti"])
        if deadline is not None and deadline <= time.time():
            self.log.error(
                "TorchX app %s ended %s (%s) past the task's execution_timeout: not resubmitting",
                app_handle,
                state,
                reason,
            )
            return None
        resubmission = self._resubmission(context)
        attempt = resubmission.next_attempt(app_handle, state, reason)
        if attempt is None:
            return None
        # what the ended job used (and cost) stays with its attempt: the result's usage is the last job's
        usage, cost = self._accounting.at_end(app_handle, self._app, state, True, context)
        resubmission.attempts.annotate(app_handle, usage=usage, cost=cost)
        if self.trackers:
            from torchx_airflow.retry import call_within
            from torchx_airflow.usage import record_usage

            what = f"Recording the usage of {app_handle}"
            call_within(
                self.tracker_timeout, what, lambda: record_usage(self.trackers, app_handle, usage, cost)
            )
        from torchx_airflow.resubmission import with_resume_env

        app = with_resume_env(self._app, attempt.number, attempt.resume_from)
        self.__dict__["_app"] = app
        self._status, self._status_of, self._result = None, None, None
        new_handle = self._submit(app, context)
        resubmission.attempts.started(new_handle, attempt.resume_from)
        resubmission.link(self.trackers.stores if self.trackers else (), new_handle, app_handle, attempt)
        return new_handle

    def get_job_result(self, external_id: Any, context: Context) -> dict[str, Any]:
        if self._result is None:
            app_handle = str(external_id)
            status = self._status if self._status is not None else self._wait.status(app_handle)
            self._result = self.result(app_handle, status, self._app, context)
        return self._result

    # waiting (torchx_airflow.waiting)

    def _outage_budget(self) -> float:
        """``outage_timeout``: the task's, else its connection's, else the site's."""
        from torchx_airflow.retry import resolve_outage_timeout

        return resolve_outage_timeout(self.outage_timeout, self.hook.settings.outage_timeout)

    @cached_property
    def _wait(self) -> WorkerWait:
        from torchx_airflow.waiting import WorkerWait

        return WorkerWait(self.hook, self.poll_interval, self._outage_budget(), self.log, self.stream_logs)

    def wait(self, app_handle: str, app: AppDef) -> AppStatus:
        """Poll until the app is terminal, streaming its logs meanwhile (``waiting.WorkerWait``)."""
        return self._wait.until_terminal(app_handle, role_replicas(app))

    def result(
        self, app_handle: str, status: AppStatus | None, app: AppDef, context: Context
    ) -> dict[str, Any]:
        """The task's return value; raises ``TorchXAppFailedError`` for a terminal state but SUCCEEDED."""
        from torchx_airflow.apps import scheduler_of
        from torchx_airflow.results import status_summary

        launcher_bound = not self.hook.apps_outlive_launcher(scheduler_of(app_handle))
        summary = status_summary(app_handle, status, app, launcher_bound)
        return self._finish(app_handle, summary, status is not None and status.is_terminal(), context)

    def _finish(
        self, app_handle: str, summary: dict[str, Any], terminal: bool, context: Context
    ) -> dict[str, Any]:
        from torchx_airflow.results import finish_run

        self._publish_handle(app_handle, context)
        attempts = self._resubmission(context).attempts.summary(app_handle, summary.get("state"))
        usage, cost = self._accounting.at_end(app_handle, self._app, summary["state"], terminal, context)
        result = finish_run(
            context,
            app_handle,
            {**summary, "attempts": attempts},
            terminal,
            self.trackers,
            self.tracker_timeout,
            self.artifact_assets,
            self.log,
            usage=usage,
            cost=cost,
        )
        # finish_run raised unless the app SUCCEEDED: only a success records its key
        if terminal and self._cache is not None and (key := self._cache.recall(context, self.durable)):
            result = self._cache.record(key, app_handle, result, context)
        return result

    # deferrable

    def _defer(self, app_handle: str, context: Context) -> None:
        from torchx_airflow.triggers.torchx import TorchXAppTrigger, task_deadline

        self.log.info("Waiting for TorchX app %s in the triggerer", app_handle)
        self.defer(
            trigger=TorchXAppTrigger(
                app_handle=app_handle,
                torchx_conn_id=self.torchx_conn_id,
                poll_interval=self.poll_interval,
                deadline=task_deadline(self.execution_timeout, context["ti"]),
                log_cursor={},
                log_replicas=role_replicas(self._app) if self.stream_logs else None,
                tracker_conn_ids=self.trackers.conn_ids,
                outage_timeout=self._outage_budget(),
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger's event: show the app's logs, then succeed or fail with its state."""
        from torchx_airflow.triggers.torchx import resumed_app

        try:
            with self._kills.running(context["ti"]):
                kind, self._app_handle, status = resumed_app(event)
                with self._kills.only_waiting():
                    self._print_logs(self._app_handle, event)
                if kind == "timeout":
                    state, message = status.get("state", "CANCELLED"), status.get("message", "")
                    raise TorchXAppFailedError(self._app_handle, state, message, "", {})
                state, msg = str(status.get("state", "")), str(status.get("msg", ""))
                resubmitted = self._resubmitted(self._app_handle, state, msg, context)
                if resubmitted is not None:  # waits (deferred again) for the new job
                    return self.poll_until_complete(resubmitted, context)
                return self._finish(self._app_handle, status, True, context)
        finally:
            self.hook.close()

    def _print_logs(self, app_handle: str, event: dict[str, Any] | None) -> None:
        if not self.stream_logs:
            return
        from torchx_airflow.logs import print_app_logs

        print_app_logs(
            self.hook,
            app_handle,
            role_replicas(self._app),
            self.log,
            cursor=(event or {}).get("log_cursor") or {},
            max_lines=self.max_log_lines,
        )

    def on_kill(self) -> None:
        """Cancel the app when the task is killed: marked failed or success, cleared, or past its
        ``execution_timeout``; never when only this process is going away (a SIGTERM while the task
        instance is still running): then the app is left for the next try to reattach.

        Airflow calls this from its SIGTERM handler, whoever sent the signal, so the task instance's
        state in the API server decides (``kills.KillGuard``); when it cannot be read, nothing is
        cancelled. A wait under way ends with ``TorchXWaitInterruptedError`` (retryable), so the
        worker's shutdown is not held up and the next try starts at once.
        """
        if self._app_handle is not None:  # else nothing was submitted yet
            outlives = self.hook.apps_outlive_launcher()
            self._kills.on_kill(self._app_handle, self.hook.cancel, self.log, outlives)

    # OpenLineage (apache-airflow-providers-openlineage calls these; see torchx_airflow.openlineage)

    def _lineage_inputs(self) -> tuple[AppDef, str | None, Any, TrackerBase | None]:
        """``(app, scheduler, hook, first store)`` of this execution, none of them made for lineage:
        the app as it will be built when START comes before execute (no tracker opened for it)."""
        hook, trackers = self.__dict__.get("hook"), self.__dict__.get("trackers")
        app = self.__dict__.get("_app") or self.build_app_with({})
        scheduler = hook.scheduler if hook is not None else (self.scheduler or None)
        return app, scheduler, hook, trackers.stores[0] if trackers else None

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """The app to be submitted: job facets (roles, images, resources, env names)."""
        from torchx_airflow.openlineage import lineage_on_start

        app, scheduler, _, _ = self._lineage_inputs()
        return lineage_on_start(app, scheduler)

    def _lineage_on_end(self, task_instance: Any, produced: bool) -> OperatorLineage:
        from torchx_airflow import openlineage

        app, scheduler, hook, store = self._lineage_inputs()
        outcome = openlineage.run_outcome(self._app_handle, self._result, self._status, hook, app, store)
        resubmission = self.__dict__.get("_resubmission_of")
        if resubmission is not None and self._app_handle and "attempts" not in outcome:  # a failed run
            outcome["attempts"] = resubmission.attempts.summary(
                self._app_handle, outcome.get("state"), read=False
            )
        accounting = self.__dict__.get("_accounting")
        if accounting is not None and accounting.usage is not None:  # also a failed app's (no result)
            outcome.setdefault("usage", accounting.usage)
            outcome.setdefault("cost", accounting.cost)
        parents = openlineage.lineage_parents(outcome, store, task_instance, self)
        return openlineage.lineage_on_end(app, scheduler, outcome, parents, store, produced)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """The finished run: handle, state, sources, parents' runs and artifacts in, its own out."""
        return self._lineage_on_end(task_instance, produced=True)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage:
        """The failed run: handle, final state and structured error, parents' runs in."""
        return self._lineage_on_end(task_instance, produced=False)
