"""The cost policy: a run's estimate and ``max_cost`` before submitting, its usage and cost when it ends.

Every ``TorchXOperator`` has it (the usage is always recorded; the estimate and ``max_cost`` need
a price table on the connection). See ``policies.cost.usage`` for where the figures come from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXCostLimitError
from torchx_airflow.policies.cost.usage import RunAccounting, describe_usage, record_usage
from torchx_airflow.run.execution import NEW, REATTACHED, RESUBMITTED
from torchx_airflow.run.points import RunPolicy
from torchx_airflow.run.state import ATTEMPTS_KEY

if TYPE_CHECKING:
    from torchx.specs import AppDef

    from torchx_airflow.run.execution import TaskRun


class CostPolicy(RunPolicy):
    """:param max_cost: refuse to submit when the estimate is over it (needs a price table).
    :param expected_duration: seconds the app is expected to run, for the estimate."""

    def __init__(self, max_cost: float | None, expected_duration: float | None) -> None:
        self.max_cost = max_cost
        self.expected_duration = expected_duration
        self.accounting: RunAccounting | None = None
        self._ended_costs: dict[str, Any] = {}  # this execution's ended jobs' costs, by handle
        # an earlier try's job found ended, its usage not read (only a resubmission of it needs it)
        self._unread_end: tuple[str, str] | None = None

    def _accounting(self, run: TaskRun) -> RunAccounting:
        if self.accounting is None:
            self.accounting = RunAccounting(
                run.hook, run.task_id, self.max_cost, self.expected_duration, run.log, run.store
            )
        return self.accounting

    def before_submit(self, run: TaskRun, app: AppDef) -> None:
        """Raises ``TorchXCostLimitError`` over ``max_cost``, counting what the try's earlier
        attempts of a resubmitted job cost: nothing is submitted. With the connection's
        ``cost_approval_timeout``, a new submission over it asks an approver instead
        (``policies.cost.approval``)."""
        if run.submission == RESUBMITTED and self._unread_end is not None:
            # the earlier try's job is resubmitted: its usage is this chain's, and its cost counts
            self._record_end(run, *self._unread_end)
        self._unread_end = None
        spent = self.spent(run) if run.submission == RESUBMITTED and self.max_cost is not None else 0.0
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

    def spent(self, run: TaskRun) -> float:
        """What the ended attempts of this try's job cost: each attempt's actual cost, or its
        estimate where no actual one is known (the bound must hold, so the larger guess counts).
        From the attempts in ``task_state_store`` (they outlive a deferral), and this execution's
        (an attempt the store holds without its cost: an earlier try's, read here)."""
        costs: dict[str, Any] = dict(self._ended_costs)
        if run.store is not None:
            try:
                attempts = run.store.get(ATTEMPTS_KEY)
            except Exception as e:  # unreadable: what this execution saw still counts
                run.log.warning("Could not read the attempts' costs: %s: %s", type(e).__name__, e)
                attempts = None
            for i, attempt in enumerate(attempts if isinstance(attempts, list) else ()):
                if isinstance(attempt, dict) and attempt.get("cost") is not None:
                    costs[str(attempt.get("app_handle") or f"attempt #{i}")] = attempt["cost"]
        return sum(_cost_total(cost) for cost in costs.values())

    def submitted(self, run: TaskRun, app_handle: str) -> None:
        if run.submission != REATTACHED:
            self._accounting(run).note_submission(app_handle, run.context)

    def ended(self, run: TaskRun, app_handle: str, state: str, msg: str) -> None:
        """The ended job's usage (and cost) into the result's fields, the task log and the trackers.

        An earlier try's job found ended is read only if it is resubmitted (``before_submit``): the
        try that ran it recorded its usage when it saw it end, and a fresh job replaces it otherwise.
        """
        if run.earlier_try_end:
            self._unread_end = (app_handle, state)
            return
        self._record_end(run, app_handle, state)

    def _record_end(self, run: TaskRun, app_handle: str, state: str) -> None:
        usage, cost = self._accounting(run).at_end(app_handle, run.app, state, True, run.context)
        run.result_fields["usage"] = usage
        run.result_fields.pop("cost", None)
        if cost is not None:
            run.result_fields["cost"] = cost
            self._ended_costs[app_handle] = cost
        run.log.info("TorchX app %s used %s", app_handle, describe_usage(usage, cost))
        if run.trackers:
            from torchx_airflow.retry import call_within

            call_within(
                run.tracker_timeout,
                f"Recording the usage of {app_handle}",
                lambda: record_usage(run.trackers, app_handle, usage, cost),
            )

    def finished(self, run: TaskRun, app_handle: str, result: dict[str, Any]) -> dict[str, Any]:
        if "usage" not in result:  # a task that does not wait: read when the app ends
            state = str(result.get("state"))
            usage, _ = self._accounting(run).at_end(app_handle, run.app, state, False, run.context)
            result["usage"] = usage
        return result


def _cost_total(cost: Any) -> float:
    """The total of an attempt's ``cost`` field: the actual one, else the estimate's; 0 without."""
    if not isinstance(cost, dict):
        return 0.0
    for figure in (cost.get("actual"), cost.get("estimate")):
        total = figure.get("total") if isinstance(figure, dict) else None
        if isinstance(total, int | float) and not isinstance(total, bool):
            return float(total)
    return 0.0
