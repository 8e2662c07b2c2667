"""Each built-in policy at its points, called as the lifecycle calls them (by keyword) on a real
``TaskRun`` of a fake scheduler (no operator, no lifecycle): what it answers at a point, and what it
leaves on the run for the others."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from torchx.specs import AppDef, Resource, Role

from tests.fakes import FakeSchedulerHook, TaskStateStore
from torchx_airflow.exceptions import TorchXCostLimitError
from torchx_airflow.policies.cost.policy import CostPolicy
from torchx_airflow.policies.resubmission import RESUME_FROM_ENV, ResubmissionPolicy
from torchx_airflow.run.execution import RESUBMITTED, TaskRun
from torchx_airflow.run.points import NextAttempt
from torchx_airflow.run.state import ATTEMPTS_KEY
from torchx_airflow.settings.connection import TorchXConnectionSettings
from torchx_airflow.settings.prices import PriceTable

FIRST, SECOND = "slurm://torchx/1", "slurm://torchx/2"
NODE_FAIL_MSG = "CANCELLED by 0, NODE_FAIL (exit code 0:0)"


class CheckpointStore:
    """A tracker store whose runs each recorded a ``checkpoint`` artifact; it notes lineage edges."""

    def __init__(self) -> None:
        self.edges: list[tuple[str, str, str | None]] = []
        self.metadata_of: dict[str, dict[str, Any]] = {}

    def artifacts(self, run_id: str) -> dict[str, Any]:
        return {"checkpoint": SimpleNamespace(path=f"/ckpt/{run_id.rsplit('/', 1)[1]}")}

    def add_source(self, run_id: str, source_id: str, artifact_name: str | None = None) -> None:
        self.edges.append((run_id, source_id, artifact_name))

    def add_metadata(self, run_id: str, **kv: Any) -> None:
        self.metadata_of.setdefault(run_id, {}).update(kv)


def FakeRun(hook: FakeSchedulerHook, store: Any = None, tracker: Any = None) -> TaskRun:  # noqa: N802
    """A real ``TaskRun`` (what a policy reads of it is its documented surface) of task ``train`` on
    ``hook`` (a fake scheduler), with ``store`` as its task state store and ``tracker`` as its one
    tracker store; its app is two 4-CPU replicas."""
    app = AppDef(
        "train", roles=[Role("r", "img", resource=Resource(cpu=4, gpu=0, memMB=1024), num_replicas=2)]
    )
    trackers = SimpleNamespace(stores=[tracker], conn_ids=["fs"]) if tracker else []
    return TaskRun(
        task_id="train",
        context={"ti": None, "task_state_store": store},
        hook=hook,  # type: ignore[arg-type]
        trackers=lambda: trackers,  # type: ignore[arg-type,return-value]
        build_app=lambda: app,
        app_parts=lambda: {"app": app},
        durable=True,
        tracker_timeout=5.0,
        wait_for_completion=True,
        waits_in_triggerer=lambda: False,
        task_log=logging.getLogger("fake-run"),
    )


def test_the_cost_policy_refuses_an_estimate_over_max_cost_before_anything_is_submitted():
    hook = FakeSchedulerHook([])
    hook.settings = TorchXConnectionSettings(scheduler="slurm", prices=PriceTable(cpu_hour=1.0))
    policy = CostPolicy(max_cost=5.0, expected_duration=3600.0)  # 8 CPUs x 1 h x 1.0 = 8.0 > 5.0
    run = FakeRun(hook)
    with pytest.raises(TorchXCostLimitError, match="8"):
        policy.before_submit(run, app=run.app)
    run = FakeRun(hook)
    assert CostPolicy(max_cost=10.0, expected_duration=3600.0).before_submit(run, app=run.app) is None


def test_the_cost_policy_leaves_the_ended_jobs_usage_and_cost_on_the_run():
    hook = FakeSchedulerHook([])
    hook.settings = TorchXConnectionSettings(scheduler="slurm", prices=PriceTable(cpu_hour=1.0))
    run = FakeRun(hook)
    policy = CostPolicy(max_cost=None, expected_duration=None)
    policy.submitted(run, app_handle=FIRST)
    assert policy.ended(run, app_handle=FIRST, state="SUCCEEDED", msg="") is None
    assert run.result_fields["usage"]["source"] == "requested"  # the fake keeps no accounting
    assert run.result_fields["cost"]["currency"] == "USD"


def test_the_resubmission_policy_answers_an_infrastructure_end_with_the_next_attempt_from_its_checkpoint():
    tracker, state = CheckpointStore(), TaskStateStore()
    hook = FakeSchedulerHook([])
    hook.settings = TorchXConnectionSettings(scheduler="slurm", output_roots=("/ckpt",))
    run = FakeRun(hook, state, tracker)
    policy = ResubmissionPolicy(infrastructure_retries=1, checkpoint_artifact="checkpoint")
    policy.prepare(run, app=run.app)
    assert run.task_resubmits  # the scheduler is to leave infrastructure ends to the task
    run.attempts.record_start(FIRST)  # the lifecycle records each attempt, and each end
    policy.submitted(run, app_handle=FIRST)
    run.attempts.record_end(FIRST, "FAILED")
    attempt = policy.ended(run, app_handle=FIRST, state="FAILED", msg=NODE_FAIL_MSG)
    assert isinstance(attempt, NextAttempt) and attempt.number == 2
    assert attempt.app.roles[0].env[RESUME_FROM_ENV] == "/ckpt/1"
    assert attempt.details == {"resumed_from": "/ckpt/1"}
    assert run.attempts.of(FIRST)["reason"] == "NODE_FAIL"
    run.submission = RESUBMITTED
    run.attempts.record_start(SECOND, attempt.number, **attempt.details)
    policy.submitted(run, app_handle=SECOND)
    assert [a["app_handle"] for a in state.values[ATTEMPTS_KEY]] == [FIRST, SECOND]
    assert tracker.edges == [(SECOND, FIRST, "checkpoint")]  # the lineage of the resumed job
    # the budget (1) is used up: the next infrastructure end is the task's end
    run.attempts.record_end(SECOND, "FAILED")
    assert policy.ended(run, app_handle=SECOND, state="FAILED", msg=NODE_FAIL_MSG) is None


def test_the_resubmission_policy_leaves_a_job_that_failed_for_its_own_reasons():
    run = FakeRun(FakeSchedulerHook([]), TaskStateStore(), CheckpointStore())
    policy = ResubmissionPolicy(infrastructure_retries=3, checkpoint_artifact="checkpoint")
    assert policy.ended(run, app_handle=FIRST, state="FAILED", msg="exit code 1") is None
    assert policy.ended(run, app_handle=SECOND, state="SUCCEEDED", msg="") is None


def test_max_cost_bounds_all_attempts_of_a_try_together():
    """8.0 estimated per job under max_cost=10: the first job may go; a resubmission after attempts
    that cost 3.0 (actual) and 0.5 (estimate only) would bring the try to 11.5, so it is refused."""
    hook = FakeSchedulerHook([])
    hook.settings = TorchXConnectionSettings(scheduler="slurm", prices=PriceTable(cpu_hour=1.0))
    policy = CostPolicy(max_cost=10.0, expected_duration=3600.0)
    run = FakeRun(hook, TaskStateStore())
    assert policy.before_submit(run, app=run.app) is None  # 8.0: a first job fits
    used = {"source": "sacct"}
    state = TaskStateStore(
        {
            ATTEMPTS_KEY: [
                {"attempt": 1, "state": "FAILED", "usage": used, "cost": {"actual": {"total": 3.0}}},
                {"attempt": 2, "state": "FAILED", "usage": used, "cost": {"estimate": {"total": 0.5}}},
            ]
        }
    )
    run = FakeRun(hook, state)
    run.submission = RESUBMITTED
    with pytest.raises(TorchXCostLimitError, match=r"11\.5000.*3\.5000 USD already spent by this try's"):
        policy.before_submit(run, app=run.app)
    state = TaskStateStore(
        {ATTEMPTS_KEY: [{"attempt": 1, "usage": used, "cost": {"actual": {"total": 1.5}}}]}
    )
    run = FakeRun(hook, state)
    run.submission = RESUBMITTED
    assert policy.before_submit(run, app=run.app) is None  # 9.5: within the bound
