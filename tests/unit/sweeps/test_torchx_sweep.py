"""The task group ``torchx_sweep(...)`` builds (its tasks, their order, what each plan is given) and
the arguments it refuses when the DAG is parsed. Built in a DAG object, nothing run."""

from __future__ import annotations

import pendulum
import pytest
from airflow.sdk import DAG, Asset

from torchx_airflow.exceptions import TorchXInputError
from torchx_airflow.sweeps import torchx_sweep

SPACE = {"lr": [0.01, 0.03, 0.1], "depth": [1, 2, 3]}


def _dag(**kwargs) -> DAG:
    args = {
        "sweep_id": "sweep",
        "component": "utils.echo",
        "search_space": SPACE,
        "objective": "loss",
        "max_budget": 9,
        "promote_to": Asset("model://test/best"),
        **kwargs,
    }
    with DAG("tx_shape", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        torchx_sweep(**args)
    return dag


def _edges(dag: DAG) -> dict[str, list[str]]:
    return {task.task_id: sorted(task.upstream_task_ids) for task in dag.tasks}


def test_hyperband_builds_one_chain_per_bracket_side_by_side_and_one_promotion():
    dag = _dag(algorithm="hyperband")
    assert _edges(dag) == {
        "sweep.b2.plan_0": [],
        "sweep.b2.rung_0": ["sweep.b2.plan_0"],
        "sweep.b2.plan_1": ["sweep.b2.rung_0"],
        "sweep.b2.rung_1": ["sweep.b2.plan_1"],
        "sweep.b2.plan_2": ["sweep.b2.rung_1"],
        "sweep.b2.rung_2": ["sweep.b2.plan_2"],
        "sweep.b1.plan_0": [],
        "sweep.b1.rung_0": ["sweep.b1.plan_0"],
        "sweep.b1.plan_1": ["sweep.b1.rung_0"],
        "sweep.b1.rung_1": ["sweep.b1.plan_1"],
        "sweep.b0.plan_0": [],
        "sweep.b0.rung_0": ["sweep.b0.plan_0"],
        "sweep.promote": ["sweep.b0.rung_0", "sweep.b1.rung_1", "sweep.b2.rung_2"],
    }
    b1 = dag.get_task("sweep.b1.plan_1")
    assert (b1.bracket, b1.budgets, b1.first_trials) == (1, [3, 9], [0, 3, 4, 5, 8])
    assert b1.plan_task_ids == ["sweep.b1.plan_0", "sweep.b1.plan_1"]
    assert b1.segment_task_ids == ["sweep.b1.rung_0", "sweep.b1.rung_1"]
    assert b1.max_cost is None
    promote = dag.get_task("sweep.promote")
    assert promote.segment_task_ids == [
        "sweep.b2.rung_0",
        "sweep.b2.rung_1",
        "sweep.b2.rung_2",
        "sweep.b1.rung_0",
        "sweep.b1.rung_1",
        "sweep.b0.rung_0",
    ]
    assert promote.segment_budgets == [1, 3, 9, 3, 9, 9]


def test_with_max_cost_each_bracket_spends_within_its_share_side_by_side():
    dag = _dag(algorithm="hyperband", max_cost=78.0, unit_duration=60)
    assert _edges(dag) == _edges(_dag(algorithm="hyperband"))  # no bracket waits for another
    shares = {s: dag.get_task(f"sweep.b{s}.plan_0").max_cost for s in (2, 1, 0)}
    assert shares == pytest.approx({2: 27.0, 1: 24.0, 0: 27.0})
    plan = dag.get_task("sweep.b2.plan_1")
    assert plan.max_cost == pytest.approx(27.0) and plan.sweep_max_cost == 78.0
    assert plan.unit_duration == 60 and plan.app_parts == {"component": "utils.echo"}


def test_successive_halving_keeps_its_shape():
    dag = _dag()
    assert _edges(dag) == {
        "sweep.plan_0": [],
        "sweep.rung_0": ["sweep.plan_0"],
        "sweep.plan_1": ["sweep.rung_0"],
        "sweep.rung_1": ["sweep.plan_1"],
        "sweep.plan_2": ["sweep.rung_1"],
        "sweep.rung_2": ["sweep.plan_2"],
        "sweep.promote": ["sweep.rung_2"],
    }
    assert dag.get_task("sweep.promote").segment_budgets == [1, 3, 9]
    assert _edges(_dag(algorithm="grid")) == {
        "sweep.plan_0": [],
        "sweep.rung_0": ["sweep.plan_0"],
        "sweep.promote": ["sweep.rung_0"],
    }


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"algorithm": "hyperband", "seed": "7"}, "seed='7' must be an integer"),
        ({"algorithm": "hyperband", "seed": True}, "seed=True"),
        (
            {"algorithm": "Hyperband"},
            r"algorithm='Hyperband' is not one of \['successive_halving', 'grid', 'hyperband'\]",
        ),
        ({"algorithm": "hyperband", "max_budget": 10}, "Set max_budget to 9 or 27"),
        (
            {"algorithm": "hyperband", "search_space": {"bracket": [1, 2]}},
            "'bracket' must be a Python identifier",
        ),
        ({"algorithm": "hyperband", "max_cost": 0}, "max_cost=0 must be a positive finite number"),
        ({"algorithm": "hyperband", "max_cost": 10}, "max_cost=10 needs unit_duration"),
    ],
)
def test_bad_arguments_are_refused_when_the_dag_is_parsed_naming_the_value(kwargs, named):
    with pytest.raises(TorchXInputError, match=named):
        _dag(**kwargs)
