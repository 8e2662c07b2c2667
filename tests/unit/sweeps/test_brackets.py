"""Hyperband's arithmetic: its brackets' sizes (Li et al. 2018), which configurations each draws from
a finite grid, and each bracket's share of ``max_cost``."""

from __future__ import annotations

import itertools

import pytest

from torchx_airflow.exceptions import TorchXInputError
from torchx_airflow.sweeps.halving import (
    cost_shares,
    hyperband_brackets,
    hyperband_sizes,
    rung_budgets,
    seeded_order,
)


def test_bracket_sizes_are_hyperbands():
    assert hyperband_sizes(2, 3) == [9, 5, 3]
    assert hyperband_sizes(4, 3) == [81, 34, 15, 8, 5]  # the paper's R=81, eta=3
    assert hyperband_sizes(3, 2) == [8, 6, 4, 4]
    assert hyperband_sizes(0, 3) == [1]


def test_brackets_start_each_rung_of_the_ladder_and_halve_to_max_budget():
    ladder = rung_budgets("hyperband", 1, 9, 3, "w")
    assert ladder == [1, 3, 9]
    brackets = hyperband_brackets(17, ladder, 3, seed=0)
    assert [(b.s, b.budgets, b.counts) for b in brackets] == [
        (2, (1, 3, 9), [9, 3, 1]),
        (1, (3, 9), [5, 1]),
        (0, (9,), [3]),
    ]
    assert [b.units for b in brackets] == [27.0, 24.0, 27.0]


@pytest.mark.parametrize("count", [17, 27, 100])
def test_a_grid_at_least_as_large_as_hyperbands_sizes_puts_each_configuration_in_exactly_one_bracket(count):
    brackets = hyperband_brackets(count, [1, 3, 9], 3, seed=0)
    drawn = [i for b in brackets for i in b.trials]
    assert sorted(drawn) == list(range(count))
    sizes = [len(b.trials) for b in brackets]
    assert sum(sizes) == count and all(size >= n for size, n in zip(sizes, [9, 5, 3], strict=True))
    for size, n in zip(sizes, [9, 5, 3], strict=True):  # in Hyperband's proportions, to one
        assert abs(size - n * count / 17) < 1


def test_a_smaller_grid_gives_each_bracket_hyperbands_size_and_every_configuration_a_bracket():
    brackets = hyperband_brackets(9, [1, 3, 9], 3, seed=0)
    assert [len(b.trials) for b in brackets] == [9, 5, 3]
    assert all(len(set(b.trials)) == len(b.trials) for b in brackets)  # none twice in a bracket
    assert set(brackets[1].trials).isdisjoint(brackets[2].trials)  # taken in turn round one order
    tiny = hyperband_brackets(2, [1, 3, 9], 3, seed=0)
    assert [sorted(b.trials) for b in tiny] == [[0, 1], [0, 1], [0, 1]]


def test_the_draw_is_the_seeds_on_every_machine_and_another_seed_draws_otherwise():
    # pinned: the order rests on random.Random(seed).random() alone, which Python keeps the same
    assert [b.trials for b in hyperband_brackets(9, [1, 3, 9], 3, seed=0)] == [
        tuple(range(9)),
        (0, 3, 4, 5, 8),
        (1, 2, 6),
    ]
    assert seeded_order(10, 7) == [2, 7, 4, 6, 8, 9, 0, 5, 1, 3]
    assert hyperband_brackets(27, [1, 3, 9], 3, seed=0) == hyperband_brackets(27, [1, 3, 9], 3, seed=0)
    assert hyperband_brackets(27, [1, 3, 9], 3, seed=1) != hyperband_brackets(27, [1, 3, 9], 3, seed=0)
    assert sorted(seeded_order(1000, 5)) == list(range(1000))


def test_a_large_grid_on_a_long_ladder():
    ladder = rung_budgets("hyperband", 1, 81, 3, "w")
    brackets = hyperband_brackets(1000, ladder, 3, seed=0)
    assert [b.s for b in brackets] == [4, 3, 2, 1, 0]
    assert [len(b.trials) for b in brackets] == [566, 238, 105, 56, 35]
    assert sorted(itertools.chain.from_iterable(b.trials for b in brackets)) == list(range(1000))
    assert brackets[0].counts == [566, 188, 62, 20, 6]


def test_one_rung_is_one_bracket_every_configuration_at_max_budget():
    (bracket,) = hyperband_brackets(5, rung_budgets("hyperband", 9, 9, 3, "w"), 3, seed=0)
    assert bracket.s == 0 and bracket.trials == (0, 1, 2, 3, 4) and bracket.budgets == (9,)


def test_each_bracket_spends_within_a_share_of_max_cost_in_proportion_to_what_it_trains():
    brackets = hyperband_brackets(9, [1, 3, 9], 3, seed=0)
    shares = cost_shares(brackets, 78.0)
    assert shares == pytest.approx([27.0, 24.0, 27.0])
    assert sum(cost_shares(brackets, 10.0)) == pytest.approx(10.0)


def test_hyperband_refuses_a_max_budget_off_its_ladder_naming_the_fix():
    with pytest.raises(TorchXInputError, match="Set max_budget to 9 or 27"):
        rung_budgets("hyperband", 1, 10, 3, "w")
