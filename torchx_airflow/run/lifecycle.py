"""The life of one task's TorchX app: submit (or short-cut), wait, end, finish; the policies at four points.

``RunLifecycle`` is what ``TorchXOperator`` drives; the operator only maps Airflow's calls
(``ResumableJobMixin``, ``defer``, ``execute_complete``, ``on_kill``) onto it. Opt-in behaviour
(caching, resubmission, cost) joins at the points of ``run.points``; nothing here reads a policy's
settings or knows which policies there are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchx_airflow.apps import SUCCEEDED, role_replicas, scheduler_of
from torchx_airflow.exceptions import TorchXAppFailedError
from torchx_airflow.lineage.keys import XCOM_APP_HANDLE, XCOM_SUBMITTED_APP
from torchx_airflow.run.durable import DurableSubmission
from torchx_airflow.run.execution import NEW, REATTACHED, RESUBMITTED
from torchx_airflow.run.points import NextAttempt, ShortCut
from torchx_airflow.run.results import finish_run, status_summary
from torchx_airflow.run.state import HANDLE_KEY

if TYPE_CHECKING:
    from airflow.sdk import Asset, AssetAlias
    from torchx.specs import AppDef, AppStatus

    from torchx_airflow.hooks.torchx import TorchXDryRun
    from torchx_airflow.run.execution import TaskRun
    from torchx_airflow.run.kills import KillGuard
    from torchx_airflow.run.points import RunPolicy
    from torchx_airflow.run.waiting import WorkerWait


class ShortCutTaken(Exception):  # noqa: N818 - control flow, not an error
    """A policy answered before submitting (``ShortCut``): the task ends with its result."""

    def __init__(self, short_cut: ShortCut) -> None:
        super().__init__(short_cut.app_handle)
        self.short_cut = short_cut


class RunLifecycle:
    """One execution's app: what it submitted or reattached to, its last status, its result.

    :param run: the execution (``TaskRun``).
    :param policies: the task's policies, in the order they join each point.
    :param dryrun: dry-runs an app (logs the request); ``resubmits`` as ``TorchXHook.dryrun``.
    :param wait: the worker's wait (status polls within the outage budget, logs streamed).
    :param kills: the task's kill guard (a kill while resubmitting submits nothing more).
    :param outage_timeout: the lookup budget of an interrupted submission.
    :param artifact_assets: artifact name -> asset, for the asset events of a SUCCEEDED app.
    """

    def __init__(
        self,
        run: TaskRun,
        policies: Sequence[RunPolicy],
        dryrun: Callable[..., tuple[TorchXDryRun, dict[str, Any]]],
        wait: WorkerWait,
        kills: KillGuard,
        outage_timeout: float,
        artifact_assets: Any,
    ) -> None:
        self.run = run
        self.policies = tuple(policies)
        self._dryrun = dryrun
        self.wait = wait
        self.kills = kills
        self.outage_timeout = outage_timeout
        self.artifact_assets: dict[str, Asset | AssetAlias] = dict(artifact_assets or {})
        self.app_handle: str | None = None
        self.status: AppStatus | None = None
        self.status_of: str | None = None  # the handle ``status`` is of
        self.result: dict[str, Any] | None = None
        self._ended: set[str] = set()

    # durable submission

    def durable(self) -> DurableSubmission:
        run = self.run
        return DurableSubmission(run.hook, run.store, HANDLE_KEY, run.task_id, run.log, self.outage_timeout)

    def publish(self, app_handle: str) -> None:
        """XCom ``app_handle``, once per execution (a new try starts with its XComs cleared)."""
        if self.app_handle != app_handle:
            self.app_handle = app_handle
            self.run.ti.xcom_push(key=XCOM_APP_HANDLE, value=app_handle)

    def status_of_handle(self, app_handle: str) -> AppStatus | None:
        """The app's status now (within the outage budget), remembered as the last one seen."""
        self.status, self.status_of = self.wait.status(app_handle), app_handle
        return self.status

    # submit

    def submit_job(self) -> str:
        """The job for a task with no running one: an earlier try's job that the infrastructure
        ended (its status was just asked) continues as its next attempt; else a new submission."""
        if self.status is not None and self.status_of is not None:
            state, msg = self.status.state.name, self.status.msg
            resubmitted = self.ended(self.status_of, state, msg, earlier_try=True)
            if resubmitted is not None:
                return resubmitted
        return self.submit(self.run.app, NEW)

    def submit(self, app: AppDef, submission: str) -> str:
        """Submit ``app`` after the policies' ``before_submit`` (a ``ShortCut`` ends the task with its
        result: ``ShortCutTaken``), persist its handle, and tell the policies (``submitted``)."""
        run = self.run
        run.submission = submission
        for policy in self.policies:
            short_cut = policy.before_submit(run, app)
            if short_cut is not None:
                self.result = short_cut.result
                self.publish(short_cut.app_handle)
                raise ShortCutTaken(short_cut)
        resubmits = run.wait_for_completion and any(p.resubmits(run) for p in self.policies)
        dryrun, _ = self._dryrun(app, resubmits=resubmits)
        run.trackers.check_within(run.tracker_timeout, run.where)
        self._refuse_if_killed(None)
        app_handle = self.durable().submit(dryrun)
        self._refuse_if_killed(app_handle)  # killed while sbatch ran: on_kill cancelled the job before
        run.log.info("Submitted TorchX app %s", app_handle)
        self.publish(app_handle)
        self._joined(app_handle)
        return app_handle

    def reattached(self, app_handle: str) -> None:
        """The task waits on an earlier try's job: published, and the policies told."""
        self.run.log.info("Reattached to TorchX app %s from an earlier try: not submitting again", app_handle)
        self.run.submission = REATTACHED
        self.publish(app_handle)
        self._joined(app_handle)

    def _joined(self, app_handle: str) -> None:
        """The task's job is ``app_handle``: the policies are told, and its lineage recorded (on a
        reattach too: an earlier try may have died before writing it; edges are idempotent)."""
        from torchx_airflow.lineage.edges import record_task_run

        run = self.run
        for policy in self.policies:
            policy.submitted(run, app_handle)
        self._record_app()
        record_task_run(run.trackers, app_handle, run.context, run.tracker_timeout, run.log, run.app)

    def _record_app(self) -> None:
        """XCom ``torchx_app``: what was submitted, secrets masked, for comparing runs."""
        from torchx_airflow.lineage.submitted import submitted_app

        run, hook = self.run, self.run.hook
        cfg = hook.resolve_cfg(hook.scheduler, hook.cfg)
        record = submitted_app(run.app, hook.scheduler, cfg, run.trackers.secret_env_names())
        # the trackers as this try resolved them (templates rendered): TorchXPromoteOperator's default
        record["tracker_conn_ids"] = list(run.trackers.conn_ids)
        run.ti.xcom_push(key=XCOM_SUBMITTED_APP, value=record)

    def _refuse_if_killed(self, app_handle: str | None) -> None:
        """A task killed while it resubmitted (``on_kill`` cancelled the job it knew) submits nothing
        more, and cancels ``app_handle`` if it was submitted meanwhile."""
        if not self.kills.killed:
            return
        if app_handle is not None:
            self.run.hook.cancel(app_handle)
        raise TorchXAppFailedError(
            app_handle or str(self.app_handle), "CANCELLED", "the task was killed while resubmitting", "", {}
        )

    # end

    def ended(self, app_handle: str, state: str, msg: str, earlier_try: bool = False) -> str | None:
        """The job ended: every policy hears of it once (``earlier_try``: an earlier try's job this
        try found ended, told as ``run.earlier_try_end``); the handle of the job submitted in its
        place (a ``NextAttempt``), or None when the task ends with this job."""
        if app_handle in self._ended:
            return None
        self._ended.add(app_handle)
        next_attempt: NextAttempt | None = None
        self.run.earlier_try_end = earlier_try
        try:
            for policy in self.policies:
                answer = policy.ended(self.run, app_handle, state, msg)
                next_attempt = next_attempt or answer
        finally:
            self.run.earlier_try_end = False
        if next_attempt is None or state == SUCCEEDED:
            return None
        self.run.replace_app(next_attempt.app)
        self.status, self.status_of, self.result = None, None, None
        return self.submit(next_attempt.app, RESUBMITTED)

    def wait_in_worker(self, app_handle: str) -> AppStatus:
        """Poll until the app is terminal, streaming its logs (``run.waiting.WorkerWait``)."""
        with self.kills.only_waiting():
            status = self.wait.until_terminal(app_handle, role_replicas(self.run.app))
        self.status, self.status_of = status, app_handle
        return status

    def print_logs(self, app_handle: str, cursor: Mapping[str, Any], max_lines: int) -> None:
        """After a deferred wait: the last ``max_lines`` lines of every replica from ``cursor`` on."""
        if not self.wait.stream_logs:
            return
        from torchx_airflow.run.logs import print_app_logs

        replicas = role_replicas(self.run.app)
        print_app_logs(self.run.hook, app_handle, replicas, self.run.log, cursor=cursor, max_lines=max_lines)

    def resume(self, kind: str, app_handle: str, status: dict[str, Any]) -> dict[str, Any] | str:
        """After a deferred wait's event: the task's result, or the handle of a job resubmitted in
        place of the one that ended; raises for a timeout or an app that did not succeed."""
        if kind == "timeout":
            state, message = status.get("state", "CANCELLED"), status.get("message", "")
            raise TorchXAppFailedError(app_handle, state, message, "", {})
        state, msg = str(status.get("state", "")), str(status.get("msg", ""))
        resubmitted = self.ended(app_handle, state, msg)
        if resubmitted is not None:
            return resubmitted
        self.result = self.finish(app_handle, status, True)
        return self.result

    def outcome(self) -> tuple[str | None, dict[str, Any] | None, AppStatus | None, dict[str, Any]]:
        """``(app handle, result, last status, the fields policies added when the app ended)``."""
        return self.app_handle, self.result, self.status, self.run.result_fields

    # finish

    def job_result(self, app_handle: str) -> dict[str, Any]:
        """The task's result for ``app_handle`` (made once), from its last status."""
        if self.result is None:
            status = self.status if self.status_of == app_handle else None
            if status is None:
                status = self.status_of_handle(app_handle)
            launcher_bound = not self.run.hook.apps_outlive_launcher(scheduler_of(app_handle))
            summary = status_summary(app_handle, status, self.run.app, launcher_bound)
            self.result = self.finish(app_handle, summary, status is not None and status.is_terminal())
        return self.result

    def finish(self, app_handle: str, summary: dict[str, Any], terminal: bool) -> dict[str, Any]:
        """The task's result from the app's status ``summary``; raises unless it SUCCEEDED (or, for a
        task that does not wait, the app is not terminal yet)."""
        run = self.run
        self.publish(app_handle)
        if terminal:
            self.ended(app_handle, str(summary.get("state")), str(summary.get("msg") or ""))
        result = finish_run(
            run.context,
            app_handle,
            {**summary, **run.result_fields},
            terminal,
            run.trackers,
            run.tracker_timeout,
            self.artifact_assets,
            run.log,
        )
        for policy in self.policies:
            result = policy.finished(run, app_handle, result)
        return result
