"""A sweep's budget arguments are checked when the DAG is parsed, naming the value and the fix."""

from __future__ import annotations

import math
from datetime import timedelta

import pendulum
import pytest
from airflow.sdk import DAG

from torchx_airflow.exceptions import TorchXInputError
from torchx_airflow.sweeps import torchx_sweep

BASE = {
    "search_space": {"lr": [0.1, 0.3, 1.0]},
    "objective": "loss",
    "max_budget": 3,
    "component": "utils.echo",
}


def _sweep(**kwargs):
    with DAG("d", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
        return torchx_sweep(sweep_id="s", **{**BASE, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"max_cost": 10}, "max_cost=10 needs unit_duration"),
        ({"max_cost": math.inf, "unit_duration": 60}, "max_cost=inf must be a positive finite number"),
        ({"max_cost": 10, "unit_duration": math.nan}, "unit_duration=nan must be positive seconds"),
        ({"max_cost": 10, "unit_duration": 0}, "unit_duration=0 must be positive seconds"),
        ({"expected_duration": 60}, "pass the sweep's own .* unit_duration"),
    ],
)
def test_bad_budget_arguments_fail_when_the_dag_is_parsed(kwargs, named):
    with pytest.raises(TorchXInputError, match=named):
        _sweep(**kwargs)


def test_the_plans_price_with_unit_duration_and_the_segments_app():
    group = _sweep(
        max_cost=10, unit_duration=timedelta(minutes=10), component_args=["--msg", "{{ trial.lr }}"]
    )
    plan = group.children["s.plan_1"]
    assert plan.unit_duration == 600 and plan.max_cost == 10
    assert plan.app_parts == {"component": "utils.echo", "component_args": ["--msg", "{{ trial.lr }}"]}


def test_the_sweep_s_retries_are_its_plans_and_promote_s_too():
    from airflow.sdk import Asset

    group = _sweep(retries=2, promote_to=Asset("model://x"))
    assert {
        t.task_id: t.retries for t in group.children.values() if not t.task_id.endswith(("rung_0", "rung_1"))
    } == {
        "s.plan_0": 2,
        "s.plan_1": 2,
        "s.promote": 2,
    }
