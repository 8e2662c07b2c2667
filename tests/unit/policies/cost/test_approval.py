"""The cost policy's opt-in approval at ``before_submit``, against a fake run, with fakes of Airflow's
human-in-the-loop calls (they talk to the task's supervisor, which only a running Airflow has; the
real thing: tests/integration/test_cost_approval.py)."""

from __future__ import annotations

import datetime
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType, TaskAwaitingInput
from airflow.sdk.execution_time import hitl
from airflow.sdk.execution_time.comms import ErrorResponse

from tests.fakes import FakeSchedulerHook
from tests.unit.policies.test_policy_points import FakeRun
from torchx_airflow.exceptions import TorchXCostApprovalError, TorchXCostLimitError
from torchx_airflow.policies.cost.policy import CostPolicy
from torchx_airflow.run.execution import RESUBMITTED
from torchx_airflow.settings.connection import TorchXConnectionSettings
from torchx_airflow.settings.prices import PriceTable

AT = datetime.datetime(2026, 11, 26, 1, 0, tzinfo=datetime.timezone.utc)
ADMIN = SimpleNamespace(id="7", name="admin")


class FakeHITL:
    """Fake of Airflow's human-in-the-loop calls: this try's request and its answer, if any."""

    def __init__(self, answer: Any = None) -> None:
        self.answer, self.asked = answer, []

    def get(self, ti_id: Any) -> Any:
        if self.answer is None:
            raise AirflowRuntimeError(
                ErrorResponse(error=ErrorType.API_SERVER_ERROR, detail={"status_code": 404})
            )
        return self.answer

    def upsert(self, **request: Any) -> None:
        self.asked.append(request)


def _answer(chosen: list[str], user: Any) -> SimpleNamespace:
    return SimpleNamespace(
        response_received=True, chosen_options=chosen, responded_by_user=user, responded_at=AT
    )


def _unanswered() -> SimpleNamespace:
    """A request Airflow resumed without an answer (its scheduler's timeout without defaults)."""
    return SimpleNamespace(
        response_received=False, chosen_options=None, responded_by_user=None, responded_at=None
    )


@pytest.fixture
def fake_hitl(monkeypatch):
    fake = FakeHITL()
    monkeypatch.setattr(hitl, "get_hitl_detail_content_detail", fake.get)
    monkeypatch.setattr(hitl, "upsert_hitl_detail", fake.upsert)
    return fake


def _run(timeout_s: float | None = 60.0) -> FakeRun:
    hook = FakeSchedulerHook([])
    settings = TorchXConnectionSettings(scheduler="slurm", prices=PriceTable(cpu_hour=1.0))
    hook.settings = replace(settings, cost_approval_timeout=timeout_s)
    run = FakeRun(hook)
    run.context = {"ti": SimpleNamespace(id="ti-1")}
    return run


def _over_budget(run: FakeRun) -> None:
    CostPolicy(max_cost=5.0, expected_duration=3600.0).before_submit(run, run.app)  # estimate 8.0


def test_over_max_cost_asks_an_approver_and_waits(fake_hitl):
    run = _run()
    with pytest.raises(TaskAwaitingInput) as waiting:
        _over_budget(run)
    assert (waiting.value.method_name, waiting.value.timeout) == ("execute", datetime.timedelta(seconds=60))
    (request,) = fake_hitl.asked
    assert (request["options"], request["defaults"]) == (["Approve", "Reject"], ["Reject"])
    assert "estimated 8.0000 USD, over max_cost 5 USD" in request["subject"]
    assert "requested 8 CPU" in request["body"] and "no answer within 60 s" in request["body"]
    assert "cost_approval" not in run.result_fields


def test_an_approval_lets_the_submission_go_on_and_is_recorded(fake_hitl):
    fake_hitl.answer = _answer(["Approve"], ADMIN)
    run = _run()
    _over_budget(run)  # returns: the lifecycle submits
    assert run.result_fields["cost_approval"] == {
        "approved_by": {"id": "7", "name": "admin"},
        "responded_at": AT.isoformat(),
        "estimate": 8.0,
        "max_cost": 5.0,
        "currency": "USD",
    }
    assert fake_hitl.asked == []


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (_answer(["Reject"], ADMIN), "admin (id 7) rejected it at 2026-11-26T01:00:00+00:00"),
        (_answer(["Reject"], None), "no approver answered within 60 s (then it is rejected)"),
        (_unanswered(), "no approver answered within 60 s"),
    ],
)  # fmt: skip
def test_a_rejection_or_no_answer_fails_with_the_estimate(fake_hitl, answer, reason):
    fake_hitl.answer = answer
    run = _run()
    with pytest.raises(TorchXCostApprovalError) as err:
        _over_budget(run)
    assert reason in str(err.value)
    assert "estimated cost 8.0000 USD is over max_cost=5.0 USD and was not approved" in str(err.value)
    assert isinstance(err.value, TorchXCostLimitError) and "cost_approval" not in run.result_fields


def test_without_the_setting_or_on_a_resubmission_nobody_is_asked(fake_hitl):
    for run in (_run(timeout_s=None), _run()):
        if run.hook.settings.cost_approval_timeout is not None:
            run.submission = RESUBMITTED  # mid-run: the bound holds without a question
        with pytest.raises(TorchXCostLimitError) as err:
            _over_budget(run)
        assert not isinstance(err.value, TorchXCostApprovalError)
    assert fake_hitl.asked == []
