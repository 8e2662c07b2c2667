"""The cost policy: a run's estimate and ``max_cost`` before submitting, its usage and cost when it ends.

Every ``TorchXOperator`` has it (the usage is always recorded; the estimate and ``max_cost`` need
a price table on the connection). See ``policies.cost.usage`` for where the figures come from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchx_airflow.policies.cost.usage import RunAccounting, describe_usage, record_usage
from torchx_airflow.run.execution import REATTACHED
from torchx_airflow.run.points import RunPolicy

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

    def _accounting(self, run: TaskRun) -> RunAccounting:
        if self.accounting is None:
            self.accounting = RunAccounting(
                run.hook, run.task_id, self.max_cost, self.expected_duration, run.log, run.store
            )
        return self.accounting

    def before_submit(self, run: TaskRun, app: AppDef) -> None:
        """Raises ``TorchXCostLimitError`` over ``max_cost``: nothing is submitted."""
        self._accounting(run).before_submit(app, run.context)

    def submitted(self, run: TaskRun, app_handle: str) -> None:
        if run.submission != REATTACHED:
            self._accounting(run).submitted(app_handle, run.context)

    def ended(self, run: TaskRun, app_handle: str, state: str, msg: str) -> None:
        """The ended job's usage (and cost) into the result's fields, the task log and the trackers."""
        usage, cost = self._accounting(run).at_end(app_handle, run.app, state, True, run.context)
        run.result_fields["usage"] = usage
        run.result_fields.pop("cost", None)
        if cost is not None:
            run.result_fields["cost"] = cost
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
