"""Sweeps as Airflow tasks: ``torchx_sweep(...)`` builds a task group that trains a search space by
successive halving (or as a grid, or by Hyperband's brackets), one mapped TorchX task per rung, and
promotes the best trial.

    with DAG(...):
        prepare >> torchx_sweep(
            sweep_id="sweep",
            component="utils.python",
            component_args=["--script", "train.py", "--",
                            "--lr", "{{ trial.lr }}", "--epochs", "{{ trial.budget }}"],
            search_space={"lr": [0.01, 0.03, 0.1], "width": [8, 16, 32]},
            objective="val_loss", mode="min",
            min_budget=1, max_budget=9, reduction_factor=3,
            promote_to=Asset("model://my_pipeline/best"), artifact="model",
            cache=True,
        )

The group holds, for each rung ``k``, ``plan_k`` (which trials the rung trains:
``sweeps.tasks.TorchXSweepPlanOperator``) and ``rung_k`` (their segments: a mapped
``sweeps.segment.TorchXSweepSegmentOperator``, an ordinary ``TorchXOperator`` run each), then
``promote`` (``TorchXPromoteOperator``'s rules over the highest rung reached). With
``algorithm="hyperband"`` each bracket ``s`` is a task group of its own, ``b<s>``, holding its
``plan_k`` and ``rung_k`` (``sweeps.hyperband.TorchXHyperbandPlanOperator``); the brackets run side by
side, each within its share of ``max_cost``, and ``promote`` compares the best of every bracket at
``max_budget``. Docs: Sweeps.
Importing this module imports no TorchX scheduler, MLflow, s3fs or docker module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXInputError
from torchx_airflow.sweeps.halving import (
    Bracket,
    cost_shares,
    expand_space,
    hyperband_brackets,
    rung_budgets,
    survivors,
)

if TYPE_CHECKING:
    from airflow.sdk import Asset, BaseOperator, TaskGroup

__all__ = ["torchx_sweep"]

#: TorchXOperator arguments a sweep sets itself for every segment
_SWEEP_OWNS = frozenset({"task_id", "trial", "max_cost", "expected_duration"})
#: what a segment's app is built from: the first rung is priced from it
_APP_PARTS = ("component", "component_args", "app", "env", "app_name")

#: builds rung ``k``'s plan, given the chain's plan and segment task ids
PlanFactory = Callable[[int, list[str], list[str]], "BaseOperator"]


def torchx_sweep(
    *,
    sweep_id: str,
    search_space: Mapping[str, Sequence[Any]],
    objective: str,
    mode: str = "min",
    min_budget: float = 1,
    max_budget: float,
    reduction_factor: int = 3,
    algorithm: str = "successive_halving",
    max_cost: float | None = None,
    unit_duration: float | timedelta | None = None,
    seed: int = 0,
    promote_to: Asset | None = None,
    artifact: str = "model",
    checkpoint_artifact: str = "checkpoint",
    **trial_kwargs: Any,
) -> TaskGroup:
    """A task group that sweeps ``search_space`` (see the module's docstring); returns it for ``>>``.

    :param sweep_id: the group's id (its tasks are ``<sweep_id>.plan_0``, ``<sweep_id>.rung_0``...;
        Hyperband's ``<sweep_id>.b<s>.plan_0``...).
    :param search_space: parameter name -> list of values; every combination is a trial, read in
        templates as ``{{ trial.<name> }}`` beside ``{{ trial.budget }}``, ``{{ trial.rung }}``,
        ``{{ trial.id }}``, ``{{ trial.previous_budget }}`` and ``{{ trial.bracket }}``.
    :param objective: the final metric each segment's job records (``AppRun.add_metadata``), compared
        at each rung as its worker recorded it when the segment ended.
    :param mode: ``"min"`` (a loss) or ``"max"``.
    :param min_budget: what the first rung trains up to (epochs, steps: any unit the job reads).
    :param max_budget: what the last rung trains up to: ``min_budget`` times a power of
        ``reduction_factor``.
    :param reduction_factor: each rung keeps ``1 / reduction_factor`` of the trials before it.
    :param algorithm: ``"successive_halving"``, ``"grid"`` (every trial at ``max_budget``) or
        ``"hyperband"`` (brackets of successive halving starting at each rung of the ladder).
    :param max_cost: the whole sweep's budget (the currency of the connection's price table): each
        rung is priced before it trains; one that would pass it asks the connection's approvers
        (``cost_approval_timeout``), else it is not trained and the best trial so far is promoted.
        Hyperband's brackets each spend within a share of it.
    :param unit_duration: seconds (or a ``timedelta``) one unit of budget is expected to take a
        segment: with the price table, what prices the first rung (required with ``max_cost``), and
        each segment's ``expected_duration`` (the units it trains times this).
    :param seed: which configurations each Hyperband bracket draws (the same seed, the same brackets).
    :param promote_to: the ``Asset`` the best trial's ``artifact`` is published to (None: no promotion).
    :param checkpoint_artifact: the artifact a continuing segment resumes from.
    :param trial_kwargs: any other ``TorchXOperator`` argument, for every segment (``component``,
        ``component_args``, ``cache=True``, ``retries``...); templates see ``trial``. ``retries``
        and ``retry_delay`` are the plans' and ``promote``'s too.
    """
    from airflow.sdk import TaskGroup

    where = f"torchx_sweep {sweep_id!r}"
    trials = expand_space(search_space, where)
    budgets = rung_budgets(algorithm, min_budget, max_budget, reduction_factor, where)
    unit_duration = _check(where, mode, objective, max_cost, unit_duration, min_budget, seed, trial_kwargs)
    brackets = (
        hyperband_brackets(len(trials), budgets, reduction_factor, seed) if algorithm == "hyperband" else []
    )
    tooltip = f"{len(trials)} trials, " + (
        f"Hyperband brackets on {budgets}" if brackets else f"rungs at {budgets}"
    )
    # a plan decides from the XComs of the tasks before it: retried on a worker's death, it decides alike
    retrying: dict[str, Any] = {k: trial_kwargs[k] for k in ("retries", "retry_delay") if k in trial_kwargs}
    common: dict[str, Any] = {
        "trials": trials,
        "objective": objective,
        "mode": mode,
        "reduction_factor": reduction_factor,
        "checkpoint_artifact": checkpoint_artifact,
        "unit_duration": unit_duration,
        "app_parts": {k: trial_kwargs[k] for k in _APP_PARTS if k in trial_kwargs},
        "torchx_conn_id": trial_kwargs.get("torchx_conn_id"),
        **retrying,
    }
    segment_kwargs = {"checkpoint_artifact": checkpoint_artifact, **trial_kwargs}
    with TaskGroup(group_id=sweep_id, tooltip=tooltip) as group:
        if brackets:
            lasts, segment_ids, segment_budgets = _brackets(brackets, max_cost, common, segment_kwargs)
        else:
            lasts, segment_ids, segment_budgets = _halving(
                str(group.group_id), budgets, max_cost, common, segment_kwargs
            )
        if promote_to is not None:
            from torchx_airflow.sweeps.tasks import TorchXSweepPromoteOperator

            promote = TorchXSweepPromoteOperator(
                **retrying,
                task_id="promote",
                segment_task_ids=segment_ids,
                segment_budgets=segment_budgets,
                objective=objective,
                mode=mode,
                artifact=artifact,
                asset=promote_to,
                torchx_conn_id=trial_kwargs.get("torchx_conn_id"),
            )
            lasts >> promote
    return group


def _check(
    where: str,
    mode: Any,
    objective: Any,
    max_cost: Any,
    unit_duration: Any,
    min_budget: float,
    seed: Any,
    trial_kwargs: Mapping[str, Any],
) -> float | None:
    """Refuse bad sweep arguments at parse time, naming the value and the fix; returns
    ``unit_duration`` in seconds."""
    if mode not in ("min", "max"):
        raise TorchXInputError(f'{where}: mode={mode!r} must be "min" (a loss) or "max" (an accuracy).')
    if not isinstance(objective, str) or not objective:
        raise TorchXInputError(f"{where}: objective={objective!r} must name the metric each job records.")
    if max_cost is not None and (
        isinstance(max_cost, bool) or not isinstance(max_cost, int | float) or not 0 < max_cost < math.inf
    ):
        raise TorchXInputError(f"{where}: max_cost={max_cost!r} must be a positive finite number or None.")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TorchXInputError(
            f"{where}: seed={seed!r} must be an integer (which configurations each Hyperband bracket "
            "draws), e.g. seed=0."
        )
    owned = sorted(_SWEEP_OWNS & set(trial_kwargs))
    if owned:
        raise TorchXInputError(
            f"{where}: {owned} are set by the sweep for each segment; pass the sweep's own "
            "(sweep_id, max_cost, unit_duration: seconds per unit of budget) instead."
        )
    if isinstance(unit_duration, timedelta):
        unit_duration = unit_duration.total_seconds()
    if unit_duration is not None and (
        isinstance(unit_duration, bool)
        or not isinstance(unit_duration, int | float)
        or not 0 < unit_duration < math.inf
    ):
        raise TorchXInputError(
            f"{where}: unit_duration={unit_duration!r} must be positive seconds (or a timedelta) that one "
            "unit of budget takes a segment, e.g. 600 for ten-minute epochs."
        )
    if max_cost is not None and unit_duration is None:
        raise TorchXInputError(
            f"{where}: max_cost={max_cost!r} needs unit_duration, the seconds one unit of budget (an "
            f"epoch) takes a segment, to price the first rung ({min_budget} units a trial) before it "
            "trains, e.g. unit_duration=600."
        )
    if "component" not in trial_kwargs:
        raise TorchXInputError(f"{where}: pass component= (and component_args=) for the trials' jobs.")
    return unit_duration


def _counts(count: int, rungs: int, reduction_factor: int) -> list[int]:
    """How many trials each rung trains at most, from ``count`` on the first."""
    counts = [count]
    for _ in range(rungs - 1):
        counts.append(survivors(counts[-1], reduction_factor))
    return counts


def _halving(
    prefix: str,
    budgets: list[float],
    max_cost: float | None,
    common: Mapping[str, Any],
    segment_kwargs: Mapping[str, Any],
) -> tuple[list[Any], list[str], list[float]]:
    """Successive halving (or the grid's one rung): one chain of plans and rungs. Returns its last
    rung, and its segment task ids with their budgets."""
    counts = _counts(len(common["trials"]), len(budgets), common["reduction_factor"])

    def plan(k: int, plan_ids: list[str], segment_ids: list[str]) -> BaseOperator:
        from torchx_airflow.sweeps.tasks import TorchXSweepPlanOperator

        return TorchXSweepPlanOperator(
            task_id=f"plan_{k}",
            rung=k,
            budgets=budgets,
            segment_task_ids=segment_ids,
            plan_task_ids=plan_ids,
            max_cost=max_cost,
            doc_md=f"Which trials rung {k} trains (up to {counts[k]}, to budget {budgets[k]}).",
            **common,
        )

    _, segments, segment_ids = _chain(prefix, len(budgets), plan, segment_kwargs)
    return segments[-1:], segment_ids, list(budgets)


def _chain(
    prefix: str, rungs: int, plan: PlanFactory, segment_kwargs: Mapping[str, Any]
) -> tuple[list[BaseOperator], list[Any], list[str]]:
    """``plan_0 >> rung_0 >> plan_1 >> rung_1 ...`` in the current task group (whose id is ``prefix``):
    its plans, its mapped rungs and their task ids."""
    from torchx_airflow.sweeps.segment import TorchXSweepSegmentOperator

    plan_ids = [f"{prefix}.plan_{k}" for k in range(rungs)]
    segment_ids = [f"{prefix}.rung_{k}" for k in range(rungs)]
    plans: list[BaseOperator] = []
    segments: list[Any] = []
    for k in range(rungs):
        plans.append(plan(k, plan_ids, segment_ids))
        if segments:
            segments[-1] >> plans[-1]
        segments.append(
            TorchXSweepSegmentOperator.partial(task_id=f"rung_{k}", **segment_kwargs).expand_kwargs(
                plans[-1].output
            )
        )
    return plans, segments, segment_ids


def _brackets(
    brackets: Sequence[Bracket],
    max_cost: float | None,
    common: Mapping[str, Any],
    segment_kwargs: Mapping[str, Any],
) -> tuple[list[Any], list[str], list[float]]:
    """Hyperband: one task group per bracket, side by side, each within its share of ``max_cost``.
    Returns the brackets' last rungs, and every segment task id with its budget, bracket by bracket."""
    from airflow.sdk import TaskGroup

    shares = cost_shares(brackets, max_cost) if max_cost is not None else [None] * len(brackets)
    lasts: list[Any] = []
    segment_ids: list[str] = []
    segment_budgets: list[float] = []
    for bracket, share in zip(brackets, shares, strict=True):
        with TaskGroup(group_id=f"b{bracket.s}", tooltip=_bracket_tooltip(bracket)) as group:
            plan = _bracket_plan(bracket, share, max_cost, common)
            _, segments, ids = _chain(str(group.group_id), len(bracket.budgets), plan, segment_kwargs)
        lasts.append(segments[-1])
        segment_ids += ids
        segment_budgets += bracket.budgets
    return lasts, segment_ids, segment_budgets


def _bracket_plan(
    bracket: Bracket, share: float | None, max_cost: float | None, common: Mapping[str, Any]
) -> PlanFactory:
    counts = bracket.counts

    def plan(k: int, plan_ids: list[str], segment_ids: list[str]) -> BaseOperator:
        from torchx_airflow.sweeps.hyperband import TorchXHyperbandPlanOperator

        return TorchXHyperbandPlanOperator(
            task_id=f"plan_{k}",
            bracket=bracket.s,
            first_trials=bracket.trials,
            rung=k,
            budgets=bracket.budgets,
            segment_task_ids=segment_ids,
            plan_task_ids=plan_ids,
            max_cost=share,
            sweep_max_cost=max_cost,
            doc_md=(
                f"Which trials bracket b{bracket.s}'s rung {k} trains (up to {counts[k]}, "
                f"to budget {bracket.budgets[k]})."
            ),
            **common,
        )

    return plan


def _bracket_tooltip(bracket: Bracket) -> str:
    return f"bracket s={bracket.s}: {bracket.counts} trials at {list(bracket.budgets)}"
