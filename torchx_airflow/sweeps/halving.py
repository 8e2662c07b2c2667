"""The arithmetic of a sweep: its trials, its rungs and the choice at each rung (no Airflow here).

Successive halving trains every trial for ``min_budget``, keeps the best ``1 / reduction_factor`` of
them, trains those up to ``min_budget * reduction_factor``, and so on up to ``max_budget``: with 27
trials and rungs at 1, 3 and 9 epochs, 27 segments of 1 epoch, 9 that continue to 3, 3 to 9. ``grid``
is the baseline: every trial at ``max_budget``, in one rung. ``hyperband`` runs brackets of
successive halving side by side, each starting at a different rung of the same ladder
(``hyperband_brackets``).

A choice rests only on the values given (what the worker recorded when each segment ended): a trial
whose value is missing or not a finite number is dropped (its segment failed, or it logged no
objective), never an error for the others; ties go to the earliest trial.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torchx_airflow.exceptions import TorchXInputError
from torchx_airflow.lineage.metrics import as_metric

ALGORITHMS = ("successive_halving", "grid", "hyperband")
#: names a trial's template offers besides its parameters
RESERVED = frozenset(
    {"id", "index", "params", "budget", "rung", "previous_budget", "resume_from", "source", "bracket"}
)
#: trials a sweep may have (a search space's product)
MAX_TRIALS = 100_000


def expand_space(search_space: Mapping[str, Sequence[Any]], where: str) -> list[dict[str, Any]]:
    """Every combination of the search space, the first parameter varying slowest, in the order given."""
    if not isinstance(search_space, Mapping) or not search_space:
        raise TorchXInputError(
            f"{where}: search_space={search_space!r} must be a dict of parameter name -> list of values, "
            'e.g. search_space={"lr": [0.01, 0.1], "width": [8, 16]}.'
        )
    for name, values in search_space.items():
        if not isinstance(name, str) or not name.isidentifier() or name in RESERVED:
            raise TorchXInputError(
                f"{where}: search_space parameter {name!r} must be a Python identifier other than "
                f"{sorted(RESERVED)} (it is read as {{{{ trial.<name> }}}}). Rename it."
            )
        if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            raise TorchXInputError(
                f"{where}: search_space[{name!r}]={values!r} must be a non-empty list of values, e.g. "
                f"[0.01, 0.03, 0.1]."
            )
        for value in values:
            if not (value is None or isinstance(value, str | int | float | bool)):
                raise TorchXInputError(
                    f"{where}: search_space[{name!r}] holds {value!r}: values are strings, numbers, "
                    "booleans or None (they go into XCom and the job's TORCHX_AIRFLOW_TRIAL as JSON)."
                )
    count = math.prod(len(values) for values in search_space.values())
    if count > MAX_TRIALS:
        raise TorchXInputError(f"{where}: the search space has {count} trials, more than {MAX_TRIALS}.")
    names = list(search_space)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*search_space.values())]


def rung_budgets(
    algorithm: str, min_budget: float, max_budget: float, reduction_factor: int, where: str
) -> list[float]:
    """The budget each rung trains up to: ``min_budget * reduction_factor ** k`` up to ``max_budget``
    (successive halving), or ``[max_budget]`` (grid)."""
    if algorithm not in ALGORITHMS:
        raise TorchXInputError(f"{where}: algorithm={algorithm!r} is not one of {list(ALGORITHMS)}.")
    for name, value in (("min_budget", min_budget), ("max_budget", max_budget)):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise TorchXInputError(f"{where}: {name}={value!r} must be a positive number (epochs, steps...).")
    if isinstance(reduction_factor, bool) or not isinstance(reduction_factor, int) or reduction_factor < 2:
        raise TorchXInputError(
            f"{where}: reduction_factor={reduction_factor!r} must be an integer of 2 or more."
        )
    if algorithm == "grid":
        return [max_budget]  # hyperband: the ladder its brackets start on
    budgets = [min_budget]
    while budgets[-1] * reduction_factor <= max_budget * (1 + 1e-9):
        budgets.append(budgets[-1] * reduction_factor)
    if not math.isclose(budgets[-1], max_budget):
        raise TorchXInputError(
            f"{where}: max_budget={max_budget!r} is not min_budget={min_budget!r} times a power of "
            f"reduction_factor={reduction_factor}: the rungs would be {budgets} and stop short of it. "
            f"Set max_budget to {budgets[-1]:g} or {budgets[-1] * reduction_factor:g}."
        )
    return [int(b) if float(b).is_integer() else b for b in budgets]


def survivors(count: int, reduction_factor: int) -> int:
    """How many of ``count`` trials a rung passes on: ``count // reduction_factor``, at least one."""
    return max(1, count // reduction_factor)


def choose(values: Sequence[tuple[int, Any]], keep: int, mode: str) -> list[int]:
    """The ``keep`` best trial indexes of ``(trial index, value)`` pairs, best first: smallest values
    for ``mode="min"``, largest for ``"max"``; a value that is not a finite number drops its trial;
    ties go to the earliest trial. One sort (faster than a bounded heap at a third kept: make bench)."""
    sign = 1.0 if mode == "min" else -1.0
    ranked = sorted(
        (sign * number, index) for index, value in values if (number := as_metric(value)) is not None
    )
    return [index for _, index in ranked[:keep]]


@dataclass(frozen=True)
class Bracket:
    """One bracket of a Hyperband sweep: successive halving over ``trials`` (configuration indexes,
    in grid order) on ``budgets``, the top of the ladder from ``max_budget * reduction_factor ** -s``."""

    s: int
    budgets: tuple[float, ...]
    trials: tuple[int, ...]
    reduction_factor: int

    @property
    def counts(self) -> list[int]:
        """How many trials each of its rungs trains (at most: a failed segment drops its trial)."""
        counts = [len(self.trials)]
        for _ in self.budgets[1:]:
            counts.append(survivors(counts[-1], self.reduction_factor))
        return counts

    @property
    def units(self) -> float:
        """What its rungs train in units of budget, each segment priced as if it started over (as a
        plan prices a rung): its share of the sweep's ``max_cost`` is in proportion to it."""
        return sum(count * float(budget) for count, budget in zip(self.counts, self.budgets, strict=True))


def hyperband_sizes(s_max: int, reduction_factor: int) -> list[int]:
    """Hyperband's first-rung sizes (Li et al. 2018), bracket ``s = s_max`` down to 0:
    ``ceil((s_max + 1) / (s + 1) * reduction_factor ** s)``, in integers."""
    return [-(-(s_max + 1) * reduction_factor**s // (s + 1)) for s in range(s_max, -1, -1)]


def seeded_order(count: int, seed: int) -> list[int]:
    """``range(count)`` in an order drawn from ``seed``: the same on every Python and machine (a
    Fisher-Yates shuffle on ``random.Random(seed).random()``, the one sequence Python keeps the same
    across versions; ``shuffle`` itself may change), so a rerun draws the same brackets."""
    rng = random.Random(seed)  # noqa: S311 (a reproducible draw, no secret)
    order = list(range(count))
    for i in range(count - 1, 0, -1):
        j = int(rng.random() * (i + 1))
        order[i], order[j] = order[j], order[i]
    return order


def _scaled(sizes: Sequence[int], total: int) -> list[int]:
    """``sizes`` scaled up to sum to ``total`` (largest remainder; a tie to the earlier bracket)."""
    whole = sum(sizes)
    scaled = [size * total // whole for size in sizes]
    by_remainder = sorted(range(len(sizes)), key=lambda i: (-(sizes[i] * total % whole), i))
    for i in by_remainder[: total - sum(scaled)]:
        scaled[i] += 1
    return scaled


def hyperband_brackets(
    trial_count: int, ladder: Sequence[float], reduction_factor: int, seed: int
) -> list[Bracket]:
    """The brackets of a Hyperband sweep over ``trial_count`` configurations on the rungs ``ladder``
    (``rung_budgets`` of successive halving), from the most exploratory (``s = len(ladder) - 1``, every
    rung) to ``s = 0`` (``max_budget`` alone).

    Which configurations each bracket's first rung trains, one seeded order of the grid taken in turn:
    with at least as many configurations as Hyperband's sizes add up to, every configuration is in
    exactly one bracket, the sizes scaled up in Hyperband's proportions (as several Hyperband
    iterations, each bracket's merged); with fewer, each bracket takes Hyperband's size (at most every
    configuration once), going on round the order: every configuration is in at least one bracket,
    some in more (a configuration under a different budget is a different trial).
    """
    s_max = len(ladder) - 1
    sizes = hyperband_sizes(s_max, reduction_factor)
    if trial_count >= sum(sizes):
        sizes = _scaled(sizes, trial_count)
    else:
        sizes = [min(size, trial_count) for size in sizes]
    order, start, brackets = seeded_order(trial_count, seed), 0, []
    for s, size in zip(range(s_max, -1, -1), sizes, strict=True):
        trials = sorted(order[(start + j) % trial_count] for j in range(size))
        brackets.append(Bracket(s, tuple(ladder[s_max - s :]), tuple(trials), reduction_factor))
        start += size
    return brackets


def cost_shares(brackets: Sequence[Bracket], max_cost: float) -> list[float]:
    """Each bracket's part of ``max_cost``, in proportion to what its rungs train (``Bracket.units``):
    brackets run side by side, so each spends within its own part and together within ``max_cost``."""
    units = [bracket.units for bracket in brackets]
    return [max_cost * unit / sum(units) for unit in units]
