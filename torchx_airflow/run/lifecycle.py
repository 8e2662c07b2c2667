"""The life of one task execution's app: prepare, submit (or short-cut, or reattach), wait, end,
resubmit, finish, close; the policies at the points of ``run.points``.

``RunLifecycle`` owns the loop: a job that ends is heard by the policies, a job one of them asks for
in its place is submitted and waited on, in the worker or deferred to the triggerer and resumed
here. ``TorchXOperator`` only maps Airflow's calls onto it: ``execute`` is ``execute(start)`` with
``ResumableJobMixin``'s ``submit_job``, ``get_job_status``, ``poll_until_complete`` and
``get_job_result`` as ``submit_job``, ``status_name``, ``wait_until_done`` and ``job_result``;
``execute_complete`` is ``resume(event)``; ``on_kill`` is ``kill()``. Nothing here reads a policy's
settings or knows which policies there are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from torchx_airflow_tracker.compat import cached_property

from torchx_airflow.apps import SUCCEEDED, role_replicas, scheduler_of
from torchx_airflow.exceptions import TorchXAppFailedError, TorchXConfigError, TorchXTaskKilledError
from torchx_airflow.lineage.keys import XCOM_APP_HANDLE, XCOM_SUBMITTED_APP
from torchx_airflow.run.durable import DurableSubmission
from torchx_airflow.run.execution import NEW, REATTACHED, RESUBMITTED
from torchx_airflow.run.kills import KillGuard
from torchx_airflow.run.points import NextAttempt, ShortCut, policy_name
from torchx_airflow.run.results import finish_run, status_summary
from torchx_airflow.run.state import HANDLE_KEY

if TYPE_CHECKING:
    from torchx.specs import AppDef, AppStatus

    from torchx_airflow.hooks.torchx import TorchXDryRun
    from torchx_airflow.run.execution import TaskRun
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
    :param policies: the task's policies, in the order they join each point (``points.in_order``).
    :param dryrun: dry-runs an app (logs the request); ``resubmits`` as ``TorchXHook.dryrun``.
    :param defer: defers the wait on a handle of this lifecycle's to the triggerer (raises
        ``TaskDeferred``).
    :param poll_interval: seconds between the worker's status polls.
    :param outage_timeout: the task's ``outage_timeout`` (None: the connection's, else the site's).
    :param stream_logs: whether the replicas' logs go to the task log.
    :param max_log_lines: after a deferred wait, at most this many last lines per replica and stream.
    """

    def __init__(
        self,
        run: TaskRun,
        policies: Sequence[RunPolicy],
        dryrun: Callable[..., tuple[TorchXDryRun, dict[str, Any]]],
        defer: Callable[[str, RunLifecycle], NoReturn],
        *,
        poll_interval: float,
        outage_timeout: float | None,
        stream_logs: bool,
        max_log_lines: int,
    ) -> None:
        self.run = run
        self.policies = tuple(policies)
        self._dryrun = dryrun
        self._defer = defer
        self.kills = KillGuard()
        self.poll_interval = poll_interval
        self.outage_timeout = outage_timeout
        self.stream_logs = stream_logs
        self.max_log_lines = max_log_lines
        self.app_handle: str | None = None
        self.status: AppStatus | None = None
        self.status_of: str | None = None  # the handle ``status`` is of
        self.result: dict[str, Any] | None = None
        self._heard: set[str] = set()  # handles whose end the policies heard (once each)
        self._closed = False

    @cached_property
    def outage_budget(self) -> float:
        """Seconds every wait of this execution goes on without an answer (``outage_budget``)."""
        from torchx_airflow.settings.resolve import outage_budget

        return outage_budget(self.outage_timeout, self.run.hook.settings)

    @cached_property
    def wait(self) -> WorkerWait:
        """The worker's wait: status polls within the outage budget, logs streamed."""
        from torchx_airflow.run.waiting import WorkerWait

        run = self.run
        return WorkerWait(run.hook, self.poll_interval, self.outage_budget, run.log, self.stream_logs)

    # the execution as a whole

    def execute(
        self, start: Callable[[], dict[str, Any]], setup: Callable[[], None] | None = None
    ) -> dict[str, Any]:
        """This execution from its start: ``start`` submits or reattaches and waits
        (``ResumableJobMixin.execute_resumable``), after ``setup`` (what the operator does first:
        ``@task.torchx`` calls its function), the policies prepared the app and a submission an
        earlier try left unrecorded was recovered."""
        from torchx_airflow.run.waiting import check_leavable

        def body() -> dict[str, Any]:
            if setup is not None:
                setup()
            check_leavable(self.run.hook, self.run.hook.scheduler, self.run.wait_for_completion)
            self.prepare_app()
            self.durable().recover()  # a try that died submitting left a mark
            return start()

        return self._through(body)

    def resume(self, event: Any, setup: Callable[[], None] | None = None) -> dict[str, Any]:
        """This execution after the trigger's ``event`` (after ``setup``): the app's logs, then its end."""

        def body() -> dict[str, Any]:
            from torchx_airflow.run.waiting import resumed_app

            if setup is not None:
                setup()
            self.prepare_app()
            kind, app_handle, status = resumed_app(event)
            self.app_handle = app_handle  # published before the deferral
            with self.kills.only_waiting():
                self.print_logs(app_handle, (event or {}).get("log_cursor") or {})
            if kind == "timeout":
                state, message = status.get("state", "CANCELLED"), status.get("message", "")
                raise TorchXAppFailedError(app_handle, state, message, "", {})
            replaced_by = self.job_ended(app_handle, str(status.get("state", "")), str(status.get("msg", "")))
            if replaced_by is not None:
                return self.wait_until_done(replaced_by)
            self.result = self.finish(app_handle, status, True)
            return self.result

        return self._through(body)

    def _through(self, body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run ``body`` as (the rest of) this execution; whatever ends it closes it, once: a result, a
        policy's short cut, an error, a kill or a timeout. A deferral or a wait for an approver is no
        end: the execution goes on when the task resumes."""
        from airflow.sdk.exceptions import AirflowTaskTimeout, TaskAwaitingInput, TaskDeferred

        try:
            try:
                with self.kills.running(self.run.ti):
                    try:
                        result = body()
                    except ShortCutTaken as taken:  # a policy's result: nothing was submitted
                        result = taken.short_cut.result
                        self._record_app(short_cut=True)
            except (TaskDeferred, TaskAwaitingInput):
                raise
            except BaseException as error:
                if isinstance(error, AirflowTaskTimeout):  # the kill guard noted it: cancel first
                    self._cancel_after_timeout()
                self.close(error=error)
                raise
            self.close(result=result)
            return result
        finally:
            self.run.hook.close()

    def _cancel_after_timeout(self) -> None:
        """Cancel the job of a task whose ``execution_timeout`` passed; a cancel that fails is logged
        (Airflow's own ``on_kill`` tries again): the task ends with its timeout either way."""
        try:
            self.kill()
        except Exception as e:
            self.run.log.warning(
                "Could not cancel TorchX app %s after the task's execution_timeout: %s: %s",
                self.app_handle,
                type(e).__name__,
                e,
            )

    def close(self, *, result: dict[str, Any] | None = None, error: BaseException | None = None) -> None:
        """The policies' ``closed``, once per execution; a policy's error is logged, never the task's."""
        if self._closed:
            return
        self._closed = True
        for policy in self.policies:
            try:
                policy.closed(self.run, result=result, error=error)
            except Exception as e:
                self.run.log.warning(
                    "Policy %s failed when the task's execution ended: %s: %s",
                    policy_name(policy),
                    type(e).__name__,
                    e,
                )

    def kill(self) -> None:
        """``on_kill``: cancel the app if the task was killed (``run.kills``), and end a wait under way
        with ``TorchXTaskKilledError``; else leave it for the next try (and end a wait under way with
        ``TorchXWaitInterruptedError``). The execution then ends in its own thread, which closes it:
        no policy runs in the signal handler."""
        if self.app_handle is None or self.kills.cancelled:  # nothing submitted yet, or cancelled already
            return
        hook = self.run.hook
        self.kills.on_kill(self.app_handle, hook.cancel, self.run.log, hook.apps_outlive_launcher())

    # the app

    def prepare_app(self) -> AppDef:
        """The app as every policy's ``prepare`` left it, each given what the one before returned;
        it becomes ``run.app``."""
        import copy

        from torchx.specs import AppDef

        run = self.run
        app = copy.deepcopy(run.built_app)  # run.built_app stays as built, whatever a policy mutates
        for policy in self.policies:
            prepared = policy.prepare(run, app=app)
            if prepared is None:
                continue
            if not isinstance(prepared, AppDef):
                raise TorchXConfigError(
                    f"{run.where}: policy {policy_name(policy)!r} returned {prepared!r} from prepare. Return "
                    "a torchx.specs.AppDef (the app, changed) or None (unchanged). Nothing was submitted."
                )
            app = prepared
        run.replace_app(app)
        return app

    def durable(self) -> DurableSubmission:
        run = self.run
        return DurableSubmission(run.hook, run.store, HANDLE_KEY, run.task_id, run.log, self.outage_budget)

    def publish(self, app_handle: str) -> None:
        """XCom ``app_handle``, once per execution (a new try starts with its XComs cleared)."""
        if self.app_handle != app_handle:
            self.app_handle = app_handle
            self.run.ti.xcom_push(key=XCOM_APP_HANDLE, value=app_handle)

    def status_of_handle(self, app_handle: str) -> AppStatus | None:
        """The app's status now (within the outage budget), remembered as the last one seen."""
        self.status, self.status_of = self.wait.status(app_handle), app_handle
        return self.status

    def status_name(self, app_handle: str) -> str:
        """``get_job_status``: the state of an earlier try's job, or ``NOT_FOUND``."""
        status = self.status_of_handle(app_handle)
        return status.state.name if status is not None else "NOT_FOUND"

    # submit

    def submit_job(self) -> str:
        """``submit_job``: the job of a task with no running one. An earlier try's job that just
        answered ended (``status_name``) is heard first: a policy may submit its next attempt."""
        if self.status is not None and self.status_of is not None:
            replaced_by = self.job_ended(self.status_of, self.status.state.name, self.status.msg, True)
            if replaced_by is not None:
                return replaced_by
        return self.submit(self.run.app, NEW)

    def submit(self, app: AppDef, submission: str, attempt: NextAttempt | None = None) -> str:
        """Submit ``app`` after the policies' ``before_submit`` (a ``ShortCut`` ends the task with its
        result: ``ShortCutTaken``), persist its handle, record the attempt, tell the policies."""
        run = self.run
        run.submission = submission
        if submission == NEW:  # what an earlier try's job left (its end was heard): a new job has its own
            for field in ("attempts", "usage", "cost"):
                run.result_fields.pop(field, None)
        for policy in self.policies:
            short_cut = policy.before_submit(run, app=app)
            if short_cut is not None:
                self.result = short_cut.result
                self.publish(short_cut.app_handle)
                raise ShortCutTaken(short_cut)
        dryrun, _ = self._dryrun(app, resubmits=run.wait_for_completion and run.task_resubmits)
        run.trackers.check_within(run.tracker_timeout, run.where)
        self._refuse_if_killed(None)
        if submission == NEW:  # before the job exists: a try that dies submitting leaves no old chain
            run.attempts.reset()
        app_handle = self.durable().submit(dryrun)
        self._refuse_if_killed(app_handle)  # killed while sbatch ran: on_kill cancelled the job before
        run.log.info("Submitted TorchX app %s", app_handle)
        if attempt is None:
            run.attempts.record_start(app_handle)
        else:
            run.attempts.record_start(app_handle, attempt.number, **attempt.details)
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
            policy.submitted(run, app_handle=app_handle)
        self._record_app()
        record_task_run(run.trackers, app_handle, run.context, run.tracker_timeout, run.log, run.app)

    def _record_app(self, short_cut: bool = False) -> None:
        """XCom ``torchx_app``: what was submitted, secrets masked, for comparing runs; for a
        ``short_cut`` (a cache hit), what the run it stands for submitted (the same app), marked
        ``short_cut``, so its output roots are known downstream (a promotion, a sweep)."""
        from torchx_airflow.lineage.submitted import submitted_app

        run, hook = self.run, self.run.hook
        try:
            cfg = hook.resolve_cfg(hook.scheduler, hook.cfg)
            record = submitted_app(
                run.app, hook.scheduler, cfg, run.trackers.secret_env_names(), run.output_roots
            )
        except Exception as e:
            if not short_cut:
                raise
            run.log.warning("Not recording the app of the cached result: %s: %s", type(e).__name__, e)
            return
        # the trackers as this try resolved them (templates rendered): TorchXPromoteOperator's default
        record["tracker_conn_ids"] = list(run.trackers.conn_ids)
        if short_cut:
            record["short_cut"] = True
        run.ti.xcom_push(key=XCOM_SUBMITTED_APP, value=record)

    def _refuse_if_killed(self, app_handle: str | None) -> None:
        """A task killed while it resubmitted (``on_kill`` cancelled the job it knew) submits nothing
        more, and cancels ``app_handle`` if it was submitted meanwhile."""
        if not self.kills.killed:
            return
        if app_handle is not None:
            self.run.hook.cancel(app_handle)
        raise TorchXTaskKilledError(app_handle or self.app_handle, self.kills.reason)

    # wait and end

    def wait_until_done(self, app_handle: str) -> dict[str, Any]:
        """``poll_until_complete``: wait for ``app_handle`` (an earlier try's: reattached), let the
        policies hear its end, wait for the job one of them submits in its place, and so on; the
        task's result. A deferred wait continues in ``resume``."""
        if self.app_handle != app_handle:
            self.reattached(app_handle)
        while self.run.wait_for_completion:
            status = self._wait(app_handle)
            replaced_by = self.job_ended(app_handle, status.state.name, status.msg)
            if replaced_by is None:
                break
            app_handle = replaced_by
        return self.job_result(app_handle)

    def _wait(self, app_handle: str) -> AppStatus:
        """The app's terminal status, waited for in the worker; or, in the triggerer, the wait is
        deferred unless one check finds it done already (a quick job, a reattach after its end)."""
        if not self.run.waits_in_triggerer:
            with self.kills.only_waiting():
                status = self.wait.until_terminal(app_handle, role_replicas(self.run.app))
            self.status, self.status_of = status, app_handle
            return status
        checked = self.status_of_handle(app_handle)
        if checked is None or not checked.is_terminal():
            self._defer(app_handle, self)
        self.print_logs(app_handle, {})
        return checked

    def job_ended(self, app_handle: str, state: str, msg: str, earlier_try: bool = False) -> str | None:
        """The job ended: the policies hear it once (``earlier_try``: an earlier try's job this try
        found ended); the handle of the job a ``NextAttempt`` submits in its place, or None."""
        if app_handle in self._heard:
            return None
        self._heard.add(app_handle)
        run = self.run
        run.attempts.record_end(app_handle, state)
        next_attempt: NextAttempt | None = None
        for policy in self.policies:
            answer = policy.ended(run, app_handle=app_handle, state=state, msg=msg, earlier_try=earlier_try)
            next_attempt = next_attempt or answer
        if next_attempt is None or state == SUCCEEDED or not run.wait_for_completion:
            run.result_fields["attempts"] = run.attempts.summary(app_handle, state)
            return None
        # what the ended job used (and cost) stays with its attempt: the result's usage is the last job's
        spent = {key: run.result_fields[key] for key in ("usage", "cost") if key in run.result_fields}
        run.attempts.annotate(app_handle, reason=next_attempt.reason, **spent)
        run.replace_app(next_attempt.app)
        self.status, self.status_of, self.result = None, None, None
        return self.submit(next_attempt.app, RESUBMITTED, next_attempt)

    def print_logs(self, app_handle: str, cursor: Mapping[str, Any]) -> None:
        """After a deferred wait: the last ``max_log_lines`` lines of every replica from ``cursor`` on."""
        if not self.stream_logs:
            return
        from torchx_airflow.run.logs import print_app_logs

        replicas = role_replicas(self.run.app)
        print_app_logs(
            self.run.hook, app_handle, replicas, self.run.log, cursor=cursor, max_lines=self.max_log_lines
        )

    def outcome(self) -> tuple[str | None, dict[str, Any] | None, AppStatus | None, dict[str, Any]]:
        """``(app handle, result, last status, the fields policies added when the app ended)``."""
        return self.app_handle, self.result, self.status, self.run.result_fields

    # finish

    def job_result(self, app_handle: str) -> dict[str, Any]:
        """``get_job_result``: the task's result (made once), from the app's last status; an earlier
        try's job found SUCCEEDED is heard as ended first."""
        if self.result is None:
            status = self.status if self.status_of == app_handle else None
            if status is None:
                status = self.status_of_handle(app_handle)
            terminal = status is not None and status.is_terminal()
            if status is not None and terminal and app_handle not in self._heard:
                # an earlier try's job found ended (ResumableJobMixin), or, for a task that does not
                # wait, the job this execution submitted, already over
                earlier = app_handle != self.app_handle
                self.job_ended(app_handle, status.state.name, status.msg, earlier_try=earlier)
            launcher_bound = not self.run.hook.apps_outlive_launcher(scheduler_of(app_handle))
            summary = status_summary(app_handle, status, self.run.app, launcher_bound)
            self.result = self.finish(app_handle, summary, terminal)
        return self.result

    def finish(self, app_handle: str, summary: dict[str, Any], terminal: bool) -> dict[str, Any]:
        """The task's result from the app's status ``summary``; raises unless it SUCCEEDED (or, for a
        task that does not wait, the app is not terminal yet)."""
        run = self.run
        self.publish(app_handle)
        if "attempts" not in run.result_fields:  # a task that does not wait: its job runs on
            run.result_fields["attempts"] = run.attempts.summary(app_handle, summary.get("state"))
        result = finish_run(
            run.context,
            app_handle,
            {**summary, **run.result_fields},
            terminal,
            run.trackers,
            run.tracker_timeout,
            run.artifact_assets,
            run.log,
            run.output_roots,
        )
        for policy in self.policies:
            result = policy.finished(run, app_handle=app_handle, result=result)
        return result
