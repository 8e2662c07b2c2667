"""``TaskRun``: what every step of one task execution needs, fetched once and carried together.

The operator makes one per execution (``execute`` or ``execute_complete``) and hands it to the
lifecycle and the policies: the hook, the trackers and their timeout, the state store under the one
``durable`` rule, the app, where the wait happens, and what policies learned about the run (the
fields they add to the result, such as ``usage``). Nothing else digs in ``context`` for these.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torchx_airflow_tracker.compat import cached_property

from torchx_airflow.run.state import task_state_store

if TYPE_CHECKING:
    from airflow.sdk import Context
    from torchx.specs import AppDef

    from torchx_airflow.hooks.torchx import TorchXHook
    from torchx_airflow.lineage.stores import TrackerSet


def task_deadline(execution_timeout: Any, ti: Any) -> float | None:
    """A task's ``execution_timeout`` as an epoch deadline, counted from the task's start."""
    if execution_timeout is None:
        return None
    start = getattr(ti, "start_date", None)
    return (start.timestamp() if start is not None else time.time()) + execution_timeout.total_seconds()


#: ``TaskRun.submission`` values.
NEW, RESUBMITTED, REATTACHED = "new", "resubmitted", "reattached"


class TaskRun:
    """One execution of a TorchX task.

    :param task_id: the task's id, for messages.
    :param context: the task's Airflow context.
    :param hook: the task's hook (scheduler, cfg, connection settings).
    :param trackers: returns the task's trackers (opened on first use).
    :param build_app: returns the task's app (built on first use; a resubmission replaces it).
    :param durable: whether the task keeps state across tries (``run.state``).
    :param tracker_timeout: seconds each tracker step gets.
    :param wait_for_completion: whether the task waits for its app.
    :param waits_in_triggerer: where the wait happens (``run.waiting.waits_in_triggerer``).
    :param task_log: the task's logger.
    :param execution_timeout: the task's ``execution_timeout`` (``deadline`` counts from its start).
    """

    #: what Airflow resumed this execution with, set by the operator: ``event`` (an approver's answer)
    #: and what the task parked with (``policies.cost.approval``)
    resumed_with: dict[str, Any] | None = None

    def __init__(
        self,
        *,
        task_id: str,
        context: Context,
        hook: TorchXHook,
        trackers: Callable[[], TrackerSet],
        build_app: Callable[[], AppDef],
        durable: bool,
        tracker_timeout: float,
        wait_for_completion: bool,
        waits_in_triggerer: bool,
        task_log: Any,
        execution_timeout: Any = None,
    ) -> None:
        self.task_id = task_id
        self.context = context
        self.hook = hook
        self._trackers = trackers
        self._build_app = build_app
        self.durable = durable
        self.tracker_timeout = tracker_timeout
        self.wait_for_completion = wait_for_completion
        self.waits_in_triggerer = waits_in_triggerer
        self.log = task_log
        #: the epoch by which the task must end (its ``execution_timeout``), or None
        self.deadline = task_deadline(execution_timeout, context["ti"])
        #: how the task's current job came to be (``NEW``, ``RESUBMITTED``, ``REATTACHED``)
        self.submission = NEW
        #: True while the policies hear of the end of an earlier try's job, which this try found
        #: ended before it submitted (that try saw the end itself, or died before it could)
        self.earlier_try_end = False
        #: fields policies add to the result when the job ends (``usage``, ``cost``, ``attempts``):
        #: a failed app's error and its OpenLineage facets carry them too
        self.result_fields: dict[str, Any] = {}

    @property
    def where(self) -> str:
        return f"Task {self.task_id!r}"

    @cached_property
    def store(self) -> Any:
        """The task's ``task_state_store``; None when the task keeps nothing."""
        return task_state_store(self.context, self.durable)

    @cached_property
    def trackers(self) -> TrackerSet:
        return self._trackers()

    @cached_property
    def app(self) -> AppDef:
        """The app of this execution: submitted, or waited on after a reattach."""
        return self._build_app()

    def replace_app(self, app: AppDef) -> None:
        """The app of a resubmitted attempt becomes the run's app (logs, results, usage)."""
        self.__dict__["app"] = app

    @property
    def ti(self) -> Any:
        return self.context["ti"]
