"""The plan of a Hyperband bracket's rung: a sweep plan (``sweeps.tasks.TorchXSweepPlanOperator``) that
knows its bracket.

A bracket is successive halving over its own configurations on the top of the sweep's ladder
(``sweeps.halving.hyperband_brackets``): its first rung trains the configurations the bracket drew,
the rungs after it are chosen as in any sweep, from what the bracket's own segments recorded. Its
segments' ids name the bracket (``b1-t4``: bracket ``s=1``, configuration 4), so a configuration in
two brackets writes to two places, and ``{{ trial.bracket }}`` is ``s``.

With ``max_cost`` each bracket's plans price its rungs as any sweep's (the first from what its trials'
apps request for ``unit_duration``) against the bracket's share of it (``sweeps.halving.cost_shares``),
which is their ``max_cost``: brackets run side by side, so each spends within its own share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torchx_airflow.sweeps.tasks import TorchXSweepPlanOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class TorchXHyperbandPlanOperator(TorchXSweepPlanOperator):
    """Plan rung ``rung`` of Hyperband bracket ``bracket`` (see the module's docstring).

    :param bracket: the bracket's ``s`` (its first rung is ``s`` rungs below ``max_budget``).
    :param first_trials: the configuration indexes its first rung trains.
    :param sweep_max_cost: the sweep's ``max_cost`` (named in the log); the plan's own ``max_cost``
        is the bracket's share of it.
    """

    def __init__(
        self,
        *,
        bracket: int,
        first_trials: Sequence[int],
        sweep_max_cost: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.bracket = bracket
        self.first_trials = list(first_trials)
        self.sweep_max_cost = sweep_max_cost

    def execute(
        self, context: Context, event: dict[str, Any] | None = None, **parked: Any
    ) -> list[dict[str, Any]]:
        if self.max_cost is not None:
            self.log.info(
                "Bracket b%d spends within max_cost=%g, its share of the sweep's max_cost=%g",
                self.bracket,
                self.max_cost,
                self.sweep_max_cost,
            )
        return super().execute(context, event, **parked)

    def _first_trials(self) -> list[int]:
        return list(self.first_trials)

    def _segment(
        self, index: int, budget: float, rung: int, resume_from: str | None, source: str | None
    ) -> dict[str, Any]:
        segment = super()._segment(index, budget, rung, resume_from, source)
        trial = segment["trial"]
        trial["id"] = f"b{self.bracket}-{trial['id']}"
        trial["bracket"] = self.bracket
        return segment
