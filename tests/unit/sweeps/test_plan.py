"""A rung's plan: which trials it trains, from the results the segments' workers recorded (XCom),
where each resumes from, and when the budget stops the sweep. Airflow's XCom is stood in for."""

from __future__ import annotations

import datetime
import json
from types import SimpleNamespace

import pytest
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowSkipException, TaskAwaitingInput
from airflow.sdk.execution_time import hitl

from torchx_airflow.exceptions import TorchXConfigError
from torchx_airflow.lineage.keys import XCOM_LINEAGE_PARENTS, XCOM_RUN_ID, XCOM_SUBMITTED_APP
from torchx_airflow.operators.promote import TorchXPromoteOperator
from torchx_airflow.policies.cost.approval import ASKED_KEY
from torchx_airflow.policies.cost.usage import spent_total
from torchx_airflow.sweeps.tasks import (
    RESULT_TRIAL,
    XCOM_SEGMENT_SPENT,
    XCOM_SWEEP,
    XCOM_SWEEP_SPEC,
    TorchXSweepError,
    TorchXSweepPlanOperator,
    TorchXSweepPromoteOperator,
)

TRIALS = [{"lr": lr} for lr in (0.01, 0.03, 0.1, 0.3, 1.0, 3.0)]


class FakeTI:
    def __init__(self, xcoms: dict) -> None:
        self.xcoms = xcoms  # (task id, key, map index) -> value
        self.pushed: dict = {}

    def xcom_pull(self, task_ids, key="return_value", map_indexes=None):
        if isinstance(map_indexes, list):
            return [self.xcoms.get((task_ids, key, i)) for i in map_indexes]
        return self.xcoms.get((task_ids, key, -1))

    def xcom_push(self, key, value):
        self.pushed[key] = value


def _plan(rung: int, **kwargs) -> TorchXSweepPlanOperator:
    return TorchXSweepPlanOperator(
        task_id=f"plan_{rung}",
        rung=rung,
        budgets=[1, 3, 9],
        trials=TRIALS,
        objective="loss",
        mode="min",
        reduction_factor=3,
        segment_task_ids=["s.rung_0", "s.rung_1", "s.rung_2"],
        plan_task_ids=["s.plan_0", "s.plan_1", "s.plan_2"],
        **kwargs,
    )


def _rung0(losses, out="/out", cost=None, roots=None, hits=False) -> dict:
    first = _plan(0).execute({"ti": (ti := FakeTI({}))})
    xcoms = {("s.plan_0", "return_value", -1): first, ("s.plan_0", XCOM_SWEEP, -1): ti.pushed[XCOM_SWEEP]}
    for i, loss in enumerate(losses):
        trial = first[i]["trial"]
        result = {
            "app_handle": f"local_cwd://torchx/seg-{i}",
            "state": "SUCCEEDED" if loss is not None else "FAILED",
            "metrics": {"loss": loss} if loss is not None else {},
            "artifacts": {"checkpoint": {"path": f"{out}/{trial['id']}/ckpt.pt"}},
        }
        if cost is not None and hits:  # a cache hit spent nothing; its run's cost is referenced
            result.update(cache_hit=True, cost=0.0, cached_usage={"cost": {"actual": {"total": cost}}})
        elif cost is not None:
            result["cost"] = {"actual": {"total": cost}}
        xcoms[("s.rung_0", "return_value", i)] = result
        xcoms[("s.rung_0", XCOM_RUN_ID, i)] = f"run-{i}"
        xcoms[("s.rung_0", XCOM_SUBMITTED_APP, i)] = {"output_roots": roots or [f"/out/{trial['id']}"]}
    return xcoms


def test_the_first_rung_trains_every_trial_and_passes_lineage_on():
    ti = FakeTI({})
    segments = _plan(0).execute({"ti": ti})
    assert [s["trial"]["id"] for s in segments] == ["t0", "t1", "t2", "t3", "t4", "t5"]
    assert all(s["trial"]["budget"] == 1 and s["trial"]["resume_from"] is None for s in segments)
    assert ti.pushed[XCOM_LINEAGE_PARENTS] == {"s.rung_0": [None] * 6}
    # what the sweep is, for its comparison view
    assert ti.pushed[XCOM_SWEEP_SPEC] == {
        "objective": "loss",
        "mode": "min",
        "budgets": [1, 3, 9],
        "rung": 0,
        "trials": 6,
    }


def test_the_next_rung_keeps_the_best_third_by_what_the_workers_recorded_and_resumes_each():
    ti = FakeTI(_rung0([0.5, 0.2, None, 0.2, 0.9, 0.3]))  # t2 failed; t1 and t3 tie
    segments = _plan(1).execute({"ti": ti})
    assert [s["trial"]["id"] for s in segments] == ["t1", "t3"]
    first = segments[0]["trial"]
    assert first["budget"] == 3 and first["previous_budget"] == 1 and first["params"] == {"lr": 0.03}
    assert first["resume_from"] == "/out/t1/ckpt.pt"
    assert ti.pushed[XCOM_LINEAGE_PARENTS] == {"s.rung_1": [["run-1"], ["run-3"]]}  # the runs they pushed


def test_a_checkpoint_outside_its_segments_output_roots_is_not_resumed_from():
    ti = FakeTI(_rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3], out="/elsewhere"))
    segments = _plan(1).execute({"ti": ti})
    assert [s["trial"]["resume_from"] for s in segments] == [None, None]
    assert all(s["trial"]["previous_budget"] == 0 for s in segments)


def test_a_rung_that_would_pass_max_cost_trains_nothing_and_the_next_plans_nothing():
    xcoms = _rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3], cost=1.0)  # 6 spent; 2 trials x 3 units x 1.0 more
    ti = FakeTI(xcoms)
    assert _plan(1, max_cost=11.9).execute({"ti": ti}) == []
    assert "past max_cost=11.9" in ti.pushed[XCOM_SWEEP]["stopped"]
    ti2 = FakeTI({("s.plan_1", "return_value", -1): [], ("s.plan_1", XCOM_SWEEP, -1): ti.pushed[XCOM_SWEEP]})
    assert _plan(2, max_cost=11.9).execute({"ti": ti2}) == []
    ti3 = FakeTI(xcoms)
    assert len(_plan(1, max_cost=12.0).execute({"ti": ti3})) == 2
    assert ti3.pushed[XCOM_SWEEP] == {"spent": 6.0}


@pytest.mark.parametrize(("mode", "kept"), [("min", ["t1", "t3"]), ("max", ["t0", "t4"])])
def test_the_mode_decides_which_end_is_best(mode, kept):
    plan = _plan(1)
    plan.mode = mode
    segments = plan.execute({"ti": FakeTI(_rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3]))})
    assert [s["trial"]["id"] for s in segments] == kept


def test_a_sweep_already_past_its_budget_stops_even_when_a_chosen_trial_recorded_no_cost():
    xcoms = _rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3], cost=100.0)
    for chosen in (1, 3):  # the two trials that go on recorded no cost
        del xcoms[("s.rung_0", "return_value", chosen)]["cost"]
    ti = FakeTI(xcoms)
    assert _plan(1, max_cost=10).execute({"ti": ti}) == []
    assert "past max_cost=10" in ti.pushed[XCOM_SWEEP]["stopped"]


def test_nothing_priced_stops_a_sweep_with_a_budget_naming_the_price_table():
    ti = FakeTI(_rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3]))
    assert _plan(1, max_cost=10).execute({"ti": ti}) == []
    assert "price table" in ti.pushed[XCOM_SWEEP]["stopped"]


def test_cache_hits_spend_nothing_and_are_priced_from_the_run_they_were_cached_from():
    ti = FakeTI(_rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3], cost=1.0, hits=True))
    assert len(_plan(1, max_cost=6.0).execute({"ti": ti})) == 2  # 0 spent + 2 x 3 x 1.0
    assert ti.pushed[XCOM_SWEEP] == {"spent": 0.0}
    ti = FakeTI(_rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3], cost=1.0, hits=True))
    assert _plan(1, max_cost=5.9).execute({"ti": ti}) == []


def test_a_plan_after_one_that_left_nothing_fails_rather_than_end_the_sweep():
    with pytest.raises(TorchXSweepError, match="'s.plan_0' left no plan"):
        _plan(1).execute({"ti": FakeTI({})})


def test_a_segment_s_own_record_of_its_trial_wins_over_a_plan_changed_since():
    xcoms = _rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3])
    for i in range(6):
        planned = xcoms[("s.plan_0", "return_value", -1)][i]["trial"]
        xcoms[("s.rung_0", "return_value", i)][RESULT_TRIAL] = dict(planned)
    xcoms[("s.plan_0", "return_value", -1)] = list(reversed(xcoms[("s.plan_0", "return_value", -1)]))
    segments = _plan(1).execute({"ti": FakeTI(xcoms)})
    assert [s["trial"]["id"] for s in segments] == ["t1", "t3"]


def test_a_checkpoint_path_is_handed_on_as_checked_without_dot_dot():
    xcoms = _rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3])
    xcoms[("s.rung_0", "return_value", 1)]["artifacts"]["checkpoint"]["path"] = "/out/t1/x/../ckpt.pt"
    xcoms[("s.rung_0", "return_value", 3)]["artifacts"]["checkpoint"]["path"] = "/out/t3/../t0/ckpt.pt"
    segments = _plan(1).execute({"ti": FakeTI(xcoms)})
    assert [s["trial"]["resume_from"] for s in segments] == ["/out/t1/ckpt.pt", None]


# --- pricing before a rung trains, approvals, failed segments' spending, the promotion's rung ---

AT = datetime.datetime(2026, 11, 28, 1, 0, tzinfo=datetime.timezone.utc)
APPROVER = {"id": "7", "name": "approver"}
PARTS = {"component": "utils.python", "component_args": ["--cpu", "{{ trial.cpu }}", "-c", "print(1)"]}


@pytest.fixture
def priced(monkeypatch):
    """The default torchx connection with a price table of 1.0 a CPU hour (and ``approval``'s
    settings when a test sets them), and a fake of Airflow's call that writes an approval request."""
    requests: list[dict] = []
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **request: requests.append(request))

    def connect(**extra):
        conn = {
            "conn_type": "torchx",
            "extra": {"scheduler": "local_cwd", "prices": {"cpu_hour": 1.0}, **extra},
        }
        monkeypatch.setenv("AIRFLOW_CONN_TORCHX_DEFAULT", json.dumps(conn))
        return requests

    return connect


def _priced_plan(rung: int, **kwargs) -> TorchXSweepPlanOperator:
    plan = _plan(rung, unit_duration=3600, app_parts=PARTS, **kwargs)
    plan.trials = [{**t, "cpu": 1 + i % 2} for i, t in enumerate(TRIALS)]  # 1, 2, 1, 2, 1, 2 CPUs
    return plan


def _context(ti, requester=None) -> dict:
    ti.id = "ti-1"
    return {"ti": ti, "dag_run": SimpleNamespace(triggering_user_name=requester)}


def test_the_first_rung_is_priced_from_each_trial_s_request_before_it_trains(priced):
    priced()
    ti = FakeTI({})
    segments = _priced_plan(0, max_cost=9.0).execute(_context(ti))  # 3 x 1 + 3 x 2 CPU hours = 9
    assert len(segments) == 6 and all(s["expected_duration"] == 3600 for s in segments)
    ti = FakeTI({})
    assert _priced_plan(0, max_cost=8.9).execute(_context(ti)) == []
    assert "rung 0 (6 trials to 1) would cost about 9.0000 more" in ti.pushed[XCOM_SWEEP]["stopped"]


def test_a_first_rung_that_cannot_be_priced_fails_before_anything_trains_naming_the_price_table(monkeypatch):
    conn = {"conn_type": "torchx", "extra": {"scheduler": "local_cwd"}}
    monkeypatch.setenv("AIRFLOW_CONN_TORCHX_DEFAULT", json.dumps(conn))
    with pytest.raises(TorchXConfigError, match="needs a price table"):
        _priced_plan(0, max_cost=9.0).execute(_context(FakeTI({})))


def test_trials_whose_segment_recorded_no_cost_are_priced_from_their_request(priced):
    priced()
    ti = FakeTI(_rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3]))  # no cost recorded; t1 (2 CPUs) and t3 (2) go on
    assert _priced_plan(1, max_cost=11.9).execute(_context(ti)) == []  # 2 x 2 CPU x 3 h = 12
    assert "would cost about 12.0000 more" in ti.pushed[XCOM_SWEEP]["stopped"]
    assert (
        len(_priced_plan(1, max_cost=12).execute(_context(FakeTI(_rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3])))))
        == 2
    )


def test_what_a_failed_segment_spent_counts(priced):
    priced()
    xcoms = _rung0([0.5, 0.2, None, 0.1, 0.9, 0.3], cost=1.0)
    del xcoms[("s.rung_0", "return_value", 2)]  # its task failed: no result, what it spent pushed
    xcoms[("s.rung_0", XCOM_SEGMENT_SPENT, 2)] = {"cost": {"actual": {"total": 4.0}}}
    ti = FakeTI(xcoms)
    assert len(_priced_plan(1, max_cost=100).execute(_context(ti))) == 2
    assert ti.pushed[XCOM_SWEEP]["spent"] == 9.0  # 5 x 1.0 + 4.0


def _over(priced_conn, answer=None, asked=None, requester=None):
    """Rung 1 of a sweep that spent 6.0, at 2 x 2 CPUs x 3 h (their request) more, past max_cost=10."""
    ti = FakeTI(_rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3], cost=1.0))
    plan = _priced_plan(1, max_cost=10)
    parked = {} if asked is None else {ASKED_KEY: asked}
    return ti, plan.execute(_context(ti, requester), event=answer, **parked)


def test_a_rung_past_the_budget_asks_the_approvers_and_trains_once_approved(priced):
    requests = priced(cost_approval_timeout=600, cost_approvers=[APPROVER])
    with pytest.raises(TaskAwaitingInput) as parked:
        _over(priced)
    (request,) = requests
    # each at its app's request (2 CPUs x 3 h = 6.0), over what its one-epoch segment recorded (3 x 1.0)
    assert request["subject"].startswith("Approve rung 1 of sweep 's': 2 trials to 3, about 12.0000")
    assert request["assigned_users"] == [APPROVER] and request["defaults"] == ["Reject"]
    assert "t1 (lr=0.03, cpu=2); t3 (lr=0.3, cpu=2)" in request["body"]
    asked = parked.value.kwargs[ASKED_KEY]
    answer = {"chosen_options": ["Approve"], "responded_at": AT, "responded_by_user": APPROVER}
    ti, segments = _over(priced, answer, asked)
    assert [s["trial"]["id"] for s in segments] == ["t1", "t3"]
    (approval,) = ti.pushed[XCOM_SWEEP]["approvals"]
    assert approval["rung"] == 1 and approval["approved_by"] == APPROVER and approval["estimate"] == 18.0
    assert "stopped" not in ti.pushed[XCOM_SWEEP]


@pytest.mark.parametrize(
    ("answer", "changed", "why"),
    [
        (
            {"chosen_options": ["Reject"], "responded_at": AT, "responded_by_user": APPROVER},
            False,
            "rejected it",
        ),
        ({"error_type": "timeout"}, False, "no approver answered within 600 s"),
        (
            {"chosen_options": ["Approve"], "responded_at": AT, "responded_by_user": APPROVER},
            True,
            "the rung changed",
        ),
        (
            {
                "chosen_options": ["Approve"],
                "responded_at": AT,
                "responded_by_user": {"id": "9", "name": "me"},
            },
            False,
            "they triggered this DAG run",
        ),
    ],
)
def test_a_rung_not_approved_stops_the_sweep_saying_why(priced, answer, changed, why):
    priced(cost_approval_timeout=600)
    with pytest.raises(TaskAwaitingInput) as parked:
        _over(priced, requester="me")
    asked = dict(parked.value.kwargs[ASKED_KEY])
    if changed:  # approved for other segments than the plan would train now
        asked["rung_fingerprint"] = "sha256:" + "0" * 64
    ti, segments = _over(priced, answer, asked, requester="me")
    assert segments == []
    assert why in ti.pushed[XCOM_SWEEP]["stopped"] and "past max_cost=10" in ti.pushed[XCOM_SWEEP]["stopped"]


class PromoteTI(FakeTI):
    dag_id, run_id = "d", "r"

    def get_ti_count(self, dag_id, task_ids, run_ids):
        return sum(
            1 for (task, key, i) in self.xcoms if task == task_ids[0] and key == "return_value" and i >= 0
        )


@pytest.mark.parametrize(
    ("top", "promoted"),
    [
        ({"state": "SUCCEEDED", "metrics": {"loss": 0.1}}, "s.rung_2"),
        ({"state": "SUCCEEDED", "metrics": {}}, "s.rung_1"),  # the top rung logged no objective
        ({"state": "FAILED", "metrics": {"loss": 0.1}}, "s.rung_1"),
    ],
)
def test_promote_takes_the_highest_rung_whose_segment_recorded_the_objective(monkeypatch, top, promoted):
    xcoms = {("s.rung_1", "return_value", 0): {"state": "SUCCEEDED", "metrics": {"loss": 0.2}}}
    xcoms[("s.rung_2", "return_value", 0)] = top
    monkeypatch.setattr(TorchXPromoteOperator, "execute", lambda self, context: {"runs_of": self.runs_of})
    promote = TorchXSweepPromoteOperator(
        task_id="promote",
        segment_task_ids=["s.rung_0", "s.rung_1", "s.rung_2"],
        objective="loss",
        mode="min",
        artifact="model",
        asset=Asset("model://x"),
    )
    assert promote.execute({"ti": PromoteTI(xcoms)}) == {"runs_of": promoted}


def test_promote_skips_when_no_segment_recorded_the_objective(monkeypatch):
    promote = TorchXSweepPromoteOperator(
        task_id="promote",
        segment_task_ids=["s.rung_0"],
        objective="loss",
        mode="min",
        artifact="model",
        asset=Asset("model://x"),
    )
    with pytest.raises(AirflowSkipException, match="nothing is promoted"):
        promote.execute({"ti": PromoteTI({})})


def test_what_a_segment_spent_counts_its_earlier_attempts():
    result = {
        "cost": {"actual": {"total": 1.0}},
        "attempts": [{"app_handle": "a", "cost": {"actual": {"total": 5.0}}}, {"app_handle": "b"}],
    }
    assert spent_total(result) == 6.0
    assert spent_total({"cost": 0.0, "cache_hit": True}) == 0.0
    assert spent_total({"state": "SUCCEEDED"}) is None


def test_a_segment_that_recorded_no_cost_at_all_counts_at_its_estimate(priced):
    priced()
    xcoms = _rung0([0.5, 0.2, None, 0.1, 0.9, 0.3], cost=1.0)
    del xcoms[("s.rung_0", "return_value", 2)]  # its task timed out before it saw its job end
    ti = FakeTI(xcoms)
    assert len(_priced_plan(1, max_cost=100).execute(_context(ti))) == 2
    assert ti.pushed[XCOM_SWEEP]["spent"] == 6.0  # 5 x 1.0 + t2's 1 CPU for one 3600 s epoch


def test_a_job_that_recorded_a_low_cost_is_priced_at_no_less_than_its_app_requests(priced):
    priced()
    ti = FakeTI(_rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3], cost=0.001))  # ended early, almost free
    assert _priced_plan(1, max_cost=12.0).execute(_context(ti)) == []  # 0.006 + 2 x 2 CPU x 3 h > 12
    assert "would cost about 12.0000 more" in ti.pushed[XCOM_SWEEP]["stopped"]


@pytest.mark.parametrize(
    "change",
    [
        lambda plan: plan.trials.__setitem__(1, {**plan.trials[1], "lr": 3e-5}),  # the search space
        lambda plan: plan.app_parts.__setitem__("component_args", ["--cpu", "64", "-c", "print(1)"]),
        lambda plan: setattr(plan, "unit_duration", 60),
    ],
)
def test_an_approval_binds_what_the_rung_trains_and_how_it_was_priced(priced, change):
    priced(cost_approval_timeout=600)
    xcoms = _rung0([0.5, 0.2, 0.4, 0.1, 0.9, 0.3], cost=1.0)
    plan = _priced_plan(1, max_cost=10)
    with pytest.raises(TaskAwaitingInput) as parked:
        plan.execute(_context(FakeTI(xcoms)))
    asked = parked.value.kwargs[ASKED_KEY]
    answer = {"chosen_options": ["Approve"], "responded_at": AT, "responded_by_user": APPROVER}
    again = _priced_plan(1, max_cost=10)  # the DAG parsed again, changed
    change(again)
    ti = FakeTI(xcoms)
    segments = again.execute(_context(ti), event=answer, **{ASKED_KEY: asked})
    assert segments == [] and "the approval was refused" in ti.pushed[XCOM_SWEEP]["stopped"]
    unchanged = _priced_plan(1, max_cost=10).execute(
        _context(FakeTI(xcoms)), event=answer, **{ASKED_KEY: asked}
    )
    assert len(unchanged) == 2
