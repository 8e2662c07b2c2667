"""An approver's answer, through Airflow's human-in-the-loop, for a run whose estimate is over ``max_cost``.

Opt-in per connection: the ``torchx`` connection's extra ``cost_approval_timeout`` (seconds). Unset,
a task whose estimate is over its ``max_cost`` fails before submitting (``TorchXCostLimitError``).
Set, the task asks instead, as Airflow's ``HITLOperator`` does: it writes a human-in-the-loop request
(subject, the estimate as its body, options ``Approve`` / ``Reject``, default ``Reject``) and waits in
the ``awaiting_input`` state, holding no worker slot, for an answer on Airflow's *Required Actions*
page or its REST API (``PATCH .../taskInstances/{task_id}/{map_index}/hitlDetails``). Then the task
runs again from the start (nothing was submitted) with the answer, and:

- ``Approve``: the app is submitted; the task's result has ``cost_approval`` (who, when, the estimate);
- ``Reject``: the task fails with ``TorchXCostApprovalError`` (the estimate, who rejected it);
- no answer within the timeout: Airflow's scheduler answers with the request's default, ``Reject``:
  the task fails the same way, saying that no one answered. Nothing is ever submitted unapproved.

A new try of the task (a retry, a clear) asks again: a request belongs to one try.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from torchx_airflow.exceptions import TorchXCostApprovalError

if TYPE_CHECKING:
    from torchx_airflow.exceptions import TorchXCostLimitError
    from torchx_airflow.run.execution import TaskRun

APPROVE, REJECT = "Approve", "Reject"
RESULT_KEY = "cost_approval"  # the task result's field


def approve_or_raise(run: TaskRun, over: TorchXCostLimitError, timeout_s: float) -> dict[str, Any]:
    """The approval of the run ``over`` refused (recorded in the result), once an approver gave it.
    Not asked yet: asks, and the task waits (``TaskAwaitingInput``); rejected or unanswered at the
    timeout: raises ``TorchXCostApprovalError``. Nothing has been submitted."""
    answer = run.resumed_with
    if not isinstance(answer, dict) or not ("chosen_options" in answer or "error_type" in answer):
        _ask(run, run.context["ti"].id, over, timeout_s)
    chosen = list(answer.get("chosen_options") or [])
    user = answer.get("responded_by_user")  # {"id", "name"}; None: Airflow's scheduler at the timeout
    responded_at = answer.get("responded_at")
    at = responded_at.isoformat() if isinstance(responded_at, datetime) else responded_at
    if chosen == [APPROVE] and user:
        run.log.warning("%s approved the estimated cost over max_cost at %s: submitting", user["name"], at)
        approval = {"approved_by": {"id": user["id"], "name": user["name"]}, "responded_at": at}
        run.result_fields[RESULT_KEY] = {**approval, **_figures(over)}
        return run.result_fields[RESULT_KEY]
    if not user:  # the request's default at its timeout (or the timeout without an answer)
        raise TorchXCostApprovalError(
            over, f"no approver answered within {timeout_s:g} s (then it is rejected)"
        )
    raise TorchXCostApprovalError(over, f"{user['name']} (id {user['id']}) rejected it at {at}")


def _figures(over: TorchXCostLimitError) -> dict[str, Any]:
    return {"estimate": over.estimate, "max_cost": over.max_cost, "currency": over.currency}


def _ask(run: TaskRun, ti_id: Any, over: TorchXCostLimitError, timeout_s: float) -> NoReturn:
    """Write the request and park the task awaiting the answer (never returns)."""
    from airflow.sdk.exceptions import TaskAwaitingInput
    from airflow.sdk.execution_time.hitl import upsert_hitl_detail

    subject = (
        f"Approve task {run.task_id!r}: estimated {over.estimate:.4f} {over.currency}, "
        f"over max_cost {over.max_cost:g} {over.currency}?"
    )
    body = (
        f"**Estimate**: {over.explanation}\n\n{APPROVE} submits the app. {REJECT}, or no answer within "
        f"{timeout_s:g} s, fails the task without submitting anything."
    )
    upsert_hitl_detail(
        ti_id=ti_id, options=[APPROVE, REJECT], subject=subject, body=body, defaults=[REJECT], params={}
    )
    run.log.warning(
        "Estimated cost over max_cost: waiting up to %g s for an approver (Required Actions page)", timeout_s
    )
    # the answer resumes the operator's execute with it as ``event`` (``run.resumed_with``): the task
    # runs again from the start and comes back here
    raise TaskAwaitingInput(method_name="execute", timeout=timedelta(seconds=timeout_s))
