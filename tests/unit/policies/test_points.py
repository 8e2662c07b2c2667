"""A policy joins a task's run at four points, with no edit to the operator or the lifecycle: one
defined only here refuses, short-cuts and resubmits through the real TorchXOperator (its scheduler a
named fake, tests/fakes.py). And the task's own settings reach the task's own policies."""

from __future__ import annotations

from typing import Any

import pytest
from torchx.specs import AppState, AppStatus

from tests.fakes import HANDLE, FakeSchedulerHook, TaskStateStore, _context, _operator
from torchx_airflow.exceptions import TorchXAppFailedError, TorchXConfigError
from torchx_airflow.run.points import NextAttempt, RunPolicy, ShortCut
from torchx_airflow.settings.connection import TorchXConnectionSettings

SECOND = "slurm://torchx/4243"
CACHED = "slurm://torchx/1"


class Gatekeeper(RunPolicy):
    """Defined only in this test: ``mode`` says what it does at its points; it notes every call."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.seen: list[tuple[Any, ...]] = []

    def before_submit(self, run: Any, app: Any) -> ShortCut | None:
        self.seen.append(("before_submit", run.submission))
        if self.mode == "refuse":
            raise TorchXConfigError("the gatekeeper refuses: nothing may be submitted today")
        if self.mode == "short-cut":
            return ShortCut({"app_handle": CACHED, "state": "SUCCEEDED", "by": "gatekeeper"}, CACHED)
        return None

    def submitted(self, run: Any, app_handle: str) -> None:
        self.seen.append(("submitted", app_handle, run.submission))

    def ended(self, run: Any, app_handle: str, state: str, msg: str) -> NextAttempt | None:
        self.seen.append(("ended", app_handle, state))
        if self.mode == "resubmit" and app_handle == HANDLE:
            return NextAttempt(run.app, 2, "the gatekeeper wants another go")
        return None

    def finished(self, run: Any, app_handle: str, result: dict[str, Any]) -> dict[str, Any]:
        self.seen.append(("finished", app_handle))
        return {**result, "gatekeeper": self.mode}


def _run(mode: str, answers: list[Any]) -> tuple[Gatekeeper, FakeSchedulerHook, Any]:
    hook = FakeSchedulerHook(answers)
    hook.handles = (HANDLE, SECOND)
    gatekeeper = Gatekeeper(mode)
    op = _operator(hook, policies=[gatekeeper], infrastructure_retries=0)
    context = _context(TaskStateStore())
    try:
        outcome: Any = op.execute(context)
    except Exception as e:
        outcome = e
    return gatekeeper, hook, (outcome, context)


def test_a_policy_that_refuses_leaves_nothing_submitted():
    gatekeeper, hook, (outcome, _) = _run("refuse", [AppState.SUCCEEDED])
    assert isinstance(outcome, TorchXConfigError) and "gatekeeper refuses" in str(outcome)
    assert getattr(hook, "tokens", []) == [] and gatekeeper.seen == [("before_submit", "new")]


def test_a_policy_that_short_cuts_returns_its_result_and_submits_nothing():
    gatekeeper, hook, (outcome, context) = _run("short-cut", [AppState.SUCCEEDED])
    assert outcome == {"app_handle": CACHED, "state": "SUCCEEDED", "by": "gatekeeper"}
    assert getattr(hook, "tokens", []) == [] and getattr(hook, "apps", []) == []
    assert context["ti"].pushed["app_handle"] == CACHED
    assert context["task_state_store"].values.get("torchx_app_handle") is None


def test_a_policy_that_resubmits_gets_a_new_job_in_the_same_try():
    failed = AppStatus(AppState.FAILED, msg="exit 1")
    gatekeeper, hook, (outcome, context) = _run("resubmit", [failed, AppState.SUCCEEDED])
    assert outcome["app_handle"] == SECOND and outcome["state"] == "SUCCEEDED"
    assert outcome["gatekeeper"] == "resubmit"
    assert len(hook.tokens) == 2 and context["task_state_store"].values["torchx_app_handle"] == SECOND
    assert gatekeeper.seen == [
        ("before_submit", "new"),
        ("submitted", HANDLE, "new"),
        ("ended", HANDLE, "FAILED"),
        ("before_submit", "resubmitted"),
        ("submitted", SECOND, "resubmitted"),
        ("ended", SECOND, "SUCCEEDED"),
        ("finished", SECOND),
    ]


NODE_FAIL = AppStatus(AppState.FAILED, msg="CANCELLED by 0, NODE_FAIL (exit code 0:0)")


@pytest.mark.parametrize(
    ("task", "connection", "submissions"),
    [(0, 3, 1), (None, 0, 1), (None, 1, 2), (1, 0, 2)],
    ids=["task-0-wins", "connection-0", "connection-1", "task-1-wins"],
)
def test_the_tasks_own_infrastructure_retries_decide_then_the_connections(task, connection, submissions):
    """The budget is the task's own parameter, else its connection's: nothing injected."""
    hook = FakeSchedulerHook([NODE_FAIL, AppState.SUCCEEDED])
    hook.handles = (HANDLE, SECOND)
    hook.settings = TorchXConnectionSettings(scheduler="slurm", infrastructure_retries=connection)
    op = _operator(hook, infrastructure_retries=task)
    context = _context(TaskStateStore())
    if submissions == 1:
        with pytest.raises(TorchXAppFailedError, match="NODE_FAIL"):
            op.execute(context)
    else:
        assert op.execute(context)["app_handle"] == SECOND
    assert len(hook.tokens) == submissions
