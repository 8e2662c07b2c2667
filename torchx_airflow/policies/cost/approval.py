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

The approval is bound to what was estimated: the request names the estimate and the app's
fingerprint (``app_fingerprint``: a SHA-256 of the app and its scheduler, secret values masked), and
the parked task keeps the same figures with Airflow (its ``next_kwargs``, which only the task writes).
When the task resumes, it estimates and fingerprints its app again; if either differs from what the
approver saw (a template rendered otherwise, a changed price table, a new last run the estimate counts
from), nothing is submitted and the task fails with ``TorchXCostApprovalError`` naming both: within
one try Airflow keeps the first request's text, so a second question would show the old figures.
Clearing the task asks again with the new ones.

A new try of the task (a retry, a clear) asks again: a request belongs to one try.

**Who may approve.** The connection's extra ``cost_approvers`` names them (Airflow user ids): the
request is assigned to them, and Airflow's API refuses an answer from anyone else. The user who
triggered the DAG run (its *requester*) is never among them and cannot approve their own run,
unless the connection's extra ``cost_self_approval`` is true: an approval by the requester fails the
task without submitting, and a request whose only named approver is the requester is not asked
(``TorchXCostApprovalError`` naming both settings). A run nobody triggered (a schedule) has no
requester.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from torchx_airflow.apps import json_safe
from torchx_airflow.exceptions import TorchXCostApprovalError

if TYPE_CHECKING:
    from torchx.specs import AppDef

    from torchx_airflow.exceptions import TorchXCostLimitError
    from torchx_airflow.run.execution import TaskRun

APPROVE, REJECT = "Approve", "Reject"
RESULT_KEY = "cost_approval"  # the task result's field
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
#: the argument the parked task resumes with: what it asked to approve (``asked``)
ASKED_KEY = "cost_approval_asked"


def app_fingerprint(
    app: AppDef, scheduler: str, cfg: Mapping[str, Any] | None = None, conn_id: str | None = None
) -> str:
    """``sha256:<hex>`` of ``app`` as submitted: to ``scheduler`` with run options ``cfg`` through
    connection ``conn_id`` (another partition, time limit or cluster is another submission), every
    field of every role, with the values of sensitive env variables and every registered secret
    masked (an approver sees the fingerprint, and a digest of a short secret could be searched)."""
    from airflow.sdk.log import redact

    from torchx_airflow.secrets import mask_sensitive_env

    for role in app.roles:
        mask_sensitive_env(role.env)
    submitted = {"scheduler": scheduler, "cfg": dict(cfg or {}), "conn_id": conn_id}
    doc = redact(json_safe({**submitted, "app": dataclasses.asdict(app)}))
    # an object in metadata without a repr of its own is "<X object at 0x...>": not the app's content;
    # redacting the text as well masks secrets nested deeper than redact() walks a structure
    text = str(redact(_ADDRESS.sub("", json.dumps(doc, sort_keys=True, separators=(",", ":")))))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def asked(over: TorchXCostLimitError, fingerprint: str) -> dict[str, Any]:
    """What a request asks to approve: the estimate, its bound and the app's fingerprint."""
    return {**_figures(over), "app_fingerprint": fingerprint}


def _changed(approved: Any, now: dict[str, Any]) -> str | None:
    """How what the task would submit now differs from what was approved; None if it does not."""
    if not isinstance(approved, dict):
        return "the answer does not say which estimate and app it approved"
    for key in sorted(k for k in now if k.endswith("_fingerprint")):  # an app's, or a sweep rung's
        if approved.get(key) != now[key]:
            what = key.removesuffix("_fingerprint")
            return f"the {what} changed since (approved {approved.get(key)}, now {now[key]})"
    figures = [(k, approved.get(k), now[k]) for k in ("estimate", "max_cost", "currency")]
    differ = [f"{k} {was!r} -> {is_!r}" for k, was, is_ in figures if was != is_]
    return f"the estimate changed since ({', '.join(differ)})" if differ else None


def approve_or_raise(
    run: TaskRun, over: TorchXCostLimitError, timeout_s: float, app: AppDef
) -> dict[str, Any]:
    """The approval of ``app``, which ``over`` refused (recorded in the result), once an approver gave
    it for this estimate and this app. Not asked yet: asks, and the task waits (``TaskAwaitingInput``);
    rejected, unanswered at the timeout, or approved for another estimate or app: raises
    ``TorchXCostApprovalError``. Nothing has been submitted."""
    hook = run.hook
    cfg = hook.resolve_cfg(hook.scheduler, hook.cfg)
    now = asked(over, app_fingerprint(app, hook.scheduler, cfg, hook.torchx_conn_id))
    subject = (
        f"Approve task {run.task_id!r}: estimated {over.estimate:.4f} {over.currency}, "
        f"over max_cost {over.max_cost:g} {over.currency}?"
    )
    body = (
        f"**Estimate**: {over.explanation}\n\n**App fingerprint**: `{now['app_fingerprint']}`\n\n"
        f"{APPROVE} submits this app at this estimate (if either has changed when the task resumes, "
        f"nothing is submitted). {REJECT}, or no answer within {timeout_s:g} s, fails the task without "
        "submitting anything."
    )
    question = Question(run.task_id, run.context["ti"].id, subject, body, now, timeout_s)
    approval = answer_or_ask(
        question,
        over,
        run.resumed_with,
        requester_of(run.context),
        hook.settings,
        hook.torchx_conn_id,
        run.log,
    )
    run.log.warning(
        "%s approved the estimated cost over max_cost at %s: submitting",
        approval["approved_by"]["name"],
        approval["responded_at"],
    )
    run.result_fields[RESULT_KEY] = approval
    return approval


@dataclasses.dataclass(frozen=True)
class Question:
    """What task ``task_id`` (its try ``ti_id``) asks approvers: ``subject`` and ``body`` (markdown),
    about ``now`` (the figures and the fingerprint an answer is bound to), for ``timeout_s``."""

    task_id: str
    ti_id: Any
    subject: str
    body: str
    now: dict[str, Any]
    timeout_s: float


def answer_or_ask(
    question: Question,
    over: TorchXCostLimitError,
    resumed_with: Mapping[str, Any] | None,
    requester: str | None,
    settings: Any,
    conn_id: str,
    log: Any,
) -> dict[str, Any]:
    """The approval of what ``question`` asks (who, when, who requested it, and its figures), from
    the answer the task resumed with (``resumed_with``). Not asked yet: asks, and the task waits
    (``TaskAwaitingInput``). Rejected, unanswered at the timeout, approved by the requester (without
    ``cost_self_approval``) or approved for other figures than ``question.now``: raises
    ``TorchXCostApprovalError``. ``settings``: the connection's (``cost_approvers``,
    ``cost_self_approval``)."""
    resumed = resumed_with or {}
    answer = resumed.get("event")
    if not isinstance(answer, dict) or not ("chosen_options" in answer or "error_type" in answer):
        _ask(question, approvers_for(settings, conn_id, over, requester), log)
    chosen = list(answer.get("chosen_options") or [])
    user = answer.get("responded_by_user")  # {"id", "name"}; None: Airflow's scheduler at the timeout
    responded_at = answer.get("responded_at")
    at = responded_at.isoformat() if isinstance(responded_at, datetime) else responded_at
    now = question.now
    if chosen == [APPROVE] and user and (changed := _changed(resumed.get(ASKED_KEY), now)):
        raise TorchXCostApprovalError(
            over, f"{user['name']} (id {user['id']}) approved it at {at}, but {changed}"
        )
    if chosen == [APPROVE] and user and _is_requester(user, requester) and not settings.cost_self_approval:
        raise TorchXCostApprovalError(
            over,
            f"{user['name']} (id {user['id']}) approved it at {at}, but they triggered this DAG run, and the "
            f"requester may not approve their own run (connection {conn_id!r}: name other "
            "approvers in extra 'cost_approvers', or set extra 'cost_self_approval' to true)",
        )
    if chosen == [APPROVE] and user:
        approval = {
            "approved_by": {"id": user["id"], "name": user["name"]},
            "responded_at": at,
            "requested_by": requester,
        }
        return {**approval, **now}
    if not user:  # the request's default at its timeout (or the timeout without an answer)
        raise TorchXCostApprovalError(
            over, f"no approver answered within {question.timeout_s:g} s (then it is rejected)"
        )
    raise TorchXCostApprovalError(over, f"{user['name']} (id {user['id']}) rejected it at {at}")


def requester_of(context: Any) -> str | None:
    """The user who triggered the task's DAG run (None: a schedule, or Airflow does not say)."""
    dag_run = context.get("dag_run")
    name = getattr(dag_run, "triggering_user_name", None)
    return str(name) if name else None


def _is_requester(user: Mapping[str, Any], requester: str | None) -> bool:
    return requester is not None and requester in (str(user.get("id")), str(user.get("name")))


def approvers_for(
    settings: Any, conn_id: str, over: TorchXCostLimitError, requester: str | None
) -> list[dict[str, str]]:
    """The users a request is assigned to: the connection's ``cost_approvers`` but the requester
    (unless ``cost_self_approval``); [] for anyone who may act on the task. Raises when the
    requester is the only one named: nobody else could answer."""
    named = [dict(a) for a in settings.cost_approvers]
    if settings.cost_self_approval:
        return named
    others = [a for a in named if not _is_requester(a, requester)]
    if named and not others:
        raise TorchXCostApprovalError(
            over,
            f"the only approver the connection {conn_id!r} names ({requester!r}) triggered "
            "this DAG run, and the requester may not approve their own run. Name other approvers in "
            "extra 'cost_approvers', or set extra 'cost_self_approval' to true",
        )
    return others


def _figures(over: TorchXCostLimitError) -> dict[str, Any]:
    return {"estimate": over.estimate, "max_cost": over.max_cost, "currency": over.currency}


def _ask(question: Question, approvers: list[dict[str, str]], log: Any) -> NoReturn:
    """Write the request and park the task awaiting the answer, keeping what it asks (never returns)."""
    from airflow.sdk.exceptions import TaskAwaitingInput
    from airflow.sdk.execution_time.hitl import upsert_hitl_detail

    body = question.body
    if approvers:
        body += "\n\n**Approvers**: " + ", ".join(a["name"] for a in approvers)
    upsert_hitl_detail(
        ti_id=question.ti_id,
        options=[APPROVE, REJECT],
        subject=question.subject,
        body=body,
        defaults=[REJECT],
        params={},
        assigned_users=approvers or None,  # type: ignore[arg-type]  # HITLUser is a TypedDict of these
    )
    log.warning(
        "Estimated cost over max_cost: waiting up to %g s for an approver (Required Actions page)",
        question.timeout_s,
    )
    # the answer resumes the operator's execute with it as ``event`` and what was asked as
    # ``ASKED_KEY``: the task runs again from the start and comes back here
    raise TaskAwaitingInput(
        method_name="execute",
        kwargs={ASKED_KEY: question.now},
        timeout=timedelta(seconds=question.timeout_s),
    )
