"""A Hyperband bracket's plans: its first rung trains the configurations it drew, named by bracket,
priced (with ``max_cost``) from their requests against the bracket's share; its next rungs continue as
any sweep's. And the promotion, comparing every bracket at one budget. Airflow's XCom is stood in for
(tests/unit/sweeps/test_plan.py's fakes)."""

from __future__ import annotations

import json

import pytest
from airflow.sdk import Asset

from tests.unit.sweeps.test_plan import FakeTI, PromoteTI
from torchx_airflow.lineage.keys import XCOM_LINEAGE_PARENTS, XCOM_RUN_ID, XCOM_SUBMITTED_APP
from torchx_airflow.operators.promote import TorchXPromoteOperator
from torchx_airflow.sweeps.hyperband import TorchXHyperbandPlanOperator
from torchx_airflow.sweeps.tasks import RESULT_TRIAL, XCOM_SWEEP, TorchXSweepPromoteOperator, best_task

TRIALS = [{"lr": lr, "cpu": 1 + i % 2} for i, lr in enumerate((0.01, 0.03, 0.1, 0.3, 1.0, 3.0))]
PARTS = {"component": "utils.python", "component_args": ["--cpu", "{{ trial.cpu }}", "-c", "print(1)"]}


def _plan(rung: int, bracket: int = 1, **kwargs) -> TorchXHyperbandPlanOperator:
    budgets = [1, 3, 9][2 - bracket :]
    return TorchXHyperbandPlanOperator(
        task_id=f"plan_{rung}",
        bracket=bracket,
        first_trials=[1, 2, 4],
        rung=rung,
        budgets=budgets,
        trials=TRIALS,
        objective="loss",
        mode="min",
        reduction_factor=3,
        segment_task_ids=[f"s.b{bracket}.rung_{k}" for k in range(len(budgets))],
        plan_task_ids=[f"s.b{bracket}.plan_{k}" for k in range(len(budgets))],
        **kwargs,
    )


def test_a_brackets_first_rung_trains_its_draw_at_its_own_budget_named_by_bracket():
    ti = FakeTI({})
    segments = _plan(0).execute({"ti": ti})
    assert [s["trial"]["id"] for s in segments] == ["b1-t1", "b1-t2", "b1-t4"]
    first = segments[0]["trial"]
    assert first["bracket"] == 1 and first["budget"] == 3 and first["rung"] == 0
    assert first["previous_budget"] == 0 and first["resume_from"] is None and first["params"] == TRIALS[1]
    assert ti.pushed[XCOM_SWEEP] == {"spent": 0.0}
    assert ti.pushed[XCOM_LINEAGE_PARENTS] == {"s.b1.rung_0": [None] * 3}


def test_a_brackets_next_rung_continues_its_own_best_from_its_own_checkpoints():
    first = _plan(0).execute({"ti": FakeTI({})})
    xcoms: dict = {
        ("s.b1.plan_0", "return_value", -1): first,
        ("s.b1.plan_0", XCOM_SWEEP, -1): {"spent": 0.0},
    }
    for i, (segment, loss) in enumerate(zip(first, [0.5, 0.2, 0.4], strict=True)):
        trial = segment["trial"]
        xcoms[("s.b1.rung_0", "return_value", i)] = {
            "app_handle": f"local_cwd://torchx/seg-{i}",
            "state": "SUCCEEDED",
            "metrics": {"loss": loss},
            "artifacts": {"checkpoint": {"path": f"/out/{trial['id']}/r0/ckpt.pt"}},
            RESULT_TRIAL: {
                k: trial[k] for k in ("id", "index", "params", "budget", "rung", "previous_budget")
            },
        }
        xcoms[("s.b1.rung_0", XCOM_RUN_ID, i)] = f"run-{i}"
        xcoms[("s.b1.rung_0", XCOM_SUBMITTED_APP, i)] = {"output_roots": [f"/out/{trial['id']}"]}
    (segment,) = _plan(1).execute({"ti": FakeTI(xcoms)})
    trial = segment["trial"]
    assert (trial["id"], trial["bracket"], trial["budget"], trial["previous_budget"]) == ("b1-t2", 1, 9, 3)
    assert trial["resume_from"] == "/out/b1-t2/r0/ckpt.pt" and trial["source"] == "run-1"


def test_a_brackets_first_rung_is_priced_from_its_own_draws_requests_against_its_share(monkeypatch):
    conn = {"conn_type": "torchx", "extra": {"scheduler": "local_cwd", "prices": {"cpu_hour": 1.0}}}
    monkeypatch.setenv("AIRFLOW_CONN_TORCHX_DEFAULT", json.dumps(conn))
    # t1 (2 CPUs), t2 (1), t4 (1), 3 hours each (unit_duration 3600 s x budget 3): 12 CPU hours
    plan = _plan(0, max_cost=12.0, sweep_max_cost=40.0, unit_duration=3600, app_parts=PARTS)
    segments = plan.execute({"ti": FakeTI({})})
    assert [s["trial"]["id"] for s in segments] == ["b1-t1", "b1-t2", "b1-t4"]
    assert all(s["expected_duration"] == 3 * 3600 for s in segments)
    ti = FakeTI({})
    plan = _plan(0, max_cost=11.9, sweep_max_cost=40.0, unit_duration=3600, app_parts=PARTS)
    assert plan.execute({"ti": ti}) == []
    assert (
        "rung 0 (3 trials to 3) would cost about 12.0000 more, past max_cost=11.9"
        in ti.pushed[XCOM_SWEEP]["stopped"]
    )


def _result(state: str, loss: float | None) -> dict:
    return {
        "app_handle": "local_cwd://torchx/x",
        "state": state,
        "metrics": {} if loss is None else {"loss": loss},
    }


@pytest.mark.parametrize(("mode", "winner"), [("min", "s.b1.rung_1"), ("max", "s.b2.rung_2")])
def test_the_best_task_of_one_budget_is_chosen_by_the_workers_record(mode, winner):
    results = {
        "s.b2.rung_2": [_result("SUCCEEDED", 0.25)],
        "s.b1.rung_1": [_result("FAILED", 0.01), _result("SUCCEEDED", 0.12)],
        "s.b0.rung_0": [_result("SUCCEEDED", 0.15), _result("SUCCEEDED", None)],
    }
    assert best_task(results, "loss", mode) == winner


def test_a_tie_goes_to_the_earlier_bracket_and_no_value_is_no_choice():
    tie = {"s.b2.rung_2": [_result("SUCCEEDED", 0.12)], "s.b1.rung_1": [_result("SUCCEEDED", 0.12)]}
    assert best_task(tie, "loss", "min") == "s.b2.rung_2"
    unvalued = {"s.b1.rung_1": [_result("FAILED", 0.1)], "s.b0.rung_0": [_result("SUCCEEDED", None), None]}
    assert best_task(unvalued, "loss", "min") is None


@pytest.mark.parametrize(
    ("at_nine", "promoted"),
    [
        ({"s.b2.rung_2": 0.25, "s.b1.rung_1": 0.12, "s.b0.rung_0": 0.15}, "s.b1.rung_1"),
        ({"s.b0.rung_0": 0.3}, "s.b0.rung_0"),  # never b2's 0.01 at 3: another budget
        ({}, "s.b2.rung_1"),  # nothing reached 9: the best at 3, across brackets
    ],
)
def test_promote_compares_every_bracket_at_the_highest_budget_reached(monkeypatch, at_nine, promoted):
    xcoms = {
        ("s.b2.rung_0", "return_value", 0): _result("SUCCEEDED", 0.001),
        ("s.b2.rung_1", "return_value", 0): _result("SUCCEEDED", 0.01),
        ("s.b1.rung_0", "return_value", 0): _result("SUCCEEDED", 0.02),
    }
    xcoms.update({(task, "return_value", 0): _result("SUCCEEDED", loss) for task, loss in at_nine.items()})
    monkeypatch.setattr(TorchXPromoteOperator, "execute", lambda self, context: {"runs_of": self.runs_of})
    promote = TorchXSweepPromoteOperator(
        task_id="promote",
        segment_task_ids=[
            "s.b2.rung_0",
            "s.b2.rung_1",
            "s.b2.rung_2",
            "s.b1.rung_0",
            "s.b1.rung_1",
            "s.b0.rung_0",
        ],
        segment_budgets=[1, 3, 9, 3, 9, 9],
        objective="loss",
        mode="min",
        artifact="model",
        asset=Asset("model://x"),
    )
    assert promote.execute({"ti": PromoteTI(xcoms)}) == {"runs_of": promoted}
