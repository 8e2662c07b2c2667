"""The cost policy's opt-in approval at ``before_submit``, against a fake run whose ``resumed_with`` is
the event Airflow resumes the task with, and a fake of Airflow's call that writes the request (it talks
to the task's supervisor, which only a running Airflow has; the real thing:
tests/integration/test_cost_approval.py)."""

from __future__ import annotations

import datetime
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskAwaitingInput
from airflow.sdk.execution_time import hitl
from torchx.specs import AppDef, Role

from tests.fakes import FakeSchedulerHook
from tests.unit.policies.test_policy_points import FakeRun
from torchx_airflow.exceptions import TorchXCostApprovalError, TorchXCostLimitError
from torchx_airflow.policies.cost.approval import ASKED_KEY, app_fingerprint
from torchx_airflow.policies.cost.policy import CostPolicy
from torchx_airflow.run.execution import RESUBMITTED
from torchx_airflow.settings.connection import TorchXConnectionSettings
from torchx_airflow.settings.prices import PriceTable

AT = datetime.datetime(2026, 11, 26, 1, 0, tzinfo=datetime.timezone.utc)
ADMIN = {"id": "7", "name": "admin"}
TIMED_OUT = {
    "error": "The Human-in-the-loop response timeout has passed without a response.",
    "error_type": "timeout",
}


def _answer(chosen: list[str], user: dict | None) -> dict[str, Any]:
    """The event Airflow resumes the task with (``HITLDetail.as_resume_event_payload``)."""
    return {"chosen_options": chosen, "params_input": {}, "responded_at": AT, "responded_by_user": user}


@pytest.fixture
def asked(monkeypatch) -> list[dict[str, Any]]:
    """Fake of Airflow's ``upsert_hitl_detail``: the requests written."""
    requests: list[dict[str, Any]] = []
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **request: requests.append(request))
    return requests


def _fingerprint(run: FakeRun) -> str:
    """``run``'s app as its hook submits it (scheduler, run options, connection)."""
    hook = run.hook
    return app_fingerprint(
        run.app, hook.scheduler, hook.resolve_cfg(hook.scheduler, hook.cfg), hook.torchx_conn_id
    )


def _asked(run: FakeRun, estimate: float = 8.0) -> dict[str, Any]:
    """What the parked task kept: the request for ``run``'s app at ``estimate``."""
    fingerprint = _fingerprint(run)
    return {"estimate": estimate, "max_cost": 5.0, "currency": "USD", "app_fingerprint": fingerprint}


def _run(
    timeout_s: float | None = 60.0,
    answer: dict | None = None,
    asked: dict | None | bool = True,
    requester: str | None = None,
    **approval: Any,
) -> FakeRun:
    """A run resumed with ``answer`` and, by default, the request for its own app (``asked``), of a
    DAG run ``requester`` triggered; ``approval``: the connection's approver settings."""
    hook = FakeSchedulerHook([])
    settings = TorchXConnectionSettings(scheduler="slurm", prices=PriceTable(cpu_hour=1.0))
    hook.settings = replace(settings, cost_approval_timeout=timeout_s, **approval)
    run = FakeRun(hook)
    run.context = {
        "ti": SimpleNamespace(id="ti-1"),
        "dag_run": SimpleNamespace(triggering_user_name=requester),
    }
    run.resumed_with = {}
    if answer is not None:
        run.resumed_with = {"event": answer}
        if asked:
            run.resumed_with[ASKED_KEY] = _asked(run) if asked is True else asked
    return run


def _over_budget(run: FakeRun) -> None:
    CostPolicy(max_cost=5.0, expected_duration=3600.0).before_submit(run, app=run.app)  # estimate 8.0


def test_over_max_cost_asks_an_approver_and_waits(asked):
    run = _run()
    with pytest.raises(TaskAwaitingInput) as waiting:
        _over_budget(run)
    assert (waiting.value.method_name, waiting.value.timeout) == ("execute", datetime.timedelta(seconds=60))
    # the parked task keeps what it asked: Airflow resumes it with that beside the answer
    assert waiting.value.kwargs == {ASKED_KEY: _asked(run)}
    (request,) = asked
    assert (request["options"], request["defaults"]) == (["Approve", "Reject"], ["Reject"])
    assert "estimated 8.0000 USD, over max_cost 5 USD" in request["subject"]
    assert "requested 8 CPU" in request["body"] and "no answer within 60 s" in request["body"]
    assert f"**App fingerprint**: `{_asked(run)['app_fingerprint']}`" in request["body"]
    assert "cost_approval" not in run.result_fields


def test_an_approval_lets_the_submission_go_on_and_is_recorded(asked):
    run = _run(answer=_answer(["Approve"], ADMIN))
    _over_budget(run)  # returns: the lifecycle submits
    assert run.result_fields["cost_approval"] == {
        "approved_by": {"id": "7", "name": "admin"},
        "responded_at": AT.isoformat(),
        "requested_by": None,
        "estimate": 8.0,
        "max_cost": 5.0,
        "currency": "USD",
        "app_fingerprint": _fingerprint(run),
    }
    assert asked == []


def _bigger(run: FakeRun) -> None:
    """The app changes between the question and the answer: one more replica (a template rendered
    otherwise when the task resumed)."""
    role = run.app.roles[0]
    bigger = Role(role.name, role.image, resource=role.resource, num_replicas=3)
    run.replace_app(AppDef(run.app.name, roles=[bigger]))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_bigger, "the app changed since (approved sha256:"),
        (lambda run: run.resumed_with[ASKED_KEY].update(estimate=6.5), "estimate 6.5 -> 8.0"),
        (lambda run: run.resumed_with.pop(ASKED_KEY), "the answer does not say which estimate and app"),
    ],
)
def test_an_approval_of_another_estimate_or_app_submits_nothing(asked, change, reason):
    run = _run(answer=_answer(["Approve"], ADMIN))
    change(run)
    with pytest.raises(TorchXCostApprovalError) as err:
        CostPolicy(max_cost=5.0, expected_duration=3600.0).before_submit(run, app=run.app)
    assert "admin (id 7) approved it at 2026-11-26T01:00:00+00:00, but " in str(err.value)
    assert reason in str(err.value) and "clear the task to ask again" in str(err.value)
    assert "cost_approval" not in run.result_fields and asked == []


class _Overlay:
    """An object an app may carry in its metadata, with no repr of its own (copied as itself, as a
    client object is: each process's has its own address)."""

    def __deepcopy__(self, memo: dict) -> _Overlay:
        return self


def test_the_fingerprint_is_of_the_whole_app_with_secrets_masked():
    def app(replicas: int = 1, lr: str = "0.1", token: str = "s3cr3t-Token") -> AppDef:
        env = {"LR": lr, "HF_TOKEN": token}
        return AppDef("a", roles=[Role("r", "img", args=["x"], env=env, num_replicas=replicas)])

    assert app_fingerprint(app(), "slurm") == app_fingerprint(app(), "slurm")  # stable across builds
    with_objects = [app() for _ in range(2)]
    for built in with_objects:  # an object without a repr of its own: its address is not content
        built.roles[0].metadata["overlay"] = _Overlay()
    assert len({app_fingerprint(built, "slurm") for built in with_objects}) == 1
    assert app_fingerprint(app(), "slurm").startswith("sha256:")
    for other in (app(replicas=2), app(lr="0.2")):
        assert app_fingerprint(other, "slurm") != app_fingerprint(app(), "slurm")
    assert app_fingerprint(app(), "local_cwd") != app_fingerprint(app(), "slurm")
    # a secret's value is not hashed (the fingerprint is shown to approvers)
    assert app_fingerprint(app(token="other-Token1"), "slurm") == app_fingerprint(app(), "slurm")
    # where and how it is submitted: the run options and the connection count
    base = app_fingerprint(app(), "slurm", {"partition": "cpu", "time": "1:00:00"}, "torchx_a")
    assert base == app_fingerprint(app(), "slurm", {"time": "1:00:00", "partition": "cpu"}, "torchx_a")
    assert base != app_fingerprint(app(), "slurm", {"partition": "gpu", "time": "1:00:00"}, "torchx_a")
    assert base != app_fingerprint(app(), "slurm", {"partition": "cpu", "time": "1:00:00"}, "torchx_b")


def test_a_registered_secret_nested_deep_in_the_app_is_not_hashed():
    from torchx_airflow.secrets import register_secret

    def app(secret: str) -> AppDef:
        deep = {"a": {"b": {"c": {"d": {"e": {"f": secret}}}}}}
        return AppDef("a", roles=[Role("r", "img", args=["x"], metadata={"deep": deep})])

    register_secret("deep-Secret-0001")
    register_secret("deep-Secret-0002")
    assert app_fingerprint(app("deep-Secret-0001"), "slurm") == app_fingerprint(
        app("deep-Secret-0002"), "slurm"
    )


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (_answer(["Reject"], ADMIN), "admin (id 7) rejected it at 2026-11-26T01:00:00+00:00"),
        (_answer(["Reject"], None), "no approver answered within 60 s (then it is rejected)"),
        (TIMED_OUT, "no approver answered within 60 s"),
    ],
)
def test_a_rejection_or_no_answer_fails_with_the_estimate(asked, answer, reason):
    run = _run(answer=answer)
    with pytest.raises(TorchXCostApprovalError) as err:
        _over_budget(run)
    assert reason in str(err.value)
    assert "estimated cost 8.0000 USD is over max_cost=5.0 USD and was not approved" in str(err.value)
    assert isinstance(err.value, TorchXCostLimitError) and "cost_approval" not in run.result_fields
    assert asked == []  # an answer is never asked again


def test_without_the_setting_or_on_a_resubmission_nobody_is_asked(asked):
    resubmitted = _run()
    resubmitted.submission = RESUBMITTED  # mid-run: the bound holds without a question
    for run in (_run(timeout_s=None), resubmitted):
        with pytest.raises(TorchXCostLimitError) as err:
            _over_budget(run)
        assert not isinstance(err.value, TorchXCostApprovalError)
    assert asked == []


ALICE, BOB = {"id": "alice", "name": "alice"}, {"id": "bob", "name": "bob"}


def test_the_request_is_assigned_to_the_named_approvers_but_the_requester(asked):
    run = _run(requester="alice", cost_approvers=(ALICE, BOB))
    with pytest.raises(TaskAwaitingInput):
        _over_budget(run)
    (request,) = asked
    assert request["assigned_users"] == [BOB]  # Airflow's API refuses an answer from anyone else
    assert "**Approvers**: bob" in request["body"]


def test_the_requester_cannot_approve_their_own_run_unless_the_connection_allows_it(asked):
    run = _run(answer=_answer(["Approve"], ALICE), requester="alice")
    with pytest.raises(TorchXCostApprovalError, match="they triggered this DAG run.*cost_self_approval"):
        _over_budget(run)
    assert "cost_approval" not in run.result_fields
    allowed = _run(answer=_answer(["Approve"], ALICE), requester="alice", cost_self_approval=True)
    _over_budget(allowed)
    assert allowed.result_fields["cost_approval"]["requested_by"] == "alice"


def test_a_request_whose_only_approver_is_the_requester_is_not_asked(asked):
    run = _run(requester="alice", cost_approvers=(ALICE,))
    with pytest.raises(TorchXCostApprovalError, match="only approver .* \\('alice'\\) triggered"):
        _over_budget(run)
    assert asked == []


def test_a_scheduled_run_has_no_requester_and_any_named_approver_is_asked(asked):
    run = _run(requester=None, cost_approvers=(ALICE,))
    with pytest.raises(TaskAwaitingInput):
        _over_budget(run)
    assert asked[0]["assigned_users"] == [ALICE]


@pytest.mark.parametrize(
    ("extra", "approvers"),
    [
        ({"cost_approvers": "alice, bob"}, (ALICE, BOB)),
        ({"cost_approvers": '["alice", {"id": "7", "name": "admin"}]'}, (ALICE, ADMIN)),
        ({"cost_approvers": ["alice"]}, (ALICE,)),
        ({}, ()),
    ],
)
def test_the_approvers_extra_takes_ids_or_users(extra, approvers):
    assert TorchXConnectionSettings.from_extra("c", extra).cost_approvers == approvers


def test_an_approver_that_is_no_user_is_refused_naming_the_form():
    from torchx_airflow.exceptions import TorchXConnectionError

    with pytest.raises(TorchXConnectionError, match="'cost_approvers' holds \\{'id': 7\\}.*alice"):
        TorchXConnectionSettings.from_extra("c", {"cost_approvers": [{"id": 7}]})
