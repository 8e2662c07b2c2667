"""The contract between a task's run and its policies: six points, what a policy may answer at each,
and the order policies take.

A policy subclasses ``RunPolicy`` and overrides the points it needs; ``TorchXOperator(policies=[...])``
adds it to the task's built-in policies (caching, cost, resubmission: ``policies.builtin``). The
lifecycle (``run.lifecycle``) calls every policy of the task, in order, at each point, with every
argument but ``run`` by keyword; each point takes ``**kwargs``, so an argument added later breaks no
policy. In the order of a run:

- ``prepare(run, app=...)``: once per execution and process (again in the process that resumes a
  deferred task, which rebuilds the app), before anything else: return a changed ``AppDef`` (or
  change ``app`` in place and return None). The next policy gets the result; every cache key, cost
  estimate and approval is taken from the prepared app, and it is what is submitted.
- ``before_submit(run, app=...)``: before each submission. Return a ``ShortCut`` (the task's result:
  nothing is submitted, the policies after this one are not asked), raise to refuse (nothing is
  submitted), or return None to go on.
- ``submitted(run, app_handle=...)``: the task's job is ``app_handle`` (``run.submission`` says how:
  a new job, a resubmission, or a reattach to an earlier try's).
- ``ended(run, app_handle=..., state=..., msg=..., earlier_try=...)``: the job is terminal. Return a
  ``NextAttempt`` to submit another job in its place (the first policy that does wins), or None.
  ``earlier_try``: the job is an earlier try's, found ended when this try started.
- ``finished(run, app_handle=..., result=...)``: the task's result is made (its app SUCCEEDED, or the
  task does not wait); return it, added to.
- ``closed(run, result=..., error=...)``: exactly once per execution of the task, whatever ended it:
  its ``result`` (a cache hit's too, with ``cache_hit``), or the ``error`` that ends it (the app
  failed, a policy refused, the task was killed or timed out). Not called when the task only
  defers or waits for an approver (it is not over), and not for a task killed while it waits in the
  triggerer (no worker runs it then). An error a policy raises here is logged, never the task's.

What a policy may read and write of ``run`` is ``run.execution.TaskRun``'s documented surface. A
policy object serves every execution of its task in a process: what belongs to one run lives on
``run`` (or, across tries, in ``run.store``), not on the policy.

Order: the task's built-ins first, then ``policies`` as given, each moved after the policies its
``after`` names (``RunPolicy.name``); a name no policy of the task has, two policies with one name,
or a cycle is refused before anything runs (``check_policies``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from torchx_airflow.exceptions import TorchXConfigError

if TYPE_CHECKING:
    from torchx.specs import AppDef

    from torchx_airflow.run.execution import TaskRun

#: The points, in the order of a run: no other layer's method carries one of these names.
POINTS = ("prepare", "before_submit", "submitted", "ended", "finished", "closed")


@dataclass(frozen=True)
class ShortCut:
    """A result for the task without submitting anything (a cache hit): the result, and the handle
    the task publishes as its ``app_handle`` XCom."""

    result: dict[str, Any]
    app_handle: str


@dataclass(frozen=True)
class NextAttempt:
    """Submit ``app`` in place of the job that ended: a resubmission within the same try, recorded as
    attempt ``number`` of the chain (``run.attempts``) with ``details`` (``resumed_from``, say); the
    ended attempt's record gets ``reason``."""

    app: AppDef
    number: int
    reason: str
    details: Mapping[str, Any] = field(default_factory=dict)


class RunPolicy:
    """Opt-in behaviour of a task's run, at six points (see the module's docstring). Every point
    does nothing by default.

    Example: a team label in every role's env, and a line when the task's execution ends::

        class TeamLabel(RunPolicy):
            def __init__(self, team: str) -> None:
                self.team = team

            def prepare(self, run, *, app, **kwargs):
                for role in app.roles:
                    role.env["TEAM"] = run.render(self.team)  # "{{ params.team }}"
                return app

            def closed(self, run, *, result=None, error=None, **kwargs):
                run.log.info("team run ended: %s", "ok" if error is None else error)
    """

    #: The name ``after`` refers to (default: the class's name).
    name: ClassVar[str] = ""
    #: Names of policies whose points run before this one's (a built-in: ``cache``, ``cost``,
    #: ``resubmission``).
    after: ClassVar[tuple[str, ...]] = ()

    def prepare(self, run: TaskRun, *, app: AppDef, **kwargs: Any) -> AppDef | None:
        return None

    def before_submit(self, run: TaskRun, *, app: AppDef, **kwargs: Any) -> ShortCut | None:
        return None

    def submitted(self, run: TaskRun, *, app_handle: str, **kwargs: Any) -> None:
        return None

    def ended(
        self,
        run: TaskRun,
        *,
        app_handle: str,
        state: str,
        msg: str,
        earlier_try: bool = False,
        **kwargs: Any,
    ) -> NextAttempt | None:
        return None

    def finished(
        self, run: TaskRun, *, app_handle: str, result: dict[str, Any], **kwargs: Any
    ) -> dict[str, Any]:
        return result

    def closed(
        self,
        run: TaskRun,
        *,
        result: dict[str, Any] | None = None,
        error: BaseException | None = None,
        **kwargs: Any,
    ) -> None:
        return None


def policy_name(policy: object) -> str:
    """The name a policy is known by in ``after`` and in messages."""
    return getattr(policy, "name", "") or type(policy).__name__


def check_policies(policies: Sequence[Any], builtin: Sequence[str], where: str) -> tuple[RunPolicy, ...]:
    """``policies`` (a task's own, after the built-ins named ``builtin``) as a tuple, once each is a
    ``RunPolicy`` and their names and ``after`` hold: raises ``TorchXConfigError`` naming the fix."""
    if isinstance(policies, RunPolicy) or not isinstance(policies, Sequence):
        raise TorchXConfigError(f"{where}: policies must be a list of RunPolicy objects, got {policies!r}.")
    for policy in policies:
        if not isinstance(policy, RunPolicy):
            raise TorchXConfigError(
                f"{where}: policy {policy!r} is not a RunPolicy. Subclass "
                "torchx_airflow.run.points.RunPolicy and override the points it needs."
            )
    names = [*builtin, *(policy_name(p) for p in policies)]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TorchXConfigError(
            f"{where}: more than one policy is named {twice}. Give each policy class its own `name`."
        )
    for policy in policies:
        unknown = [n for n in policy.after if n not in names]
        if unknown:
            raise TorchXConfigError(
                f"{where}: policy {policy_name(policy)!r} runs after {unknown}, which the task does not "
                f"have. Its policies are {names}: fix the names in its `after`."
            )
    afters = [() for _ in builtin] + [p.after for p in policies]
    order_by_after(list(zip(names, afters, strict=True)), where)
    return tuple(policies)


def order_by_after(entries: Sequence[tuple[str, Sequence[str]]], where: str) -> list[int]:
    """The indexes of ``(name, after)`` entries in the order they run: as given, each moved after
    the entries its ``after`` names (a stable topological sort); ``TorchXConfigError`` for a cycle."""
    placed: list[int] = []
    done: set[str] = set()
    waiting = list(range(len(entries)))
    while waiting:
        ready = next((i for i in waiting if all(a in done for a in entries[i][1])), None)
        if ready is None:
            cycle = [entries[i][0] for i in waiting]
            raise TorchXConfigError(
                f"{where}: the `after` of policies {cycle} form a cycle: none can run first. Remove one."
            )
        placed.append(ready)
        done.add(entries[ready][0])
        waiting.remove(ready)
    return placed


def in_order(policies: Sequence[RunPolicy], where: str) -> tuple[RunPolicy, ...]:
    """``policies`` in the order they join every point (``order_by_after``)."""
    entries = [(policy_name(p), p.after) for p in policies]
    return tuple(policies[i] for i in order_by_after(entries, where))
