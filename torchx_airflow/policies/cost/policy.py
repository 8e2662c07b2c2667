"""The cost policy: a run's estimate and ``max_cost`` before submitting, its usage and cost when it ends.

Every ``TorchXOperator`` has it (the usage is always recorded; the estimate and ``max_cost`` need
a price table on the connection). See ``policies.cost.usage`` for where the figures come from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXCostLimitError
from torchx_airflow.policies.cost.usage import RunAccounting, cost_total, describe_usage, record_usage
from torchx_airflow.run.execution import NEW, REATTACHED, RESUBMITTED
from torchx_airflow.run.points import RunPolicy

if TYPE_CHECKING:
    from torchx.specs import AppDef

    from torchx_airflow.run.execution import TaskRun


class CostPolicy(RunPolicy):
    """:param max_cost: refuse to submit when the estimate is over it (needs a price table).
    :param expected_duration: seconds the app is expected to run, for the estimate."""

    name = "cost"
    after = ("cache",)  # a cache hit submits nothing: no estimate to refuse or approve

    def __init__(self, max_cost: float | None, expected_duration: float | None) -> None:
        self.max_cost = max_cost
        self.expected_duration = expected_duration

    def _accounting(self, run: TaskRun) -> RunAccounting:
        """This execution's accounting (made once)."""
        memo = run.memo(self)
        if "accounting" not in memo:
            memo["accounting"] = RunAccounting(
                run.hook, run.task_id, self.max_cost, self.expected_duration, run.log, run.store
            )
        accounting: RunAccounting = memo["accounting"]
        return accounting

    def before_submit(self, run: TaskRun, *, app: AppDef, **kwargs: Any) -> None:
        """Raises ``TorchXCostLimitError`` over ``max_cost``, counting what the try's earlier
        attempts of a resubmitted job cost: nothing is submitted. With the connection's
        ``cost_approval_timeout``, a new submission over it asks an approver instead
        (``policies.cost.approval``)."""
        spent = 0.0
        if run.submission == RESUBMITTED:
            self._read_unseen_ends(run)
            spent = (
                sum(cost_total(a.get("cost")) or 0.0 for a in run.attempts.load()) if self.max_cost else 0.0
            )
        try:
            self._accounting(run).check_estimate(app, run.context, spent)
        except TorchXCostLimitError as over:
            # opt-in: an approver may let the first submission go over (a resubmission never asks:
            # the task is mid-run by then)
            timeout_s = run.hook.settings.cost_approval_timeout
            if timeout_s is None or run.submission != NEW:
                raise
            from torchx_airflow.policies.cost.approval import approve_or_raise

            approve_or_raise(run, over, timeout_s, app)

    def _read_unseen_ends(self, run: TaskRun) -> None:
        """The usage of each ended attempt of the job that this try did not see end (an earlier
        try's, found ended and now resubmitted: ``ended`` left it unread), read once and kept on it:
        the bound on the try counts every attempt's cost, each actual one or else its estimate."""
        for attempt in run.attempts.load():
            handle, state = attempt.get("app_handle"), attempt.get("state")
            if "usage" not in attempt and isinstance(handle, str) and isinstance(state, str):
                usage, cost = self._read_end(run, handle, state)
                run.attempts.annotate(handle, usage=usage, cost=cost)

    def submitted(self, run: TaskRun, *, app_handle: str, **kwargs: Any) -> None:
        if run.submission != REATTACHED:
            self._accounting(run).note_submission(app_handle, run.context)

    def ended(
        self,
        run: TaskRun,
        *,
        app_handle: str,
        state: str,
        msg: str,
        earlier_try: bool = False,
        **kwargs: Any,
    ) -> None:
        """The ended job's usage (and cost) into the result's fields, the task log and the trackers.

        An earlier try's job found ended is read now only when it SUCCEEDED (its result is the task's);
        one that failed is read only if it is resubmitted (``before_submit``): the try that ran it
        recorded its usage when it saw it end, and a fresh job replaces it otherwise.
        """
        if not earlier_try or state == "SUCCEEDED":
            self._record_end(run, app_handle, state)

    def _record_end(self, run: TaskRun, app_handle: str, state: str) -> None:
        usage, cost = self._read_end(run, app_handle, state)
        run.result_fields["usage"] = usage
        run.result_fields.pop("cost", None)
        if cost is not None:
            run.result_fields["cost"] = cost

    def _read_end(self, run: TaskRun, app_handle: str, state: str) -> tuple[dict[str, Any], Any]:
        """The ended job's usage and cost, in the task log and the trackers."""
        usage, cost = self._accounting(run).at_end(app_handle, run.app, state, True, run.context)
        run.log.info("TorchX app %s used %s", app_handle, describe_usage(usage, cost))
        if run.trackers:
            from torchx_airflow.retry import call_within

            call_within(
                run.tracker_timeout,
                f"Recording the usage of {app_handle}",
                lambda: record_usage(run.trackers, app_handle, usage, cost),
            )
        return usage, cost

    def finished(
        self, run: TaskRun, *, app_handle: str, result: dict[str, Any], **kwargs: Any
    ) -> dict[str, Any]:
        if "usage" not in result:  # a task that does not wait: read when the app ends
            state = str(result.get("state"))
            usage, _ = self._accounting(run).at_end(app_handle, run.app, state, False, run.context)
            result["usage"] = usage
        return result
