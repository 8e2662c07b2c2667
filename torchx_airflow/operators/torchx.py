"""Operators that dry-run and run TorchX apps.

``TorchXDryRunOperator`` (``operators/dryrun.py``) shows exactly what would be submitted;
``TorchXOperator`` submits it (or reattaches to an earlier try's job), waits, and finishes: the
mechanism is ``run.lifecycle.RunLifecycle``, opt-in behaviour the ``policies``. Both operators are
imported from here. Importing this module imports no TorchX scheduler, MLflow, s3fs or docker module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from airflow.sdk import ResumableJobMixin
from airflow.sdk.configuration import conf

from torchx_airflow.lineage.assets import check_artifact_assets
from torchx_airflow.lineage.keys import XCOM_APP_HANDLE
from torchx_airflow.links.torchx import TorchXAppLink, TorchXTrackerLink
from torchx_airflow.operators.dryrun import TorchXDryRunOperator
from torchx_airflow.policies.builtin import BUILTIN, builtin_settings
from torchx_airflow.run.points import check_policies
from torchx_airflow.run.state import HANDLE_KEY
from torchx_airflow.settings import checks
from torchx_airflow.settings.resolve import resolve

__all__ = ["XCOM_APP_HANDLE", "TorchXDryRunOperator", "TorchXOperator"]

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Asset, AssetAlias, Context
    from torchx.specs import AppDef

    from torchx_airflow.run.lifecycle import RunLifecycle
    from torchx_airflow.run.points import RunPolicy

# App states worth reattaching to; UNKNOWN is what some schedulers report right after submission.
_ACTIVE_STATES = frozenset({"UNSUBMITTED", "SUBMITTED", "PENDING", "RUNNING", "UNKNOWN"})


class TorchXOperator(ResumableJobMixin, TorchXDryRunOperator):
    """Run a TorchX app: dry run, submit, and (by default) wait while streaming its logs.

    The handle ``scheduler://session/app_id`` goes to ``task_state_store`` (unless ``durable=False``)
    and XCom ``app_handle`` as soon as the app is submitted; the trackers then record the app's DAG
    parents as its sources. A new try reattaches to a running app, returns the result of one that
    SUCCEEDED, and submits anew after one that failed; a try that died mid-submission is found by
    its mark (Slurm). The result is ``{app_handle, state, msg, structured_error_msg, num_restarts,
    ui_url, roles, metadata, artifacts, sources, usage, attempts}`` (``cost`` with a price table,
    ``cache_hit``/``cache_key`` when cached); the task fails with ``TorchXAppFailedError`` unless the
    app SUCCEEDED. Killing the task or its ``execution_timeout`` cancels the app; a SIGTERM while the
    task instance still runs (a deploy) leaves it for the next try (:mod:`torchx_airflow.run.kills`).

    Opt-in behaviour joins the run as policies (:mod:`torchx_airflow.run.points`): caching, cost,
    resubmission (built from the settings below by :mod:`torchx_airflow.policies.builtin`), and any in
    ``policies``. A setting left None is the connection's, else ``[torchx]``'s.

    :param wait_for_completion: wait until the app is terminal (default); False returns after
        submission (a ``TorchXAppSensor`` can wait on the handle).
    :param deferrable: wait in the triggerer (``TorchXAppTrigger``); on local_cwd and local_docker
        the task waits in the worker instead, with a warning, so one DAG runs on either.
    :param poll_interval: seconds between status checks (``[torchx] poll_interval``; in the
        triggerer at least ``[torchx] min_poll_interval``).
    :param outage_timeout: seconds a wait goes on while the scheduler gives no answer, counted from
        its last good answer (:mod:`torchx_airflow.retry`).
    :param stream_logs: write every replica's log lines into the task log, prefixed ``[role/replica]``.
    :param max_log_lines: after a deferred wait, at most this many last lines per replica and stream.
    :param tracker_timeout: seconds the trackers get at each step: past it before submission the
        task fails with nothing submitted; after, a warning (the app is never lost or duplicated).
    :param infrastructure_retries: times a job the infrastructure ended (``NODE_FAIL``,
        ``PREEMPTED``...) is resubmitted within this try, without using ``retries``.
    :param checkpoint_artifact: the artifact whose path a resubmitted job gets in
        ``TORCHX_AIRFLOW_RESUME_FROM`` (:mod:`torchx_airflow.policies.resubmission`).
    :param checkpoint_root: deprecated: set ``output_roots`` (the connection's extra, or ``[torchx]``),
        where every path read back from a store must lie; this adds one root for checkpoints.
    :param artifact_assets: artifact name -> ``Asset``/``AssetAlias`` of ``outlets``: the event of a
        SUCCEEDED app carries the handle and the artifact (:mod:`torchx_airflow.lineage.assets`).
    :param expected_duration: seconds (or a ``timedelta``) the app is expected to run, for the cost
        estimate; else the last successful run's elapsed (:mod:`torchx_airflow.policies.cost`).
    :param max_cost: fail before submitting when the estimate is over it (or ask: ``policies.cost.approval``).
    :param cache: return the result of an earlier SUCCEEDED run with the same inputs instead of
        submitting (:mod:`torchx_airflow.policies.cache`); needs a tracker and waiting.
    :param cache_salt: text in the key: change it to run again (templated).
    :param cache_ignore_args: arguments left out of the key: an option name leaves out its value,
        anything else is an ``fnmatch`` pattern of whole arguments.
    :param cache_ttl: seconds (or a ``timedelta``) a recorded result is reused.
    :param cache_scope: ``"dag"`` (hits only from the same DAG's runs) or ``"deployment"`` (any DAG's).
    :param policies: :class:`~torchx_airflow.run.points.RunPolicy` objects of the DAG author's, after
        the built-in ones (docs: Writing a policy).
    :param durable: keep the handle for the next try to reattach to (``ResumableJobMixin``); False: none.
    Other parameters are those of :class:`TorchXDryRunOperator`.
    """

    template_fields: Sequence[str] = (*TorchXDryRunOperator.template_fields, "cache_salt")
    operator_extra_links = (TorchXAppLink(), TorchXTrackerLink())
    external_id_key = HANDLE_KEY

    def __init__(
        self,
        *,
        wait_for_completion: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float | None = None,
        stream_logs: bool = True,
        max_log_lines: int | None = None,
        tracker_timeout: float | None = None,
        outage_timeout: float | None = None,
        infrastructure_retries: int | None = None,
        checkpoint_artifact: str = "checkpoint",
        checkpoint_root: str | None = None,
        artifact_assets: Mapping[str, Asset | AssetAlias] | None = None,
        expected_duration: timedelta | float | None = None,
        max_cost: float | None = None,
        cache: bool | None = None,
        cache_salt: str = "",
        cache_ignore_args: Sequence[str] | None = None,
        cache_ttl: float | timedelta | None = None,
        cache_scope: str | None = None,
        policies: Sequence[RunPolicy] = (),
        durable: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(durable=durable, **kwargs)
        where = f"Task {self.task_id!r}"
        seconds, count = checks.check_positive_seconds, checks.check_count
        self.tracker_timeout = resolve("tracker_timeout", seconds(tracker_timeout, "tracker_timeout", where))
        self.poll_interval = resolve("poll_interval", seconds(poll_interval, "poll_interval", where))
        self.max_log_lines = resolve("max_log_lines", count(max_log_lines, "max_log_lines", where))
        self.artifact_assets = check_artifact_assets(
            self.task_id, artifact_assets, self.outlets, wait_for_completion
        )
        self.wait_for_completion, self.stream_logs = wait_for_completion, stream_logs
        self.deferrable = deferrable
        self.outage_timeout = checks.check_outage_timeout(outage_timeout, where)
        self.cache_salt = cache_salt
        self.policy_settings = builtin_settings(
            self.task_id,
            wait_for_completion,
            cache=cache,
            cache_ignore_args=cache_ignore_args,
            cache_ttl=cache_ttl,
            cache_scope=cache_scope,
            max_cost=max_cost,
            expected_duration=expected_duration,
            infrastructure_retries=infrastructure_retries,
            checkpoint_artifact=checkpoint_artifact,
            checkpoint_root=checkpoint_root,
        )
        self.policies = check_policies(policies, BUILTIN, where)
        #: the execution under way (or the last one): what ``on_kill`` and OpenLineage read
        self.execution: RunLifecycle | None = None

    def _start(self, context: Context, resumed_with: dict[str, Any] | None = None) -> RunLifecycle:
        """This execution's lifecycle, made once per execution (per context Airflow hands over)."""
        if self.execution is None or self.execution.run.context is not context:
            from torchx_airflow.policies.builtin import task_policies
            from torchx_airflow.run.execution import TaskRun
            from torchx_airflow.run.lifecycle import RunLifecycle
            from torchx_airflow.run.waiting import waits_in_triggerer

            hook, where = self.hook, f"Task {self.task_id!r}"
            run = TaskRun(  # asks nothing of the connection yet: what can fail does inside the execution
                task_id=self.task_id,
                context=context,
                hook=hook,
                trackers=lambda: self.trackers,
                build_app=self.build_app,
                app_parts=self.app_parts,
                durable=self.durable,
                tracker_timeout=self.tracker_timeout,
                wait_for_completion=self.wait_for_completion,
                waits_in_triggerer=lambda: waits_in_triggerer(
                    hook, hook.scheduler, self.deferrable, True, self.log
                ),
                task_log=self.log,
                execution_timeout=self.execution_timeout,
                artifact_assets=self.artifact_assets,
                render=self.render_template,
            )
            self.execution = RunLifecycle(
                run,
                task_policies(self.policy_settings, self.cache_salt, self.policies, where),
                self.dryrun,
                self._defer,
                poll_interval=self.poll_interval,
                outage_timeout=self.outage_timeout,
                stream_logs=self.stream_logs,
                max_log_lines=self.max_log_lines,
            )
        if resumed_with:
            self.execution.run.resumed_with = resumed_with
        return self.execution

    def execute(self, context: Context, event: dict[str, Any] | None = None, **parked: Any) -> dict[str, Any]:
        """Submit (or reattach) and wait; ``event`` and ``parked``: an approver's answer resuming the
        task and what it parked with (``policies.cost.approval``)."""
        execution = self._start(context, {**parked, "event": event} if event or parked else None)
        return execution.execute(lambda: self.execute_resumable(context), lambda: self._setup(context))

    def _setup(self, context: Context) -> None:
        """What this operator does first in every execution, inside it (its errors end the execution
        as any other, ``closed`` included): nothing; ``@task.torchx`` calls its function here."""

    # ResumableJobMixin: submit once, remember the handle, reattach on the next try

    def submit_job(self, context: Context) -> str:
        return self._start(context).submit_job()

    def get_job_status(self, external_id: Any, context: Context) -> str:
        return self._start(context).status_name(str(external_id))

    def is_job_active(self, status: str) -> bool:
        return status in _ACTIVE_STATES

    def is_job_succeeded(self, status: str) -> bool:
        return status == "SUCCEEDED"

    # ResumableJobMixin.execute returns this method's value on a reattach, though it declares None
    def poll_until_complete(self, external_id: Any, context: Context) -> dict[str, Any]:  # type: ignore[override]
        return self._start(context).wait_until_done(str(external_id))

    def get_job_result(self, external_id: Any, context: Context) -> dict[str, Any]:
        return self._start(context).job_result(str(external_id))

    def _defer(self, app_handle: str, execution: RunLifecycle) -> NoReturn:
        from torchx_airflow.apps import role_replicas
        from torchx_airflow.triggers.torchx import TorchXAppTrigger

        run = execution.run
        self.log.info("Waiting for TorchX app %s in the triggerer", app_handle)
        self.defer(
            trigger=TorchXAppTrigger(
                app_handle=app_handle,
                torchx_conn_id=self.torchx_conn_id,
                poll_interval=self.poll_interval,
                deadline=run.deadline,
                log_cursor={},
                log_replicas=role_replicas(run.app) if self.stream_logs else None,
                tracker_conn_ids=self.trackers.conn_ids,
                outage_timeout=execution.outage_budget,
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger's event: show the app's logs, then succeed or fail with its state."""
        return self._start(context).resume(event, lambda: self._setup(context))

    def on_kill(self) -> None:
        """Cancel the app when a person kills the task (marked failed or success, cleared) or its
        ``execution_timeout`` passes; never when only this process goes away (a deploy's SIGTERM):
        the task instance's state decides (``run.kills.KillGuard``)."""
        if self.execution is not None:
            self.execution.kill()

    # OpenLineage (apache-airflow-providers-openlineage calls these; see torchx_airflow.lineage.openlineage)

    def _lineage_inputs(self) -> tuple[AppDef, str | None, Any, Any, RunLifecycle | None]:
        """``(app, scheduler, hook, first store, lifecycle)`` of this execution, none of them made for
        lineage: the app as it will be built when START comes before execute (no tracker opened)."""
        hook, trackers = self.__dict__.get("hook"), self.__dict__.get("trackers")
        lifecycle = self.execution
        app = (lifecycle.run.app_if_built if lifecycle else None) or self.build_app_with({})
        scheduler = hook.scheduler if hook is not None else (self.scheduler or None)
        return app, scheduler, hook, trackers.stores[0] if trackers else None, lifecycle

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """The app to be submitted: job facets (roles, images, resources, env names)."""
        from torchx_airflow.lineage.openlineage import lineage_on_start

        app, scheduler, *_ = self._lineage_inputs()
        return lineage_on_start(app, scheduler)

    def _lineage_on_end(self, task_instance: Any, produced: bool) -> OperatorLineage:
        from torchx_airflow.lineage.openlineage import execution_lineage

        app, scheduler, hook, store, lifecycle = self._lineage_inputs()
        ran = lifecycle.outcome() if lifecycle else (None, None, None, {})
        return execution_lineage(app, scheduler, hook, store, ran, task_instance, self, produced)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """The finished run: handle, state, sources, parents' runs and artifacts in, its own out."""
        return self._lineage_on_end(task_instance, produced=True)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage:
        """The failed run: handle, final state and structured error, parents' runs in."""
        return self._lineage_on_end(task_instance, produced=False)
