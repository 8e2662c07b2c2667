"""The policy contract (torchx_airflow.run.points) through the real TorchXOperator and lifecycle: a
policy defined only here prepares the app, refuses, short-cuts and resubmits with no edit to either;
``closed`` is heard exactly once per execution whatever ends it; points are called by keyword; the
order policies take is declared and checked. The scheduler is the named fake of tests/fakes.py."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowTaskTimeout, TaskDeferred
from torchx.specs import AppState, AppStatus

import torchx_airflow
from tests.fakes import HANDLE, TI, FakeSchedulerHook, TaskStateStore, _context, _operator, _terminal
from torchx_airflow.exceptions import (
    TorchXAppFailedError,
    TorchXConfigError,
    TorchXTaskKilledError,
    TorchXWaitInterruptedError,
)
from torchx_airflow.run import kills
from torchx_airflow.run.points import POINTS, NextAttempt, RunPolicy, ShortCut
from torchx_airflow.settings.connection import TorchXConnectionSettings

SECOND = "slurm://torchx/4243"
CACHED = "slurm://torchx/1"


class Gatekeeper(RunPolicy):
    """Defined only in this test: ``mode`` says what it does at its points; it notes every call."""

    def __init__(self, mode: str = "") -> None:
        self.mode = mode
        self.seen: list[tuple[Any, ...]] = []

    def prepare(self, run: Any, *, app: Any, **kwargs: Any) -> Any:
        self.seen.append(("prepare",))
        for role in app.roles:
            role.env["GATE"] = "open"
        return app

    def before_submit(self, run: Any, *, app: Any, **kwargs: Any) -> ShortCut | None:
        self.seen.append(("before_submit", run.submission, app.roles[0].env.get("GATE")))
        if self.mode == "refuse":
            raise TorchXConfigError("the gatekeeper refuses: nothing may be submitted today")
        if self.mode == "short-cut":
            return ShortCut({"app_handle": CACHED, "state": "SUCCEEDED", "by": "gatekeeper"}, CACHED)
        return None

    def submitted(self, run: Any, *, app_handle: str, **kwargs: Any) -> None:
        self.seen.append(("submitted", app_handle, run.submission))

    def ended(self, run: Any, *, app_handle: str, state: str, msg: str, **kwargs: Any) -> NextAttempt | None:
        self.seen.append(("ended", app_handle, state))
        if self.mode == "resubmit" and app_handle == HANDLE:
            return NextAttempt(run.app, 2, "the gatekeeper wants another go")
        return None

    def finished(self, run: Any, *, app_handle: str, result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self.seen.append(("finished", app_handle))
        return {**result, "gatekeeper": self.mode}

    def closed(self, run: Any, *, result: Any = None, error: Any = None, **kwargs: Any) -> None:
        self.seen.append(
            ("closed", (result or {}).get("app_handle"), type(error).__name__ if error else None)
        )


def _run(mode: str, answers: list[Any], **kwargs: Any) -> tuple[Gatekeeper, FakeSchedulerHook, Any]:
    hook = FakeSchedulerHook(answers)
    hook.handles = (HANDLE, SECOND)
    gatekeeper = Gatekeeper(mode)
    op = _operator(hook, policies=[gatekeeper], infrastructure_retries=0, **kwargs)
    context = _context(TaskStateStore())
    try:
        outcome: Any = op.execute(context)
    except BaseException as e:
        outcome = e
    return gatekeeper, hook, (outcome, context)


def _closed(gatekeeper: Gatekeeper) -> list[tuple[Any, ...]]:
    return [seen for seen in gatekeeper.seen if seen[0] == "closed"]


def test_a_policy_that_refuses_leaves_nothing_submitted_and_is_closed_with_its_refusal():
    gatekeeper, hook, (outcome, _) = _run("refuse", [AppState.SUCCEEDED])
    assert isinstance(outcome, TorchXConfigError) and "gatekeeper refuses" in str(outcome)
    assert getattr(hook, "tokens", []) == []
    assert gatekeeper.seen == [
        ("prepare",),
        ("before_submit", "new", "open"),
        ("closed", None, "TorchXConfigError"),
    ]


def test_a_policy_that_short_cuts_returns_its_result_submits_nothing_and_is_closed_with_it():
    gatekeeper, hook, (outcome, context) = _run("short-cut", [AppState.SUCCEEDED])
    assert outcome == {"app_handle": CACHED, "state": "SUCCEEDED", "by": "gatekeeper"}
    assert getattr(hook, "tokens", []) == [] and getattr(hook, "apps", []) == []
    assert context["ti"].pushed["app_handle"] == CACHED
    assert context["task_state_store"].values.get("torchx_app_handle") is None
    assert _closed(gatekeeper) == [("closed", CACHED, None)]


def test_a_policy_that_resubmits_gets_a_new_job_in_the_same_try_every_point_in_order():
    failed = AppStatus(AppState.FAILED, msg="exit 1")
    gatekeeper, hook, (outcome, context) = _run("resubmit", [failed, AppState.SUCCEEDED])
    assert outcome["app_handle"] == SECOND and outcome["state"] == "SUCCEEDED"
    assert outcome["gatekeeper"] == "resubmit"
    assert len(hook.tokens) == 2 and context["task_state_store"].values["torchx_app_handle"] == SECOND
    assert gatekeeper.seen == [
        ("prepare",),
        ("before_submit", "new", "open"),
        ("submitted", HANDLE, "new"),
        ("ended", HANDLE, "FAILED"),
        ("before_submit", "resubmitted", "open"),
        ("submitted", SECOND, "resubmitted"),
        ("ended", SECOND, "SUCCEEDED"),
        ("finished", SECOND),
        ("closed", SECOND, None),
    ]
    assert [a["reason"] for a in outcome["attempts"][:1]] == ["the gatekeeper wants another go"]


def test_the_prepared_app_is_what_is_submitted_and_a_prepare_that_returns_no_app_is_refused():
    gatekeeper, hook, (outcome, _) = _run("", [AppState.SUCCEEDED])
    assert hook.apps[0].roles[0].env["GATE"] == "open" and outcome["state"] == "SUCCEEDED"

    class Broken(RunPolicy):
        def prepare(self, run: Any, **kwargs: Any) -> Any:
            return {"roles": []}

    hook = FakeSchedulerHook([AppState.SUCCEEDED])
    with pytest.raises(TorchXConfigError, match=r"policy 'Broken' returned \{'roles': \[\]\} from prepare"):
        _operator(hook, policies=[Broken()]).execute(_context(TaskStateStore()))
    assert getattr(hook, "tokens", []) == []


def test_a_failed_app_is_closed_once_with_its_error_and_finished_is_not_called():
    gatekeeper, _, (outcome, _) = _run("", [AppStatus(AppState.FAILED, msg="exit 1")])
    assert isinstance(outcome, TorchXAppFailedError)
    assert _closed(gatekeeper) == [("closed", None, "TorchXAppFailedError")]
    assert not [seen for seen in gatekeeper.seen if seen[0] == "finished"]


def test_a_timeout_cancels_the_job_then_closes_once_with_the_timeout(monkeypatch):
    monkeypatch.setattr(kills, "read_task_state", lambda key: pytest.fail("asked the state"))
    hook = FakeSchedulerHook([AppState.RUNNING])
    asked = hook.status

    def status(handle: str) -> Any:
        if hook.calls >= 1:
            raise AirflowTaskTimeout("Timeout")
        return asked(handle)

    hook.status = status  # type: ignore[method-assign]
    gatekeeper = Gatekeeper()
    op = _operator(hook, policies=[gatekeeper])
    with pytest.raises(AirflowTaskTimeout):
        op.execute(_context(TaskStateStore()))
    assert hook.cancelled == [HANDLE]
    op.on_kill()  # Airflow's own call after the timeout: nothing more to do
    assert hook.cancelled == [HANDLE]
    assert _closed(gatekeeper) == [("closed", None, "AirflowTaskTimeout")]


class KeyedTI(TI):
    """A task instance that knows who it is (what on_kill asks the API server about)."""

    dag_id, run_id, task_id, map_index = "etl", "manual__1", "train", -1


IN_ON_KILL: list[bool] = []  # whether on_kill is running, as a signal handler would be


def _killed_mid_wait(monkeypatch, state: str) -> tuple[Gatekeeper, FakeSchedulerHook, BaseException]:
    """``on_kill`` lands while the worker polls the job; the API server says the task is ``state``."""
    monkeypatch.setattr(kills, "read_task_state", lambda key: (state, True))
    gatekeeper = Gatekeeper()
    hook = FakeSchedulerHook([AppState.RUNNING])
    op = _operator(hook, policies=[gatekeeper])
    asked = hook.status

    def status(handle: str) -> Any:
        if hook.calls == 1:
            IN_ON_KILL.append(True)
            try:
                op.on_kill()  # the signal lands while the worker polls
            finally:
                IN_ON_KILL.pop()
        return asked(handle)

    hook.status = status  # type: ignore[method-assign]
    context = _context(TaskStateStore())
    context["ti"] = KeyedTI()
    with pytest.raises(BaseException) as ended:
        op.execute(context)
    return gatekeeper, hook, ended.value


def test_a_kill_cancels_the_job_ends_the_wait_and_closes_the_execution_once_in_its_thread(monkeypatch):
    """on_kill cancels and ends the wait at once (no poll for the CANCELLED state while Airflow's
    SIGKILL comes); the execution closes itself once the wait ended, never inside the signal handler."""
    closed_in_on_kill: list[bool] = []
    gatekeeper_closed = Gatekeeper.closed

    def closed(self: Gatekeeper, run: Any, **kwargs: Any) -> None:
        closed_in_on_kill.append(bool(IN_ON_KILL))
        gatekeeper_closed(self, run, **kwargs)

    monkeypatch.setattr(Gatekeeper, "closed", closed)
    gatekeeper, hook, error = _killed_mid_wait(monkeypatch, "failed")
    assert hook.cancelled == [HANDLE]
    assert type(error) is TorchXTaskKilledError and "the task instance is now 'failed'" in str(error)
    assert _closed(gatekeeper) == [("closed", None, "TorchXTaskKilledError")]
    assert hook.calls == 1  # the wait asked nothing more after the kill
    assert closed_in_on_kill == [False]


def test_a_deploys_sigterm_mid_wait_leaves_the_job_and_closes_with_the_interruption(monkeypatch):
    gatekeeper, hook, error = _killed_mid_wait(monkeypatch, "running")
    assert isinstance(error, TorchXWaitInterruptedError) and hook.cancelled == []
    assert _closed(gatekeeper) == [("closed", None, "TorchXWaitInterruptedError")]


def test_a_deferred_task_is_closed_once_when_it_resumes_in_another_process():
    gatekeeper = Gatekeeper()
    store = TaskStateStore()
    op = _operator(FakeSchedulerHook([AppState.RUNNING]), policies=[gatekeeper], deferrable=True)
    with pytest.raises(TaskDeferred):
        op.execute(_context(store))
    resumed = _operator(FakeSchedulerHook([AppState.SUCCEEDED]), policies=[gatekeeper], deferrable=True)
    result = resumed.execute_complete(_context(store), _terminal("SUCCEEDED"))
    assert result["state"] == "SUCCEEDED"
    # the resumed process prepares the app again (it rebuilds it), and closes the execution once
    assert gatekeeper.seen[-4:] == [
        ("prepare",),
        ("ended", HANDLE, "SUCCEEDED"),
        ("finished", HANDLE),
        (
            "closed",
            HANDLE,
            None,
        ),
    ]
    assert len(_closed(gatekeeper)) == 1


def test_a_policy_that_raises_in_closed_costs_a_warning_never_the_task_nor_the_other_policies():
    class Noisy(RunPolicy):
        name = "noisy"

        def closed(self, run: Any, **kwargs: Any) -> None:
            raise RuntimeError("the notification service is down")

    gatekeeper = Gatekeeper()
    op = _operator(FakeSchedulerHook([AppState.SUCCEEDED]), policies=[Noisy(), gatekeeper])
    assert op.execute(_context(TaskStateStore()))["state"] == "SUCCEEDED"
    assert _closed(gatekeeper) == [("closed", HANDLE, None)]


def test_points_are_called_by_keyword_so_a_policy_taking_only_kwargs_gets_every_argument():
    class Kwargs(RunPolicy):
        def __init__(self) -> None:
            self.got: dict[str, set[str]] = {}

        def _note(self, point: str, run: Any, kwargs: dict[str, Any]) -> None:
            self.got[point] = set(kwargs)

    policy = Kwargs()
    for point in POINTS:
        setattr(policy, point, lambda run, _p=point, **kw: policy._note(_p, run, kw) or kw.get("result"))
    _operator(FakeSchedulerHook([AppState.SUCCEEDED]), policies=[policy]).execute(_context(TaskStateStore()))
    assert policy.got == {
        "prepare": {"app"},
        "before_submit": {"app"},
        "submitted": {"app_handle"},
        "ended": {"app_handle", "state", "msg", "earlier_try"},
        "finished": {"app_handle", "result"},
        "closed": {"result", "error"},
    }


class Named(RunPolicy):
    def __init__(self, name: str, after: tuple[str, ...] = ()) -> None:
        self.name, self.after = name, after  # type: ignore[misc]
        self.order: list[str] = []

    def before_submit(self, run: Any, **kwargs: Any) -> None:
        run.memo(Named).setdefault("order", []).append(self.name)


def test_policies_run_in_the_order_their_after_declares_built_ins_first():
    late, early = Named("late", after=("early", "cost")), Named("early")
    hook = FakeSchedulerHook([AppState.SUCCEEDED])
    op = _operator(hook, policies=[late, early])
    op.execute(_context(TaskStateStore()))
    assert op.execution is not None
    assert [type(p).__name__ if not isinstance(p, Named) else p.name for p in op.execution.policies] == [
        "CachePolicy",
        "CostPolicy",
        "ResubmissionPolicy",
        "early",
        "late",
    ]
    assert op.execution.run.memo(Named)["order"] == ["early", "late"]


@pytest.mark.parametrize(
    ("policies", "message"),
    [
        ([Named("a", after=("b",)), Named("b", after=("a",))], r"\['a', 'b'\] form a cycle"),
        ([Named("a", after=("nope",))], r"runs after \['nope'\], which the task does not have"),
        ([Named("a"), Named("a")], r"more than one policy is named \['a'\]"),
        ([Named("cache")], r"more than one policy is named \['cache'\]"),
        (["not a policy"], r"policy 'not a policy' is not a RunPolicy"),
    ],
)
def test_a_bad_order_a_duplicate_or_a_stranger_is_refused_when_the_dag_is_parsed(policies, message):
    with pytest.raises(TorchXConfigError, match=message):
        _operator(FakeSchedulerHook([]), policies=policies)


def test_no_other_class_has_a_method_named_like_a_point():
    """A point's name means the point: nothing else in the provider (the scheduler layer, the
    accounting, the lifecycle) has a method of that name to be confused with it."""
    clashes = []
    for module_info in pkgutil.walk_packages(torchx_airflow.__path__, "torchx_airflow."):
        if module_info.name.startswith("torchx_airflow.plugins"):
            continue  # the UI's modules import Flask/FastAPI apps; none defines a point
        module = importlib.import_module(module_info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__ or issubclass(cls, RunPolicy):
                continue
            methods = [p for p in POINTS if callable(vars(cls).get(p))]
            clashes += [f"{cls.__module__}.{cls.__name__}.{p}" for p in methods]
    assert clashes == []


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


def test_the_kill_error_names_the_reason():
    assert "its execution_timeout passed" in str(
        TorchXTaskKilledError(HANDLE, "its execution_timeout passed")
    )


def test_a_cancel_that_fails_after_a_timeout_still_closes_the_execution_once(monkeypatch):
    hook = FakeSchedulerHook([AppState.RUNNING])
    asked = hook.status

    def status(handle: str) -> Any:
        if hook.calls >= 1:
            raise AirflowTaskTimeout("Timeout")
        return asked(handle)

    def cancel(handle: str) -> None:
        raise RuntimeError("scancel: slurmctld is down")

    hook.status, hook.cancel = status, cancel  # type: ignore[method-assign]
    gatekeeper = Gatekeeper()
    with pytest.raises(AirflowTaskTimeout):
        _operator(hook, policies=[gatekeeper]).execute(_context(TaskStateStore()))
    assert _closed(gatekeeper) == [("closed", None, "AirflowTaskTimeout")]


class NoConnection(FakeSchedulerHook):
    """A task whose connection cannot be read (deleted, its secrets backend down)."""

    @property
    def scheduler(self) -> str:  # type: ignore[override]
        raise TorchXConfigError("The connection 'torchx_default' does not exist")


def test_an_error_before_the_app_is_built_closes_the_execution_too():
    gatekeeper = Gatekeeper()
    op = _operator(NoConnection([AppState.SUCCEEDED]), policies=[gatekeeper])
    with pytest.raises(TorchXConfigError, match="does not exist"):
        op.execute(_context(TaskStateStore()))
    assert gatekeeper.seen == [("closed", None, "TorchXConfigError")]
