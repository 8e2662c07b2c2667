"""The durable submission protocol: a task's TorchX job is submitted once, whatever the task lives through.

The job's handle is the first thing written after the scheduler accepts it, to Airflow's
``task_state_store`` under the operator's ``external_id_key``: a later try reads it and reattaches
(``ResumableJobMixin``) instead of submitting again. On schedulers that can find a job by a mark
(``SchedulerSupport.finds_submissions``: Slurm, by a word in the job's comment) a mark goes to the
store *before* submitting, so a try that dies between the scheduler's acceptance and the handle's
write leaves enough for the next try to find that job (``recover``).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXError
from torchx_airflow.run.state import SUBMISSION_KEY
from torchx_airflow.settings.resolve import outage_budget

if TYPE_CHECKING:
    from torchx_airflow.hooks.torchx import TorchXDryRun, TorchXHook

log = logging.getLogger(__name__)

# Seconds between lookups while the scheduler does not answer.
_LOOKUP_INTERVAL = 5.0


class DurableSubmission:
    """Submit, persist and recover one task's job through its ``task_state_store``.

    :param hook: the task's hook (submits, and finds marked jobs).
    :param store: the task's ``task_state_store``; None keeps nothing (``durable=False``).
    :param handle_key: the store key of the handle (the operator's ``external_id_key``).
    :param task_id: for messages.
    :param task_log: where to log (the task's logger).
    :param outage_timeout: seconds the lookup of an interrupted submission waits out a scheduler
        that does not answer (``retry.StatusOutage``); None: the connection's, else the site's
        (``settings.resolve.outage_budget``).
    """

    def __init__(
        self,
        hook: TorchXHook,
        store: Any,
        handle_key: str,
        task_id: str,
        task_log: Any = log,
        outage_timeout: float | None = None,
    ) -> None:
        self.hook = hook
        self.store = store
        self.handle_key = handle_key
        self.task_id = task_id
        self.log = task_log
        self.outage_timeout = outage_timeout

    def submit(self, dryrun: TorchXDryRun) -> str:
        """Submit ``dryrun`` and persist its handle before anything else can fail; returns it."""
        token = None
        if self.store is not None and self.hook.finds_submissions(dryrun.scheduler):
            # Before submitting: should this process die before the handle below is written, the
            # next try finds the job by this mark instead of submitting another.
            token = uuid.uuid4().hex
            mark = {"token": token, "scheduler": dryrun.scheduler, "since": time.time()}
            self.store.set(SUBMISSION_KEY, mark)
        app_handle = self.hook.schedule(dryrun, token=token)
        # Before anything else can fail: a retry must find this handle and reattach, never resubmit.
        self.persist(app_handle)
        if token is not None:
            try:  # a mark left behind only costs the next try a lookup that finds this same job
                self.store.delete(SUBMISSION_KEY)
            except Exception as e:
                self.log.warning("Could not remove the submission mark %r: %s", SUBMISSION_KEY, e)
        return app_handle

    def persist(self, app_handle: str) -> None:
        """Keep ``app_handle`` for the next try (nothing without a store)."""
        if self.store is not None:
            self.store.set(self.handle_key, app_handle)

    def recover(self) -> None:
        """Record the handle of a job an earlier try submitted but died before recording, if any.

        The earlier try left its submission mark in the store before submitting; the scheduler is
        asked for a job with that mark. Found: its handle is stored, and the task reattaches to it.
        Not found: that try died before its job reached the scheduler, and this one submits. A
        scheduler that cannot answer fails this try (retryable), mark kept: submitting again might
        run the job twice.
        """
        mark = self.store.get(SUBMISSION_KEY) if self.store is not None else None
        if not isinstance(mark, dict) or not mark.get("token") or not mark.get("scheduler"):
            return
        from torchx_airflow.retry import StatusOutage, call_status, is_retryable

        scheduler, token = str(mark["scheduler"]), str(mark["token"])
        since = float(mark.get("since") or 0.0)
        what = f"Finding the job an earlier try submitted to {scheduler}"
        budget = self.outage_timeout
        outage = StatusOutage(
            what, outage_budget(None, self.hook.settings) if budget is None else budget, self.log
        )
        try:
            app_handle = call_status(
                outage, _LOOKUP_INTERVAL, self.hook.find_submission, scheduler, token, since
            )
        except Exception as e:
            if not is_retryable(e):  # the lookup cannot be trusted on this site: its message says why
                raise
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
            self.persist(app_handle)
        else:
            self.log.info(
                "An earlier try died while submitting, and %s has no job of that submission: submitting",
                scheduler,
            )
        self.store.delete(SUBMISSION_KEY)
