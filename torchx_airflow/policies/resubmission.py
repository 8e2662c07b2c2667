"""Resubmitting a job the infrastructure ended: in the same task try, on a budget of its own.

A job that ends because of the cluster (Slurm ``NODE_FAIL``, ``PREEMPTED``, ``BOOT_FAIL``; what each
scheduler's ``SchedulerSupport.infrastructure_reason`` recognises) did not fail for the user's
reasons. ``TorchXOperator`` submits it again in the same task try, without consuming the task's
``retries``, up to ``infrastructure_retries`` times (task, then connection extra, then ``[torchx]
infrastructure_retries``, 3 by default). A job that exits non-zero, runs out of memory or hits its time
limit fails the task as before.

Resume, not restart: when the ended job recorded an artifact named ``checkpoint`` (the task's
``checkpoint_artifact``) in the task's first tracker, and its path lies under the task's
``checkpoint_root`` (task, connection extra, ``[torchx] checkpoint_root``; unset: the task's output
root, the directories its own rendered arguments name, ``apps.output_roots``), the new job gets its
path in
``TORCHX_AIRFLOW_RESUME_FROM`` and its attempt number in ``TORCHX_AIRFLOW_ATTEMPT`` (both unset on a
first attempt). The artifact is read from the ended attempt's own run only, and any job tracking to
the store can write one: a path anywhere else (another team's file, ``https://...``) is not handed
on; the attempt starts fresh, with a warning. Training code should still load a checkpoint with
``torch.load(path, weights_only=True)``, which unpickles no code. Every attempt goes to
``task_state_store`` key ``torchx_attempts`` before the next one is submitted, and each
resubmission follows the durable protocol of the first (mark, handle, reattach), so a worker lost
mid-way never duplicates a job nor forgets one.

Airflow 3.3's ``retry_policy`` cannot do this: its decisions are bounded by the task's ``retries``
(a ``retries=0`` task is never retried by it) and a retry is a new try, which re-runs everything the
task does before submitting.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchx_airflow.run.execution import NEW, RESUBMITTED
from torchx_airflow.run.points import NextAttempt as NextJob
from torchx_airflow.run.points import RunPolicy
from torchx_airflow.run.state import ATTEMPTS_KEY

if TYPE_CHECKING:
    from torchx.specs import AppDef
    from torchx.tracker.api import TrackerBase

    from torchx_airflow.run.execution import TaskRun

RESUME_FROM_ENV = "TORCHX_AIRFLOW_RESUME_FROM"
ATTEMPT_ENV = "TORCHX_AIRFLOW_ATTEMPT"


class Attempts:
    """The attempts of one task's job, kept in its ``task_state_store`` (in memory without one).

    Each attempt: ``{attempt, app_handle, submitted_at, ended_at, state, reason, elapsed_s,
    resumed_from}``; ``reason`` is the infrastructure's (``NODE_FAIL``...) for an attempt that was
    resubmitted, and ``elapsed_s`` the seconds from its submission to the moment its end was seen:
    the work it lost is at most that (less what its checkpoint kept).
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self._memory: list[dict[str, Any]] = []  # the list as this process last read or wrote it
        self._read = store is None

    def load(self) -> list[dict[str, Any]]:
        """The attempts: read from the store once per process (an execution is their only writer
        while it runs; a resumed or retried one reads them again)."""
        if not self._read:
            value = self.store.get(ATTEMPTS_KEY)
            self._memory = [dict(a) for a in value if isinstance(a, dict)] if isinstance(value, list) else []
            self._read = True
        return [dict(a) for a in self._memory]

    def _save(self, attempts: list[dict[str, Any]]) -> None:
        self._memory, self._read = [dict(a) for a in attempts], True
        if self.store is not None:
            self.store.set(ATTEMPTS_KEY, attempts)

    def reset(self) -> None:
        """Start a new chain: a fresh submission (not a resubmission) follows."""
        if self.load():
            self._save([])

    def started(self, app_handle: str, resumed_from: str | None = None) -> int:
        """Record a submitted job as the chain's next attempt; its number."""
        attempts = self.load()
        number = len(attempts) + 1
        attempts.append(
            {
                "attempt": number,
                "app_handle": app_handle,
                "submitted_at": time.time(),
                "resumed_from": resumed_from,
            }
        )
        self._save(attempts)
        return number

    def ended(self, app_handle: str, state: str, reason: str | None) -> dict[str, Any]:
        """Record how ``app_handle`` ended (an attempt this record lacks is added: an earlier try's)."""
        attempts = self.load()
        mine = next((a for a in attempts if a.get("app_handle") == app_handle), None)
        if mine is None:
            mine = {"attempt": len(attempts) + 1, "app_handle": app_handle, "submitted_at": None}
            attempts.append(mine)
        now = time.time()
        submitted = mine.get("submitted_at")
        mine.update(
            state=state,
            reason=reason,
            ended_at=now,
            elapsed_s=round(now - float(submitted), 3) if submitted else None,
        )
        self._save(attempts)
        return mine

    def annotate(self, app_handle: str, **values: Any) -> None:
        """Add ``values`` (its usage, its cost) to the attempt of ``app_handle``, if recorded."""
        attempts = self.load()
        for attempt in attempts:
            if attempt.get("app_handle") == app_handle:
                attempt.update(values)
                self._save(attempts)
                return

    def resubmissions(self) -> int:
        """How many times the chain's job was resubmitted so far."""
        return max(0, len(self.load()) - 1)

    def summary(self, app_handle: str, state: str | None, read: bool = True) -> list[dict[str, Any]]:
        """Every attempt, the last (``app_handle``) with its current ``state``; for the task's result.

        ``read=False`` answers from what this process last read or wrote, without asking the store:
        OpenLineage's listener may call from a forked process that cannot reach the API server.
        """
        attempts = self.load() if read else [dict(a) for a in self._memory]
        if not attempts or attempts[-1].get("app_handle") != app_handle:
            attempts.append({"attempt": len(attempts) + 1, "app_handle": app_handle})
        if state is not None or "state" not in attempts[-1]:
            attempts[-1]["state"] = state
        return attempts


def checkpoint_of(store: TrackerBase | None, app_handle: str, name: str, task_log: Any) -> str | None:
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
    import copy

    env: Mapping[str, str] = {ATTEMPT_ENV: str(attempt)}
    if resume_from:
        env = {**env, RESUME_FROM_ENV: resume_from}
    resumed = copy.deepcopy(app)
    for role in resumed.roles:
        role.env = {**role.env, **env}
    return resumed


@dataclass(frozen=True)
class ChosenAttempt:
    """What the next job of a chain gets: its number, the checkpoint it resumes from, and why."""

    number: int
    resume_from: str | None
    reason: str
    checkpoint_artifact: str


class Resubmission:
    """One task's policy for jobs the infrastructure ended: the budget, the attempts, the resume.

    :param store: the task's ``task_state_store`` (None: attempts are kept in memory only).
    :param budget: resubmissions allowed (``infrastructure_retries``).
    :param checkpoint_artifact: the artifact whose path the next job resumes from.
    :param tracker_store: the task's first tracker store, where the job records that artifact.
    :param task_log: the task's logger.
    :param tracker_timeout: seconds a tracker read or write may take (past it: a warning, no resume
        or no lineage; the job is resubmitted all the same).
    """

    def __init__(
        self,
        store: Any,
        budget: int,
        checkpoint_artifact: str,
        tracker_store: TrackerBase | None,
        task_log: Any,
        tracker_timeout: float = 60.0,
        checkpoint_roots: tuple[str, ...] = (),
    ) -> None:
        self.attempts = Attempts(store)
        self.checkpoint_roots = checkpoint_roots
        self.tracker_timeout = tracker_timeout
        self.budget = budget
        self.checkpoint_artifact = checkpoint_artifact
        self.tracker_store = tracker_store
        self.log = task_log

    def next_attempt(self, app_handle: str, state: str, reason: str) -> ChosenAttempt | None:
        """Record that the infrastructure ended ``app_handle``; the next attempt, or None when the
        budget is used up (the task then fails with this job's state)."""
        ended = self.attempts.ended(app_handle, state, reason)
        used = self.attempts.resubmissions()
        if used >= self.budget:
            self.log.error(
                "TorchX app %s ended %s (%s: the infrastructure's doing, not the app's), but the task's "
                "%d resubmission(s) for such ends are used up (infrastructure_retries=%d): the task "
                "fails with it. Raise infrastructure_retries (task, connection extra or [torchx]) to "
                "resubmit more often.",
                app_handle,
                state,
                reason,
                used,
                self.budget,
            )
            return None
        from torchx_airflow.retry import call_within

        _, checkpoint = call_within(
            self.tracker_timeout,
            f"Reading the {self.checkpoint_artifact!r} artifact of {app_handle}",
            lambda: checkpoint_of(self.tracker_store, app_handle, self.checkpoint_artifact, self.log),
        )
        found = checkpoint or ended.get("resumed_from")
        resume_from = self._own_checkpoint(app_handle, found)
        number = int(ended.get("attempt") or len(self.attempts.load())) + 1
        if resume_from:
            start = f"resuming from {resume_from}"
        elif found:  # refused: the warning above names the path and the root
            start = f"from the start: its {self.checkpoint_artifact!r} artifact is outside checkpoint_root"
        else:
            start = f"from the start: it recorded no {self.checkpoint_artifact!r} artifact"
        self.log.warning(
            "TorchX app %s ended %s (%s): the infrastructure ended it, not the app. Resubmitting it in "
            "this try (attempt %d; resubmission %d of %d, the task's retries untouched), %s",
            app_handle,
            state,
            reason,
            number,
            used + 1,
            self.budget,
            start,
        )
        return ChosenAttempt(number, resume_from, reason, self.checkpoint_artifact)

    def _own_checkpoint(self, app_handle: str, path: str | None) -> str | None:
        """``path`` when it lies under one of the task's checkpoint roots; else None, with a warning."""
        from torchx_airflow.apps import is_under

        if not path or any(is_under(path, root) for root in self.checkpoint_roots):
            return path
        self.log.warning(
            "The %r artifact of %s is %r, which is not under the task's checkpoint_root (%s): a job that "
            "tracks to the same store may have written it, so the next attempt starts fresh instead. "
            "Set checkpoint_root (task, connection extra or [torchx]) to where the task's jobs write "
            "their checkpoints.",
            self.checkpoint_artifact,
            app_handle,
            path,
            ", ".join(self.checkpoint_roots) or "none: the task's arguments name no directory",
        )
        return None

    def link(self, stores: Iterable[TrackerBase], new_handle: str, previous: str, attempt: NextJob) -> None:
        """Lineage: the new job's run has the ended one as its source (through its checkpoint when
        it resumes from one). A store that fails costs a warning, never the running job."""
        from torchx_airflow.lineage.edges import record_attempt
        from torchx_airflow.retry import call_within

        artifact = attempt.details.get("checkpoint_artifact") if attempt.details.get("resume_from") else None

        def record() -> None:
            for store in stores:
                record_attempt(store, new_handle, attempt.number, previous, attempt.reason, artifact)

        call_within(self.tracker_timeout, f"Recording the attempts of {new_handle}", record)


class ResubmissionPolicy(RunPolicy):
    """Resubmit a job the infrastructure ended, in the same try, resuming from its checkpoint.

    :param infrastructure_retries: the task's budget; None: the connection's, else ``[torchx]``.
    :param checkpoint_artifact: the artifact whose path the next attempt resumes from.
    """

    def __init__(
        self, infrastructure_retries: int | None, checkpoint_artifact: str, checkpoint_root: str | None = None
    ) -> None:
        self.infrastructure_retries = infrastructure_retries
        self.checkpoint_artifact = checkpoint_artifact
        self.checkpoint_root = checkpoint_root
        self._of: Resubmission | None = None
        self._pending: tuple[str, NextJob] | None = None  # (ended handle, its next attempt)

    def state(self, run: TaskRun) -> Resubmission:
        """This execution's budget and attempts (made once)."""
        if self._of is None:
            from torchx_airflow.settings.resolve import resolve

            budget = int(
                resolve(
                    "infrastructure_retries",
                    self.infrastructure_retries,
                    run.hook.settings.infrastructure_retries,
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
            first_store = run.trackers.stores[0] if run.trackers else None
            self._of = Resubmission(
                run.store,
                budget,
                self.checkpoint_artifact,
                first_store,
                run.log,
                run.tracker_timeout,
                self._checkpoint_roots(run),
            )
        return self._of

    def _checkpoint_roots(self, run: TaskRun) -> tuple[str, ...]:
        """The task's ``checkpoint_root`` (task, connection, ``[torchx]``), else its output root."""
        from torchx_airflow.apps import output_roots
        from torchx_airflow.settings.resolve import resolve

        connection = getattr(run.hook.settings, "checkpoint_root", None)
        root = resolve("checkpoint_root", self.checkpoint_root, connection)
        return (str(root),) if root else output_roots(run.app)

    def resubmits(self, run: TaskRun) -> bool:
        return self.state(run).budget > 0

    def before_submit(self, run: TaskRun, app: AppDef) -> None:
        if run.submission == NEW:  # an earlier try's chain must not count against this job
            self.state(run).attempts.reset()

    def submitted(self, run: TaskRun, app_handle: str) -> None:
        resubmission = self.state(run)
        if run.submission == NEW:
            resubmission.attempts.started(app_handle)
        elif run.submission == RESUBMITTED and self._pending is not None:
            previous, attempt = self._pending
            self._annotate_usage(resubmission, previous, run.result_fields)
            resume_from = attempt.details.get("resume_from")
            resubmission.attempts.started(app_handle, resume_from)
            stores = run.trackers.stores if run.trackers else ()
            resubmission.link(stores, app_handle, previous, attempt)
            self._pending = None

    @staticmethod
    def _annotate_usage(resubmission: Resubmission, previous: str, fields: Mapping[str, Any]) -> None:
        """The usage and cost of ``previous`` on its attempt, when it ended without them there (an
        earlier try's job, whose usage is read only once its resubmission is decided)."""
        used = {k: fields[k] for k in ("usage", "cost") if k in fields}
        recorded = next((a for a in resubmission.attempts.load() if a.get("app_handle") == previous), {})
        if used and "usage" not in recorded:
            resubmission.attempts.annotate(previous, **used)

    def ended(self, run: TaskRun, app_handle: str, state: str, msg: str) -> NextJob | None:
        attempt = self._next_attempt(run, app_handle, state, msg)
        if attempt is None:
            run.result_fields["attempts"] = self.state(run).attempts.summary(app_handle, state)
        return attempt

    def _next_attempt(self, run: TaskRun, app_handle: str, state: str, msg: str) -> NextJob | None:
        if state == "SUCCEEDED":
            return None
        reason = run.hook.infrastructure_reason(app_handle, state, msg)
        if reason is None:
            return None
        if run.deadline is not None and run.deadline <= time.time():
            run.log.error(
                "TorchX app %s ended %s (%s) past the task's execution_timeout: not resubmitting",
                app_handle,
                state,
                reason,
            )
            return None
        resubmission = self.state(run)
        chosen = resubmission.next_attempt(app_handle, state, reason)
        if chosen is None:
            return None
        # what the ended job used (and cost) stays with its attempt: the result's usage is the last job's
        used = {k: run.result_fields[k] for k in ("usage", "cost") if k in run.result_fields}
        if used:  # an earlier try's job: its usage is read once its resubmission is decided
            resubmission.attempts.annotate(app_handle, **used)
        attempt = NextJob(
            app=with_resume_env(run.app, chosen.number, chosen.resume_from),
            number=chosen.number,
            reason=reason,
            details={"resume_from": chosen.resume_from, "checkpoint_artifact": chosen.checkpoint_artifact},
        )
        self._pending = (app_handle, attempt)
        return attempt

    def finished(self, run: TaskRun, app_handle: str, result: dict[str, Any]) -> dict[str, Any]:
        if "attempts" not in result:  # a task that does not wait: the job is not terminal yet
            result["attempts"] = self.state(run).attempts.summary(app_handle, result.get("state"))
        return result
