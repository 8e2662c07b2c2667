"""The tasks of a sweep besides its segments: each rung's plan, and the promotion of the winner.

A rung's plan (``TorchXSweepPlanOperator``) decides which trials the rung trains: every trial on the
first rung; on the next ones, the best ``1 / reduction_factor`` of the trials the rung before
trained, by the objective each segment's worker recorded when it ended (its result in XCom, never a
later read of a tracker store). It returns the rung's segments (``expand_kwargs`` of the rung's
mapped ``TorchXSweepSegmentOperator``), each continuing its trial's previous segment: its
``checkpoint`` artifact, when the worker recorded one under that segment's output roots, is the new
segment's ``TORCHX_AIRFLOW_RESUME_FROM``, and that segment is its one lineage parent.

With ``max_cost``, a plan prices its rung from what training the segments before it cost (their
worker's record; a cache hit's, the run it was cached from) per unit of budget, for each trial as if it
started over, and returns no segment when what the sweep spent plus that estimate would pass it, or
when nothing could be priced: the rungs after train nothing, and the best trial so far is promoted.
What a failed segment spent is not in its task's result, so it is not counted.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from torchx_airflow.exceptions import TorchXError
from torchx_airflow.lineage.keys import XCOM_LINEAGE_PARENTS, XCOM_RUN_ID, XCOM_SUBMITTED_APP
from torchx_airflow.operators.promote import TorchXPromoteOperator
from torchx_airflow.policies.cost.usage import cost_total
from torchx_airflow.sweeps.halving import choose, finite, survivors

if TYPE_CHECKING:
    from airflow.sdk import Context

#: XCom of a plan: the sweep's spending and why it stopped (when it did)
XCOM_SWEEP = "torchx_sweep"


#: the field of a segment's result that holds its own trial
RESULT_TRIAL = "sweep_trial"


class TorchXSweepError(TorchXError):
    """A sweep cannot go on (a plan before this one left nothing to choose from)."""


def _aligned(values: Any, indexes: Sequence[int]) -> list[Any]:
    """XCom values pulled for ``indexes``, one per index (None where none was pushed)."""
    values = list(values) if isinstance(values, list | tuple) else []
    return [*values[: len(indexes)], *[None] * (len(indexes) - len(values))]


def _own_trial(result: Any, planned: Mapping[str, Any], count: int) -> Mapping[str, Any]:
    """The trial a segment's result says it trained, else the one its plan gave it."""
    own = result.get(RESULT_TRIAL) if isinstance(result, Mapping) else None
    if not isinstance(own, Mapping):
        return planned
    index = own.get("index")
    if isinstance(index, int) and 0 <= index < count and finite(own.get("budget")) is not None:
        return own
    return planned


def cost_spent(result: Any) -> float:
    """What a segment's worker recorded it spent: its cost's total (0 for a cache hit, 0 without)."""
    cost = result.get("cost") if isinstance(result, Mapping) else None
    total = cost_total(cost) if isinstance(cost, Mapping) else finite(cost)
    return total or 0.0


def cost_of_training(result: Any) -> float | None:
    """What training the segment cost, spent now or (a cache hit) by the run it was cached from;
    None when its worker recorded no cost."""
    if not isinstance(result, Mapping):
        return None
    cached = result.get("cached_usage")
    if result.get("cache_hit") and isinstance(cached, Mapping):
        return cost_total(cached.get("cost"))
    return cost_total(result.get("cost"))


class TorchXSweepPlanOperator(BaseOperator):
    """Plan rung ``rung`` of a sweep (see the module's docstring); returns the rung's segments."""

    ui_color = "#fff4e0"

    def __init__(
        self,
        *,
        rung: int,
        budgets: Sequence[float],
        trials: Sequence[Mapping[str, Any]],
        objective: str,
        mode: str,
        reduction_factor: int,
        segment_task_ids: Sequence[str],
        plan_task_ids: Sequence[str],
        max_cost: float | None = None,
        checkpoint_artifact: str = "checkpoint",
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", "all_done")  # a failed segment drops its trial, not the sweep
        super().__init__(**kwargs)
        self.rung = rung
        self.budgets = list(budgets)
        self.trials = [dict(t) for t in trials]
        self.objective, self.mode, self.reduction_factor = objective, mode, reduction_factor
        self.segment_task_ids, self.plan_task_ids = list(segment_task_ids), list(plan_task_ids)
        self.max_cost = max_cost
        self.checkpoint_artifact = checkpoint_artifact

    def execute(self, context: Context) -> list[dict[str, Any]]:
        ti = context["ti"]
        budget = self.budgets[self.rung]
        if self.rung == 0:
            segments = [self._segment(i, budget, 0, None, None) for i in range(len(self.trials))]
            self.log.info("Rung 0 trains %d trials to %s", len(segments), budget)
            return self._publish(ti, segments, {"spent": 0.0})
        before_plan = self.plan_task_ids[self.rung - 1]
        state = ti.xcom_pull(task_ids=before_plan, key=XCOM_SWEEP)
        if not isinstance(state, Mapping):
            raise TorchXSweepError(
                f"Task {self.task_id!r}: {before_plan!r} left no plan (it failed or was cleared), so rung "
                f"{self.rung} cannot be chosen. Clear {before_plan!r} and the tasks after it to go on."
            )
        before = ti.xcom_pull(task_ids=before_plan) or []
        if state.get("stopped") or not before:
            self.log.info(
                "Rung %d trains nothing: %s", self.rung, state.get("stopped") or "no trial reached it"
            )
            return self._publish(ti, [], state)
        previous = self.segment_task_ids[self.rung - 1]
        indexes = list(range(len(before)))
        results = _aligned(ti.xcom_pull(task_ids=previous, map_indexes=indexes), indexes)
        submitted = _aligned(
            ti.xcom_pull(task_ids=previous, map_indexes=indexes, key=XCOM_SUBMITTED_APP), indexes
        )
        run_ids = _aligned(ti.xcom_pull(task_ids=previous, map_indexes=indexes, key=XCOM_RUN_ID), indexes)
        # each segment's own record of its trial (a plan cleared and changed since cannot misplace it)
        trials = [_own_trial(results[i], before[i]["trial"], len(self.trials)) for i in indexes]
        recorded = [self._value(result) for result in results]
        spent = float(state.get("spent") or 0.0) + sum(cost_spent(r) for r in results)
        keep = survivors(len(trials), self.reduction_factor)
        chosen = sorted(choose([(i, v) for i, v in enumerate(recorded)], keep, self.mode))
        for i, trial in enumerate(trials):
            self.log.info(
                "Trial %s at %s: %s=%s%s",
                trial["id"],
                trial["budget"],
                self.objective,
                recorded[i],
                " (continues)" if i in chosen else "",
            )
        if self.max_cost is not None:
            estimate, unpriced = self._estimate(trials, results, chosen, budget)
            why = None
            if unpriced:
                why = (
                    f"rung {self.rung} cannot be priced: no segment of rung {self.rung - 1} recorded a cost "
                    "(give the torchx connection a price table: docs, Usage and cost)"
                )
            elif spent + estimate > self.max_cost:
                why = (
                    f"rung {self.rung} ({len(chosen)} trials to {budget}) would cost about {estimate:.4f} "
                    f"more, past max_cost={self.max_cost:g} with {spent:.4f} spent"
                )
            if why is not None:
                self.log.warning("Sweep stops: %s: the best trial so far is promoted", why)
                return self._publish(ti, [], {"spent": spent, "stopped": why})
        segments = [
            self._segment(
                int(trials[i]["index"]),
                budget,
                self.rung,
                self._checkpoint(results[i], submitted[i]),
                run_ids[i] if isinstance(run_ids[i], str) and run_ids[i] else None,
            )
            for i in chosen
        ]
        self.log.info("Rung %d trains %d of %d trials to %s", self.rung, len(segments), len(trials), budget)
        return self._publish(ti, segments, {"spent": spent})

    def _segment(
        self, index: int, budget: float, rung: int, resume_from: str | None, source: str | None
    ) -> dict[str, Any]:
        previous = self.budgets[rung - 1] if rung and resume_from else 0
        trial = {
            "id": f"t{index:0{len(str(len(self.trials) - 1))}d}",
            "index": index,
            "params": self.trials[index],
            "budget": budget,
            "rung": rung,
            "previous_budget": previous,
            "resume_from": resume_from,
            "source": source,
        }
        return {"trial": trial}

    def _publish(
        self, ti: Any, segments: list[dict[str, Any]], state: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        ti.xcom_push(key=XCOM_SWEEP, value=dict(state))
        parents = [[s["trial"]["source"]] if s["trial"]["source"] else None for s in segments]
        ti.xcom_push(key=XCOM_LINEAGE_PARENTS, value={self.segment_task_ids[self.rung]: parents})
        return segments

    def _value(self, result: Any) -> float | None:
        from torchx_airflow.lineage.promotion import recorded_metrics

        if not isinstance(result, Mapping) or result.get("state") != "SUCCEEDED":
            return None
        return recorded_metrics(result).get(self.objective)

    def _checkpoint(self, result: Any, submitted: Any) -> str | None:
        """The segment's checkpoint artifact as its worker recorded it, under its output roots."""
        from torchx_airflow.apps import is_under
        from torchx_airflow.secrets import strip_userinfo

        artifact = (
            (result.get("artifacts") or {}).get(self.checkpoint_artifact)
            if isinstance(result, Mapping)
            else None
        )
        path = artifact.get("path") if isinstance(artifact, Mapping) else None
        if not isinstance(path, str) or not path:
            return None
        roots = submitted.get("output_roots") if isinstance(submitted, Mapping) else None
        path = strip_userinfo(path)
        if path.startswith("/"):
            path = posixpath.normpath(path)  # handed on as checked: no ".." left in it
        if not isinstance(roots, list) or not any(
            isinstance(r, str) and r and is_under(path, r) for r in roots
        ):
            self.log.warning(
                "Not resuming from %s: outside the output roots its segment recorded (%s); "
                "its trial starts over",
                path,
                roots,
            )
            return None
        return path

    def _estimate(
        self,
        trials: Sequence[Mapping[str, Any]],
        results: Sequence[Any],
        chosen: Sequence[int],
        budget: float,
    ) -> tuple[float, bool]:
        """The rung's cost: per chosen trial, what its last segment's training cost per unit of budget
        (a trial whose segment recorded none: the dearest unit of the rung), times the new budget as if
        it started over (never under); and whether nothing could be priced."""
        units: dict[int, float] = {}
        for i, (trial, result) in enumerate(zip(trials, results, strict=True)):
            cost = cost_of_training(result)
            trained = float(trial["budget"]) - float(trial.get("previous_budget") or 0)
            if cost is not None:
                units[i] = cost / trained if trained > 0 else cost
        if not units:
            return 0.0, True
        dearest = max(units.values())
        return sum(units.get(i, dearest) * float(budget) for i in chosen), False


class TorchXSweepPromoteOperator(TorchXPromoteOperator):
    """Promote the best trial of the highest rung any segment reached (``TorchXPromoteOperator``'s
    rules: the worker's record of each run, the artifact under its output roots)."""

    def __init__(self, *, segment_task_ids: Sequence[str], **kwargs: Any) -> None:
        super().__init__(runs_of=segment_task_ids[-1], **kwargs)
        self.segment_task_ids = list(segment_task_ids)

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        for task_id in reversed(self.segment_task_ids):
            count = ti.get_ti_count(dag_id=ti.dag_id, task_ids=[task_id], run_ids=[ti.run_id])
            values = ti.xcom_pull(task_ids=task_id, map_indexes=list(range(count))) if count else []
            if any(isinstance(v, Mapping) and v.get("state") == "SUCCEEDED" for v in values or []):
                self.runs_of = task_id
                break
        self.log.info("Promoting the best trial of %s", self.runs_of)
        return super().execute(context)
