"""Sweeps as Airflow tasks: ``torchx_sweep(...)`` builds a task group that trains a search space by
successive halving (or as a grid), one mapped TorchX task per rung, and promotes the best trial.

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
``promote`` (``TorchXPromoteOperator``'s rules over the highest rung reached). Docs: Sweeps.
Importing this module imports no TorchX scheduler, MLflow, s3fs or docker module.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXInputError
from torchx_airflow.sweeps.halving import expand_space, rung_budgets, survivors

if TYPE_CHECKING:
    from airflow.sdk import Asset, TaskGroup

__all__ = ["torchx_sweep"]

#: TorchXOperator arguments a sweep sets itself for every segment
_SWEEP_OWNS = frozenset({"task_id", "trial", "max_cost", "expected_duration"})
#: what a segment's app is built from: the first rung is priced from it
_APP_PARTS = ("component", "component_args", "app", "env", "app_name")


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
    promote_to: Asset | None = None,
    artifact: str = "model",
    checkpoint_artifact: str = "checkpoint",
    **trial_kwargs: Any,
) -> TaskGroup:
    """A task group that sweeps ``search_space`` (see the module's docstring); returns it for ``>>``.

    :param sweep_id: the group's id (its tasks are ``<sweep_id>.plan_0``, ``<sweep_id>.rung_0``...).
    :param search_space: parameter name -> list of values; every combination is a trial, read in
        templates as ``{{ trial.<name> }}`` beside ``{{ trial.budget }}``, ``{{ trial.rung }}``,
        ``{{ trial.id }}`` and ``{{ trial.previous_budget }}``.
    :param objective: the final metric each segment's job records (``AppRun.add_metadata``), compared
        at each rung as its worker recorded it when the segment ended.
    :param mode: ``"min"`` (a loss) or ``"max"``.
    :param min_budget: what the first rung trains up to (epochs, steps: any unit the job reads).
    :param max_budget: what the last rung trains up to: ``min_budget`` times a power of
        ``reduction_factor``.
    :param reduction_factor: each rung keeps ``1 / reduction_factor`` of the trials before it.
    :param algorithm: ``"successive_halving"`` or ``"grid"`` (every trial at ``max_budget``).
    :param max_cost: the whole sweep's budget (the currency of the connection's price table): each
        rung is priced before it trains; one that would pass it asks the connection's approvers
        (``cost_approval_timeout``), else it is not trained and the best trial so far is promoted.
    :param unit_duration: seconds (or a ``timedelta``) one unit of budget is expected to take a
        segment: with the price table, what prices the first rung (required with ``max_cost``), and
        each segment's ``expected_duration`` (the units it trains times this).
    :param promote_to: the ``Asset`` the best trial's ``artifact`` is published to (None: no promotion).
    :param checkpoint_artifact: the artifact a continuing segment resumes from.
    :param trial_kwargs: any other ``TorchXOperator`` argument, for every segment (``component``,
        ``component_args``, ``cache=True``, ``retries``...); templates see ``trial``. ``retries``
        and ``retry_delay`` are the plans' and ``promote``'s too.
    """
    from airflow.sdk import TaskGroup

    from torchx_airflow.sweeps.segment import TorchXSweepSegmentOperator
    from torchx_airflow.sweeps.tasks import TorchXSweepPlanOperator, TorchXSweepPromoteOperator

    where = f"torchx_sweep {sweep_id!r}"
    trials = expand_space(search_space, where)
    budgets = rung_budgets(algorithm, min_budget, max_budget, reduction_factor, where)
    if mode not in ("min", "max"):
        raise TorchXInputError(f'{where}: mode={mode!r} must be "min" (a loss) or "max" (an accuracy).')
    if not isinstance(objective, str) or not objective:
        raise TorchXInputError(f"{where}: objective={objective!r} must name the metric each job records.")
    if max_cost is not None and (
        isinstance(max_cost, bool) or not isinstance(max_cost, int | float) or not 0 < max_cost < math.inf
    ):
        raise TorchXInputError(f"{where}: max_cost={max_cost!r} must be a positive finite number or None.")
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
    count, counts = len(trials), []
    for _ in budgets:
        counts.append(count)
        count = survivors(count, reduction_factor)
    # a plan decides from the XComs of the tasks before it: retried on a worker's death, it decides alike
    retrying = {k: trial_kwargs[k] for k in ("retries", "retry_delay") if k in trial_kwargs}
    plan_ids = [f"{sweep_id}.plan_{k}" for k in range(len(budgets))]
    segment_ids = [f"{sweep_id}.rung_{k}" for k in range(len(budgets))]
    with TaskGroup(group_id=sweep_id, tooltip=f"{len(trials)} trials, rungs at {budgets}") as group:
        upstream: Any = None  # the rung before: a sweep has at least one
        for k, budget in enumerate(budgets):
            plan = TorchXSweepPlanOperator(
                **retrying,
                task_id=f"plan_{k}",
                rung=k,
                budgets=budgets,
                trials=trials,
                objective=objective,
                mode=mode,
                reduction_factor=reduction_factor,
                segment_task_ids=segment_ids,
                plan_task_ids=plan_ids,
                max_cost=max_cost,
                unit_duration=unit_duration,
                app_parts={k: trial_kwargs[k] for k in _APP_PARTS if k in trial_kwargs},
                torchx_conn_id=trial_kwargs.get("torchx_conn_id"),
                checkpoint_artifact=checkpoint_artifact,
                doc_md=f"Which trials rung {k} trains (up to {counts[k]}, to budget {budget}).",
            )
            rung = TorchXSweepSegmentOperator.partial(
                task_id=f"rung_{k}", checkpoint_artifact=checkpoint_artifact, **trial_kwargs
            ).expand_kwargs(plan.output)
            if upstream is not None:
                upstream >> plan
            plan >> rung
            upstream = rung
        if promote_to is not None:
            promote = TorchXSweepPromoteOperator(
                **retrying,
                task_id="promote",
                segment_task_ids=segment_ids,
                objective=objective,
                mode=mode,
                artifact=artifact,
                asset=promote_to,
                torchx_conn_id=trial_kwargs.get("torchx_conn_id"),
            )
            upstream >> promote
    return group
