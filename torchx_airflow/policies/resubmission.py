"""Resubmitting a job the infrastructure ended: in the same task try, on a budget of its own.

A job that ends because of the cluster (Slurm ``NODE_FAIL``, ``PREEMPTED``, ``BOOT_FAIL``; what each
scheduler's ``SchedulerSupport.infrastructure_reason`` recognises) did not fail for the user's
reasons. ``TorchXOperator`` submits it again in the same task try, without consuming the task's
``retries``, up to ``infrastructure_retries`` times (task, then connection extra, then ``[torchx]
infrastructure_retries``, 3 by default). A job that exits non-zero, runs out of memory or hits its time
limit fails the task as before.

Resume, not restart: when the ended job recorded an artifact named ``checkpoint`` (the task's
``checkpoint_artifact``) in the task's first tracker, and its path lies under the task's output
roots (``run.output_roots``: ``output_roots`` of the connection or ``[torchx]``, and the directories
its own rendered arguments name as outputs; the deprecated ``checkpoint_root`` adds one), the new
job gets its path in ``TORCHX_AIRFLOW_RESUME_FROM`` and its attempt number in
``TORCHX_AIRFLOW_ATTEMPT`` (both unset on a first attempt). The artifact is read from the ended
attempt's own run only, and any job tracking to the store can write one: a path anywhere else
(another team's file, ``https://...``) is not handed on; the attempt starts fresh, with a warning.
Training code should still load a checkpoint with ``torch.load(path, weights_only=True)``, which
unpickles no code. The lifecycle records every attempt (``run.attempts``: ``task_state_store`` key
``torchx_attempts``) before the next one is submitted, and each resubmission follows the durable
protocol of the first (mark, handle, reattach), so a worker lost mid-way never duplicates a job nor
forgets one.

Airflow 3.3's ``retry_policy`` cannot do this: its decisions are bounded by the task's ``retries``
(a ``retries=0`` task is never retried by it) and a retry is a new try, which re-runs everything the
task does before submitting.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torchx_airflow.run.execution import RESUBMITTED
from torchx_airflow.run.points import NextAttempt, RunPolicy

if TYPE_CHECKING:
    from torchx.specs import AppDef
    from torchx_airflow_tracker.protocol import ProviderStore

    from torchx_airflow.run.execution import TaskRun

RESUME_FROM_ENV = "TORCHX_AIRFLOW_RESUME_FROM"
ATTEMPT_ENV = "TORCHX_AIRFLOW_ATTEMPT"


def checkpoint_of(store: ProviderStore | None, app_handle: str, name: str, task_log: Any) -> str | None:
    """The path of artifact ``name`` the ended job recorded in ``store``; None without one."""
    if store is None:
        return None
    try:
        artifact = store.artifacts(app_handle).get(name)
    except Exception as e:  # a store that cannot answer costs the resume, never the resubmission
        task_log.warning(
            "Could not read artifact %r of %s from %r (%s: %s): the job restarts from scratch",
            name,
            app_handle,
            store,
            type(e).__name__,
            e,
        )
        return None
    return str(artifact.path) if artifact is not None and artifact.path else None


def with_resume_env(app: AppDef, attempt: int, resume_from: str | None) -> AppDef:
    """A copy of ``app`` whose every role has the attempt's resume variables in its env."""
    env: Mapping[str, str] = {ATTEMPT_ENV: str(attempt)}
    if resume_from:
        env = {**env, RESUME_FROM_ENV: resume_from}
    resumed = copy.deepcopy(app)
    for role in resumed.roles:
        role.env = {**role.env, **env}
    return resumed


class ResubmissionPolicy(RunPolicy):
    """Resubmit a job the infrastructure ended, in the same try, resuming from its checkpoint.

    :param infrastructure_retries: the task's budget; None: the connection's, else ``[torchx]``.
    :param checkpoint_artifact: the artifact whose path the next attempt resumes from.
    :param checkpoint_root: where that path must lie; None: the connection's, else ``[torchx]``,
        else the task's output root.
    """

    name = "resubmission"

    def __init__(
        self, infrastructure_retries: int | None, checkpoint_artifact: str, checkpoint_root: str | None = None
    ) -> None:
        self.infrastructure_retries = infrastructure_retries
        self.checkpoint_artifact = checkpoint_artifact
        self.checkpoint_root = checkpoint_root

    def budget(self, run: TaskRun) -> int:
        """This execution's resubmissions allowed: the task's, else the connection's, else the site's;
        0 for a task that waits in the triggerer without a state store (its attempts would not
        outlive the deferral)."""
        memo = run.memo(self)
        if "budget" not in memo:
            from torchx_airflow.settings.resolve import resolve

            settings = run.hook.settings
            budget = int(
                resolve(
                    "infrastructure_retries", self.infrastructure_retries, settings.infrastructure_retries
                )
            )
            if run.store is None and run.waits_in_triggerer and budget:
                run.log.warning(
                    "Task %s waits in the triggerer without a task_state_store (durable=False): the "
                    "attempts of a resubmitted job would not outlive the deferral, so jobs the "
                    "infrastructure ends are not resubmitted (infrastructure_retries=%d is ignored)",
                    run.task_id,
                    budget,
                )
                budget = 0
            memo["budget"] = budget
        return int(memo["budget"])

    def prepare(self, run: TaskRun, *, app: AppDef, **kwargs: Any) -> None:
        """The scheduler must leave jobs the infrastructure ends to this policy (Slurm: no requeue)."""
        if run.wait_for_completion and self.budget(run) > 0:
            run.task_resubmits = True

    def ended(
        self, run: TaskRun, *, app_handle: str, state: str, msg: str, **kwargs: Any
    ) -> NextAttempt | None:
        """The next attempt of a job the infrastructure ended, within the budget and the task's
        ``execution_timeout``; None for any other end."""
        if state == "SUCCEEDED" or not run.wait_for_completion:  # a task that does not wait resubmits nothing
            return None
        reason = run.hook.infrastructure_reason(app_handle, state, msg)
        if reason is None:
            return None
        run.attempts.annotate(app_handle, reason=reason)
        if run.deadline is not None and run.deadline <= time.time():
            run.log.error(
                "TorchX app %s ended %s (%s) past the task's execution_timeout: not resubmitting",
                app_handle,
                state,
                reason,
            )
            return None
        used, budget = run.attempts.resubmissions(), self.budget(run)
        if used >= budget:
            run.log.error(
                "TorchX app %s ended %s (%s: the infrastructure's doing, not the app's), but the task's "
                "%d resubmission(s) for such ends are used up (infrastructure_retries=%d): the task "
                "fails with it. Raise infrastructure_retries (task, connection extra or [torchx]) to "
                "resubmit more often.",
                app_handle,
                state,
                reason,
                used,
                budget,
            )
            return None
        ended = run.attempts.of(app_handle) or {}
        number = int(ended.get("attempt") or len(run.attempts.load())) + 1
        resume_from, start = self._resume_from(run, app_handle, ended.get("resumed_from"))
        run.log.warning(
            "TorchX app %s ended %s (%s): the infrastructure ended it, not the app. Resubmitting it in "
            "this try (attempt %d; resubmission %d of %d, the task's retries untouched), %s",
            app_handle,
            state,
            reason,
            number,
            used + 1,
            budget,
            start,
        )
        details = {"resumed_from": resume_from}
        return NextAttempt(with_resume_env(run.app, number, resume_from), number, reason, details)

    def _resume_from(self, run: TaskRun, app_handle: str, resumed_from: Any) -> tuple[str | None, str]:
        """Where the next attempt resumes (the ended job's checkpoint, else what it resumed from,
        when under the checkpoint roots), and how it starts, for the log."""
        from torchx_airflow.retry import call_within

        name = self.checkpoint_artifact
        first_store = run.trackers.stores[0] if run.trackers else None
        _, checkpoint = call_within(
            run.tracker_timeout,
            f"Reading the {name!r} artifact of {app_handle}",
            lambda: checkpoint_of(first_store, app_handle, name, run.log),
        )
        found = checkpoint or (resumed_from if isinstance(resumed_from, str) else None)
        resume_from = self._own_checkpoint(run, app_handle, found)
        if resume_from:
            return resume_from, f"resuming from {resume_from}"
        if found:  # refused: the warning names the path and the root
            return None, f"from the start: its {name!r} artifact is outside the task's output roots"
        return None, f"from the start: it recorded no {name!r} artifact"

    def _own_checkpoint(self, run: TaskRun, app_handle: str, path: str | None) -> str | None:
        """``path`` when it lies under one of the task's checkpoint roots; else None, with a warning."""
        from torchx_airflow.apps import is_under

        roots = self._checkpoint_roots(run)
        if not path or any(is_under(path, root) for root in roots):
            return path
        run.log.warning(
            "The %r artifact of %s is %r, which is not under the task's output roots (%s): a job that "
            "tracks to the same store may have written it, so the next attempt starts fresh instead. "
            "Add where the task's jobs write their checkpoints to output_roots (the torchx connection's "
            "extra, or [torchx] output_roots).",
            self.checkpoint_artifact,
            app_handle,
            path,
            ", ".join(roots) or "none: output_roots is unset and the task's arguments name no output",
        )
        return None

    def _checkpoint_roots(self, run: TaskRun) -> tuple[str, ...]:
        """The task's output roots (``run.output_roots``), and the deprecated ``checkpoint_root``
        (task, connection, ``[torchx]``) when one is set."""
        from torchx_airflow.apps import task_output_roots
        from torchx_airflow.settings.resolve import resolve

        root = resolve("checkpoint_root", self.checkpoint_root, run.hook.settings.checkpoint_root)
        if root:
            run.log.warning(
                "checkpoint_root=%r is deprecated: set output_roots (the torchx connection's extra, or "
                "[torchx] output_roots), which every check of where outputs may lie uses",
                root,
            )
        return task_output_roots(run.app, run.hook.settings, str(root) if root else None)

    def submitted(self, run: TaskRun, *, app_handle: str, **kwargs: Any) -> None:
        """Lineage of a resubmitted job: its run has the ended one as its source (through its
        checkpoint when it resumes from one). A store that fails costs a warning, never the job."""
        chain = run.attempts.load()
        if run.submission != RESUBMITTED or len(chain) < 2 or not run.trackers:
            return
        from torchx_airflow.lineage.edges import record_attempt
        from torchx_airflow.retry import call_within

        previous, mine = chain[-2], chain[-1]
        artifact = self.checkpoint_artifact if mine.get("resumed_from") else None
        reason = str(previous.get("reason") or previous.get("state") or "")

        def record() -> None:
            for store in run.trackers.stores:
                record_attempt(
                    store, app_handle, int(mine["attempt"]), str(previous["app_handle"]), reason, artifact
                )

        call_within(run.tracker_timeout, f"Recording the attempts of {app_handle}", record)
