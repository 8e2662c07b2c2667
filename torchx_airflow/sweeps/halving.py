"""The arithmetic of a sweep: its trials, its rungs and the choice at each rung (no Airflow here).

Successive halving trains every trial for ``min_budget``, keeps the best ``1 / reduction_factor`` of
them, trains those up to ``min_budget * reduction_factor``, and so on up to ``max_budget``: with 27
trials and rungs at 1, 3 and 9 epochs, 27 segments of 1 epoch, 9 that continue to 3, 3 to 9. ``grid``
is the baseline: every trial at ``max_budget``, in one rung.

A choice rests only on the values given (what the worker recorded when each segment ended): a trial
whose value is missing or not a finite number is dropped (its segment failed, or it logged no
objective), never an error for the others; ties go to the earliest trial.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from torchx_airflow.exceptions import TorchXInputError

ALGORITHMS = ("successive_halving", "grid")
#: names a trial's template offers besides its parameters
RESERVED = frozenset({"id", "index", "params", "budget", "rung", "previous_budget", "resume_from", "source"})
#: trials a sweep may have (a search space's product)
MAX_TRIALS = 100_000


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a boolean); None otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


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
        return [max_budget]
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
        (sign * number, index) for index, value in values if (number := finite(value)) is not None
    )
    return [index for _, index in ranked[:keep]]
