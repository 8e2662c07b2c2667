"""The four points where a policy joins a task's run, and what it may answer at each.

A policy (``torchx_airflow.policies``) subclasses ``RunPolicy`` and overrides the points it needs;
the lifecycle (``run.lifecycle``) calls every policy of the task, in order, at each point:

- ``before_submit(run, app)``: before each submission. Return a ``ShortCut`` (the task's result,
  nothing is submitted), raise to refuse (nothing is submitted), or return None to go on.
- ``submitted(run, app_handle)``: the task's job is ``app_handle`` (``run.submission`` says how:
  a new job, a resubmission, or a reattach to an earlier try's).
- ``ended(run, app_handle, state, msg)``: the job is terminal. Return a ``NextAttempt`` to submit
  another job in its place (the first policy that does wins), or None. ``run.earlier_try_end`` says
  the job is an earlier try's, found ended when this try started (that try may have heard of its
  end already, and a new job follows unless a policy resubmits it).
- ``finished(run, app_handle, result)``: the task's result is made; return it, added to.

A policy reads what it needs from ``run`` (``run.execution.TaskRun``) and its own settings; the
lifecycle never reads a policy's settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchx.specs import AppDef

    from torchx_airflow.run.execution import TaskRun


@dataclass(frozen=True)
class ShortCut:
    """A result for the task without submitting anything (a cache hit): the result, and the handle
    the task publishes as its ``app_handle`` XCom."""

    result: dict[str, Any]
    app_handle: str


@dataclass(frozen=True)
class NextAttempt:
    """Submit ``app`` in place of the job that ended: a resubmission within the same try."""

    app: AppDef
    number: int
    reason: str
    details: Mapping[str, Any] = field(default_factory=dict)


class RunPolicy:
    """Opt-in behaviour of a task's run, at four points (see the module's docstring). Every point
    does nothing by default."""

    #: The policy itself submits jobs again when the infrastructure ends them (so the scheduler must
    #: not requeue them on its own: ``TorchXHook.dryrun(resubmits=True)``).
    def resubmits(self, run: TaskRun) -> bool:
        return False

    def before_submit(self, run: TaskRun, app: AppDef) -> ShortCut | None:
        return None

    def submitted(self, run: TaskRun, app_handle: str) -> None:
        return None

    def ended(self, run: TaskRun, app_handle: str, state: str, msg: str) -> NextAttempt | None:
        return None

    def finished(self, run: TaskRun, app_handle: str, result: dict[str, Any]) -> dict[str, Any]:
        return result
