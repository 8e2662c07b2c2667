"""The arithmetic of a sweep: its trials, rungs and the choice at each rung."""

from __future__ import annotations

import math
import random

import pytest

from torchx_airflow.exceptions import TorchXInputError
from torchx_airflow.sweeps.halving import choose, expand_space, rung_budgets, survivors


def test_the_search_space_expands_in_order_the_first_parameter_slowest():
    trials = expand_space({"lr": [0.1, 0.2], "width": [8, 16, 32]}, "w")
    assert trials[:4] == [
        {"lr": 0.1, "width": 8},
        {"lr": 0.1, "width": 16},
        {"lr": 0.1, "width": 32},
        {"lr": 0.2, "width": 8},
    ]
    assert len(trials) == 6


@pytest.mark.parametrize(
    ("space", "named"),
    [
        ({}, "search_space={}"),
        ({"budget": [1]}, "'budget'"),
        ({"lr": []}, "search_space['lr']"),
        ({"lr": "0.1"}, "search_space['lr']"),
        ({"lr": [object]}, "search_space['lr'] holds"),
        ({"learning-rate": [1]}, "'learning-rate'"),
    ],
)
def test_a_bad_search_space_is_refused_naming_the_value(space, named):
    with pytest.raises(TorchXInputError, match=named.replace("[", r"\[").replace("]", r"\]")):
        expand_space(space, "torchx_sweep 's'")


def test_rungs_go_from_min_to_max_budget_by_the_reduction_factor():
    assert rung_budgets("successive_halving", 1, 9, 3, "w") == [1, 3, 9]
    assert rung_budgets("successive_halving", 2, 16, 2, "w") == [2, 4, 8, 16]
    assert rung_budgets("successive_halving", 0.5, 4.5, 3, "w") == [0.5, 1.5, 4.5]
    assert rung_budgets("grid", 1, 9, 3, "w") == [9]
    assert rung_budgets("successive_halving", 9, 9, 3, "w") == [9]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("successive_halving", 1, 10, 3), "Set max_budget to 9 or 27"),
        (("successive_halving", 0, 9, 3), "min_budget=0"),
        (("successive_halving", 1, 9, 1), "reduction_factor=1"),
        (("hyperopt", 1, 9, 3), "algorithm='hyperopt'"),
    ],
)
def test_bad_budgets_are_refused_naming_the_fix(args, named):
    with pytest.raises(TorchXInputError, match=named):
        rung_budgets(*args, "w")


def test_a_rung_keeps_a_reduction_factor_th_and_at_least_one():
    assert [survivors(n, 3) for n in (27, 9, 3, 2, 1)] == [9, 3, 1, 1, 1]


def test_the_choice_keeps_the_best_ties_to_the_earliest_and_drops_what_is_no_finite_number():
    values = [(0, 0.5), (1, 0.2), (2, None), (3, math.nan), (4, 0.2), (5, True), (6, 0.1), (7, "0.0")]
    assert choose(values, 3, "min") == [6, 1, 4]
    assert choose(values, 2, "max") == [0, 1]
    assert choose(values, 10, "min") == [6, 1, 4, 0]
    assert choose([], 3, "min") == []


def test_the_choice_agrees_with_a_full_sort_on_many_trials():
    rng = random.Random(7)
    values = [(i, round(rng.random(), 2)) for i in range(10_000)]  # many ties
    expected = [i for _, i in sorted((v, i) for i, v in values)[:3333]]
    assert choose(values, 3333, "min") == expected
