"""Each of the task's own policies at its four points, against a fake run (no operator, no lifecycle):
what it answers at a point, and what it leaves on the run for the others."""

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
from torchx_airflow.run.execution import NEW, RESUBMITTED
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


class FakeRun:
    """What a policy reads of ``run.execution.TaskRun``, set by hand."""

    task_id, where, deadline, waits_in_triggerer, tracker_timeout = "train", "Task 'train'", None, False, 5.0
    earlier_try_end = False

    def __init__(self, hook: FakeSchedulerHook, store: Any = None, tracker: Any = None) -> None:
        self.hook, self.store, self.submission = hook, store, NEW
        self.trackers = SimpleNamespace(stores=[tracker], __bool__=lambda: True) if tracker else []
        self.log = logging.getLogger("fake-run")
        self.context = {"ti": None}
        self.result_fields: dict[str, Any] = {}
        self.app = AppDef(
            "train", roles=[Role("r", "img", resource=Resource(cpu=4, gpu=0, memMB=1024), num_replicas=2)]
        )


def test_the_cost_policy_refuses_an_estimate_over_max_cost_before_anything_is_submitted():
    hook = FakeSchedulerHook([])
    hook.settings = TorchXConnectionSettings(scheduler="slurm", prices=PriceTable(cpu_hour=1.0))
    policy = CostPolicy(max_cost=5.0, expected_duration=3600.0)  # 8 CPUs x 1 h x 1.0 = 8.0 > 5.0
    with pytest.raises(TorchXCostLimitError, match="8"):
        policy.before_submit(FakeRun(hook), FakeRun(hook).app)
    assert (
        CostPolicy(max_cost=10.0, expected_duration=3600.0).before_submit(FakeRun(hook), FakeRun(hook).app)
        is None
    )


def test_the_cost_policy_leaves_the_ended_jobs_usage_and_cost_on_the_run():
    hook = FakeSchedulerHook([])
    hook.settings = TorchXConnectionSettings(scheduler="slurm", prices=PriceTable(cpu_hour=1.0))
    run = FakeRun(hook)
    policy = CostPolicy(max_cost=None, expected_duration=None)
    policy.submitted(run, FIRST)
    assert policy.ended(run, FIRST, "SUCCEEDED", "") is None
    assert run.result_fields["usage"]["source"] == "requested"  # the fake keeps no accounting
    assert run.result_fields["cost"]["currency"] == "USD"


def test_the_resubmission_policy_answers_an_infrastructure_end_with_the_next_attempt_from_its_checkpoint():
    tracker, state = CheckpointStore(), TaskStateStore()
    run = FakeRun(FakeSchedulerHook([]), state, tracker)
    policy = ResubmissionPolicy(
        infrastructure_retries=1, checkpoint_artifact="checkpoint", checkpoint_root="/ckpt"
    )
    policy.before_submit(run, run.app)
    policy.submitted(run, FIRST)
    run.result_fields["usage"] = {"source": "sacct", "elapsed_s": 7}
    attempt = policy.ended(run, FIRST, "FAILED", NODE_FAIL_MSG)
    assert isinstance(attempt, NextAttempt) and attempt.number == 2
    assert attempt.app.roles[0].env[RESUME_FROM_ENV] == "/ckpt/1"
    run.submission = RESUBMITTED
    policy.submitted(run, SECOND)
    assert [a["app_handle"] for a in state.values[ATTEMPTS_KEY]] == [FIRST, SECOND]
    assert state.values[ATTEMPTS_KEY][0]["usage"] == {
        "source": "sacct",
        "elapsed_s": 7,
    }  # the ended job's own
    assert tracker.edges and tracker.edges[0][:2] == (SECOND, FIRST)
    # the budget (1) is used up: the next infrastructure end is the task's end
    assert policy.ended(run, SECOND, "FAILED", NODE_FAIL_MSG) is None
    assert [a["app_handle"] for a in run.result_fields["attempts"]] == [FIRST, SECOND]


def test_the_resubmission_policy_leaves_a_job_that_failed_for_its_own_reasons():
    run = FakeRun(FakeSchedulerHook([]), TaskStateStore(), CheckpointStore())
    policy = ResubmissionPolicy(infrastructure_retries=3, checkpoint_artifact="checkpoint")
    policy.submitted(run, FIRST)
    assert policy.ended(run, FIRST, "FAILED", "exit code 1") is None
    assert policy.ended(run, SECOND, "SUCCEEDED", "") is None


def test_max_cost_bounds_all_attempts_of_a_try_together():
    """8.0 estimated per job under max_cost=10: the first job may go; a resubmission after attempts
    that cost 3.0 (actual) and 0.5 (estimate only) would bring the try to 11.5, so it is refused."""
    hook = FakeSchedulerHook([])
    hook.settings = TorchXConnectionSettings(scheduler="slurm", prices=PriceTable(cpu_hour=1.0))
    state = TaskStateStore()
    run = FakeRun(hook, state)
    policy = CostPolicy(max_cost=10.0, expected_duration=3600.0)
    assert policy.before_submit(run, run.app) is None  # 8.0: a first job fits
    state.values[ATTEMPTS_KEY] = [
        {"attempt": 1, "cost": {"actual": {"total": 3.0}, "estimate": {"total": 8.0}}},
        {"attempt": 2, "cost": {"actual": None, "estimate": {"total": 0.5}}},
    ]
    run.submission = RESUBMITTED
    with pytest.raises(TorchXCostLimitError, match=r"11\.5000.*3\.5000 USD already spent by this try's"):
        policy.before_submit(run, run.app)
    state.values[ATTEMPTS_KEY] = [{"attempt": 1, "cost": {"actual": {"total": 1.5}}}]
    assert policy.before_submit(run, run.app) is None  # 9.5: within the bound
