"""Operators that dry-run and run TorchX apps.

``TorchXDryRunOperator`` (``operators/dryrun.py``) shows exactly what would be submitted;
``TorchXOperator`` submits it, keeps the app handle the moment it exists, and waits while streaming
the app's logs. Both are imported from here. Importing this module imports no TorchX scheduler,
MLflow, s3fs or docker module.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import ResumableJobMixin
from airflow.sdk.configuration import conf

from torchx_airflow.apps import (
    SUCCEEDED,
    role_replicas,
    summarize_status,
)
from torchx_airflow.assets import check_artifact_assets, emit_asset_events
from torchx_airflow.exceptions import (
    TorchXAppFailedError,
    TorchXAppLostError,
    TorchXAppNotFoundError,
    TorchXConfigError,
    TorchXError,
)
from torchx_airflow.links.torchx import XCOM_TRACKER_URL, XCOM_UI_URL, TorchXAppLink, TorchXTrackerLink
from torchx_airflow.operators.dryrun import (
    XCOM_APP_HANDLE,
    TorchXDryRunOperator,
    app_name_for,
    mapping_param,
)

__all__ = ["XCOM_APP_HANDLE", "TorchXDryRunOperator", "TorchXOperator", "app_name_for", "mapping_param"]

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Asset, AssetAlias, Context
    from torchx.specs import AppDef, AppStatus


_IN_PROCESS_SCHEDULERS = ("local_cwd", "local_docker")
# task_state_store key of a submission under way: {token, scheduler, since} (see submit_job)
SUBMISSION_KEY = "torchx_submission"
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
    fails with ``TorchXAppFailedError`` unless the app SUCCEEDED. Killing the task cancels the app,
    also while it waits in the triggerer; ``execution_timeout`` cancels it too.

    :param wait_for_completion: wait until the app is terminal (default). With False the task
        returns after submission; a ``TorchXAppSensor`` can wait on the handle instead.
    :param deferrable: wait in the triggerer (``TorchXAppTrigger``) instead of the worker. Default:
        ``[operators] default_deferrable``. Needs a scheduler whose apps outlive the launching
        process (slurm, kubernetes, ...); on local_cwd and local_docker the task waits in the
        worker instead, with a warning, so one DAG runs on either.
    :param poll_interval: seconds between status checks while waiting.
    :param stream_logs: write every replica's log lines into the task log, prefixed ``[role/replica]``
        (as they arrive when waiting in the worker; when the task resumes after a deferred wait).
    :param max_log_lines: after a deferred wait, at most this many last lines per replica and stream.
    :param durable: keep the handle in ``task_state_store`` so a retry reattaches (default True).
    :param tracker_timeout: seconds the task gives its trackers at each step: opening them before
        submission (past it the task fails, nothing submitted), recording lineage and metadata after
        submission, reading results at the end (past it, a warning: the app is never lost or
        duplicated because a tracker hangs).
    :param artifact_assets: artifact name -> ``Asset`` or ``AssetAlias`` of the task's ``outlets``:
        when the app SUCCEEDS, the asset event carries the app handle, the artifact's path and
        metadata, and the try number (see :mod:`torchx_airflow.assets`).

    Other parameters are those of :class:`TorchXDryRunOperator`.
    """

    operator_extra_links = (TorchXAppLink(), TorchXTrackerLink())
    external_id_key = "torchx_app_handle"

    def __init__(
        self,
        *,
        wait_for_completion: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 5.0,
        stream_logs: bool = True,
        max_log_lines: int = 1000,
        tracker_timeout: float = 60.0,
        artifact_assets: Mapping[str, Asset | AssetAlias] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if tracker_timeout <= 0:
            raise TorchXConfigError(
                f"tracker_timeout must be a positive number of seconds, got {tracker_timeout!r}."
            )
        self.artifact_assets = check_artifact_assets(
            self.task_id, artifact_assets, self.outlets, wait_for_completion
        )
        if poll_interval <= 0:
            raise TorchXConfigError(
                f"poll_interval must be a positive number of seconds, got {poll_interval!r}."
            )
        if max_log_lines < 0:
            raise TorchXConfigError(f"max_log_lines must be 0 or more, got {max_log_lines!r}.")
        self.wait_for_completion = wait_for_completion
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.stream_logs = stream_logs
        self.max_log_lines = max_log_lines
        self.tracker_timeout = tracker_timeout
        self._app_handle: str | None = None
        self._status: AppStatus | None = None
        self._result: dict[str, Any] | None = None
        self._submitted_here = False
        self._tracker_url: str | None = None

    def execute(self, context: Context) -> dict[str, Any]:
        self._check_waitable()
        try:
            self._recover_submission(context)
            return self.execute_resumable(context)
        finally:
            self.hook.close()

    def _check_waitable(self) -> None:
        scheduler = self.hook.scheduler
        if scheduler not in _IN_PROCESS_SCHEDULERS:
            return
        if not self.wait_for_completion:
            raise TorchXConfigError(
                f"wait_for_completion=False cannot be used with scheduler {scheduler!r}: its apps "
                "live in the launching task's process and end with it. Keep wait_for_completion=True, or "
                "use a scheduler with its own state (slurm, kubernetes, ...) to wait from another task."
            )
        if self.deferrable:
            self.log.warning(
                "deferrable=True, but scheduler %s runs apps as child processes of this worker, which the "
                "triggerer cannot see: waiting in the worker instead. Use a scheduler with its own state "
                "(slurm, kubernetes, aws_batch, ...) to wait in the triggerer.",
                scheduler,
            )
            self.deferrable = False

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

    def submit_job(self, context: Context) -> str:
        info, _ = self.dryrun(self._app)
        self._check_trackers()
        store = self._state_store(context)
        token = None
        scheduler = self.hook.launch_scheduler(info)
        if store is not None and self.hook.finds_submissions(scheduler):
            # Before submitting: should this process die before the handle below is written, the
            # next try finds the job by this mark instead of submitting another.
            token = uuid.uuid4().hex
            store.set(SUBMISSION_KEY, {"token": token, "scheduler": scheduler, "since": time.time()})
        app_handle = self.hook.schedule(info, token=token)
        self._submitted_here = True
        # Before anything else can fail: a retry must find this handle and reattach, never resubmit.
        self._persist_handle(app_handle, context)
        self.log.info("Submitted TorchX app %s", app_handle)
        self._publish_handle(app_handle, context)
        if token is not None:
            try:  # a mark left behind only costs the next try a lookup that finds this same job
                store.delete(SUBMISSION_KEY)  # type: ignore[union-attr]
            except Exception as e:
                self.log.warning("Could not remove the submission mark %r: %s", SUBMISSION_KEY, e)
        return app_handle

    def _state_store(self, context: Context) -> Any:
        return context.get("task_state_store") if self.durable else None

    def _persist_handle(self, app_handle: str, context: Context) -> None:
        store = self._state_store(context)
        if store is not None:
            store.set(self.external_id_key, app_handle)

    def _recover_submission(self, context: Context) -> None:
        """Record the handle of a job an earlier try submitted but died before recording, if any.

        The earlier try left its submission mark in ``task_state_store`` before submitting; the
        scheduler is asked for a job with that mark. Found: its handle is stored, and
        ``execute_resumable`` reattaches to it. Not found: that try died before its job reached the
        scheduler, and this one submits. A scheduler that cannot answer fails this try (retryable),
        mark kept: submitting again might run the job twice.
        """
        store = self._state_store(context)
        mark = store.get(SUBMISSION_KEY) if store is not None else None
        if not isinstance(mark, dict) or not mark.get("token") or not mark.get("scheduler"):
            return
        from torchx_airflow.retry import status_retrying

        scheduler, token = str(mark["scheduler"]), str(mark["token"])
        since = float(mark.get("since") or 0.0)
        retrying = status_retrying(f"Finding the job an earlier try submitted to {scheduler}")
        try:
            app_handle = retrying(self.hook.find_submission, scheduler, token, since)
        except Exception as e:
            raise TorchXError(
                f"An earlier try of {self.task_id!r} died while submitting to {scheduler}, and {scheduler} "
                f"could not say whether that job exists ({type(e).__name__}: {e}). Nothing was submitted, "
                "so the job cannot run twice; the next try asks again. If that job is known to be gone, "
                f"delete the task's state-store key {SUBMISSION_KEY!r} (REST API: DELETE /api/v2/dags/"
                f"<dag_id>/dagRuns/<run_id>/taskInstances/{self.task_id}/state-store/{SUBMISSION_KEY}) "
                "and clear the task."
            ) from e
        if app_handle is not None:
            self.log.warning(
                "An earlier try died while submitting TorchX app %s, before recording its handle: "
                "recording it now, this try reattaches to it",
                app_handle,
            )
            store.set(self.external_id_key, app_handle)
        else:
            self.log.info(
                "An earlier try died while submitting, and %s has no job of that submission: submitting",
                scheduler,
            )
        store.delete(SUBMISSION_KEY)

    def _check_trackers(self) -> None:
        """Open every tracker within ``tracker_timeout`` before submitting; else submit nothing."""
        from torchx_airflow.retry import call_within

        if not self.trackers:
            return
        done, _ = call_within(self.tracker_timeout, "Opening the trackers", self.trackers.check, reraise=True)
        if not done:
            raise TorchXError(
                f"Task {self.task_id!r}: the trackers {self.trackers.conn_ids} did not answer within "
                f"tracker_timeout={self.tracker_timeout!r} s. Nothing was submitted; the task's next try "
                "tries again. Check that the tracker servers answer, or raise tracker_timeout."
            )

    def get_job_status(self, external_id: Any, context: Context) -> str:
        status = self._poll_status(str(external_id))
        self._status = status
        return status.state.name if status is not None else "NOT_FOUND"

    def is_job_active(self, status: str) -> bool:
        return status in _ACTIVE_STATES

    def is_job_succeeded(self, status: str) -> bool:
        return status == SUCCEEDED

    def poll_until_complete(self, external_id: Any, context: Context) -> dict[str, Any]:
        app_handle = str(external_id)
        if not self._submitted_here:
            self.log.info("Reattached to TorchX app %s from an earlier try: not submitting again", app_handle)
            self._publish_handle(app_handle, context)
        # On a reattach too: an earlier try may have died before its lineage was written (edges are
        # idempotent in the stores).
        self.record_lineage(app_handle, context)
        if not self.wait_for_completion:
            self._status = self._poll_status(app_handle)
        elif self.deferrable:
            # Check once before deferring: an app already done (a quick job, a reattach after it
            # ended) finishes here, printing its logs, with no round trip through the triggerer.
            status = self._poll_status(app_handle)
            if status is None or not status.is_terminal():
                self._defer(app_handle, context)
            self._status = status
            self._print_logs(app_handle, {})
        else:
            self._status = self.wait(app_handle, self._app)
        return self.get_job_result(app_handle, context)

    def get_job_result(self, external_id: Any, context: Context) -> dict[str, Any]:
        if self._result is None:
            app_handle = str(external_id)
            status = self._status if self._status is not None else self._poll_status(app_handle)
            self._result = self.result(app_handle, status, self._app, context)
        return self._result

    # waiting

    def _poll_status(self, app_handle: str) -> AppStatus | None:
        """The app's status, retried with the provider's one status policy (``torchx_airflow.retry``)."""
        from torchx_airflow.retry import status_retrying

        retrying = status_retrying(f"Status of {app_handle}", max_wait=self.poll_interval)
        return retrying(self.hook.status, app_handle)

    def record_lineage(self, app_handle: str, context: Context) -> None:
        """Record the app's parents and Airflow metadata in every tracker, within ``tracker_timeout``.

        The app is already running: a tracker that fails or hangs here is a warning, never a failed
        task (lineage can be added later with ``add_source``).
        """
        if not self.trackers:
            return
        from torchx_airflow.lineage import parent_runs
        from torchx_airflow.retry import call_within

        try:  # asks Airflow for upstream states and XComs: an API error must not fail a running app's task
            parents = parent_runs(context)
        except Exception as e:
            self.log.warning(
                "No lineage for %s: reading its parents failed: %s: %s", app_handle, type(e).__name__, e
            )
            return
        done, _ = call_within(
            self.tracker_timeout,
            f"Recording lineage of {app_handle}",
            self._record_run,
            app_handle,
            parents,
            context,
        )
        if not done:
            return
        self.log.info(
            "Tracked %s in %s with parents %s",
            app_handle,
            ", ".join(self.trackers.conn_ids),
            parents or "(none)",
        )
        if self._tracker_url is not None:
            context["ti"].xcom_push(key=XCOM_TRACKER_URL, value=self._tracker_url)

    def _record_run(self, app_handle: str, parents: list[str], context: Context) -> None:
        from torchx_airflow.lineage import airflow_metadata, record_run

        record_run(self.trackers.stores, app_handle, parents, airflow_metadata(context))
        try:
            self._tracker_url = self.trackers.run_url(app_handle)
        except Exception as e:
            self.log.warning("No MLflow link for %s: %s: %s", app_handle, type(e).__name__, e)

    def wait(self, app_handle: str, app: AppDef) -> AppStatus:
        """Poll until the app is terminal, streaming its logs meanwhile.

        The polls here are the only status queries of the wait: log readers follow them and are
        stopped when the wait ends, however it ends. Failing polls follow the one retry policy.
        """
        from torchx_airflow.logs import AppLogStreamer

        replicas = role_replicas(app)
        with AppLogStreamer(self.hook, app_handle, replicas, self.log, enabled=self.stream_logs) as streamer:
            while True:
                status = self._poll_status(app_handle)
                if status is None:
                    raise TorchXAppLostError(app_handle)
                if status.is_terminal():
                    return status
                streamer.drain(timeout=self.poll_interval)

    def result(
        self, app_handle: str, status: AppStatus | None, app: AppDef, context: Context
    ) -> dict[str, Any]:
        """The task's return value; raises ``TorchXAppFailedError`` for a terminal state but SUCCEEDED."""
        if status is None:
            raise TorchXAppNotFoundError(app_handle)
        summary = summarize_status(app_handle, status, app)
        return self._finish(app_handle, summary, status.is_terminal(), context)

    def _finish(
        self, app_handle: str, summary: dict[str, Any], terminal: bool, context: Context
    ) -> dict[str, Any]:
        from torchx_airflow.lineage import XCOM_RUN_ID, run_results

        result = dict(summary)
        ti = context["ti"]
        self._publish_handle(app_handle, context)
        if result.get("ui_url"):
            ti.xcom_push(key=XCOM_UI_URL, value=result["ui_url"])
        self.log.info("TorchX app %s is %s %s", app_handle, result["state"], result["msg"])
        if terminal and result["state"] != SUCCEEDED:
            raise TorchXAppFailedError(
                app_handle, result["state"], result["msg"], result["structured_error_msg"], result["roles"]
            )
        result.update({"metadata": {}, "artifacts": {}, "sources": []})
        if self.trackers:
            from torchx_airflow.retry import call_within

            done, results = call_within(
                self.tracker_timeout,
                f"Reading the results of {app_handle}",
                lambda: run_results(self.trackers.stores[0], app_handle),
            )
            if done:
                result.update(results)
        ti.xcom_push(key=XCOM_RUN_ID, value=app_handle)
        emit_asset_events(context, self.artifact_assets, result)
        return result

    # deferrable

    def _deadline(self, context: Context) -> float | None:
        """``execution_timeout`` as an epoch deadline, counted from the task's start."""
        if self.execution_timeout is None:
            return None
        start = getattr(context["ti"], "start_date", None)
        begin = start.timestamp() if start is not None else time.time()
        return begin + self.execution_timeout.total_seconds()

    def _defer(self, app_handle: str, context: Context) -> None:
        from torchx_airflow.triggers.torchx import TorchXAppTrigger

        self.log.info("Waiting for TorchX app %s in the triggerer", app_handle)
        self.defer(
            trigger=TorchXAppTrigger(
                app_handle=app_handle,
                torchx_conn_id=self.torchx_conn_id,
                poll_interval=self.poll_interval,
                deadline=self._deadline(context),
                log_cursor={},
                log_replicas=role_replicas(self._app) if self.stream_logs else None,
                tracker_conn_ids=self.trackers.conn_ids,
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger's event: show the app's logs, then succeed or fail with its state."""
        from torchx_airflow.triggers.torchx import read_event

        try:
            try:
                kind, app_handle, status = read_event(event)
            except TorchXAppNotFoundError as e:  # known when deferred: retryable, the next try reattaches
                raise TorchXAppLostError(e.app_handle) from e
            self._app_handle = app_handle
            self._print_logs(app_handle, event)
            if kind == "timeout":
                raise TorchXAppFailedError(
                    app_handle, status.get("state", "CANCELLED"), status.get("message", ""), "", {}
                )
            return self._finish(app_handle, status, True, context)
        finally:
            self.hook.close()

    def _print_logs(self, app_handle: str, event: dict[str, Any]) -> None:
        if not self.stream_logs:
            return
        from torchx_airflow.logs import print_app_logs

        print_app_logs(
            self.hook,
            app_handle,
            role_replicas(self._app),
            self.log,
            cursor=event.get("log_cursor") or {},
            max_lines=self.max_log_lines,
        )

    def on_kill(self) -> None:
        """Cancel the app when the task is killed (marked failed, cleared, or timed out)."""
        if self._app_handle is None:
            return
        self.log.info("Task killed: cancelling TorchX app %s", self._app_handle)
        self.hook.cancel(self._app_handle)

    # OpenLineage (apache-airflow-providers-openlineage calls these; see torchx_airflow.openlineage)

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """The app to be submitted: job facets (roles, images, resources, env names)."""
        from torchx_airflow.openlineage import lineage_on_start

        return lineage_on_start(self)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """The finished run: handle, state, sources, parents' runs and artifacts in, its own out."""
        from torchx_airflow.openlineage import lineage_on_complete

        return lineage_on_complete(self, task_instance)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage:
        """The failed run: handle, final state and structured error, parents' runs in."""
        from torchx_airflow.openlineage import lineage_on_failure

        return lineage_on_failure(self, task_instance)
