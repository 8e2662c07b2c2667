"""The tasks of a sweep besides its segments: each rung's plan, and the promotion of the winner.

A rung's plan (``TorchXSweepPlanOperator``) decides which trials the rung trains: every trial on the
first rung; on the next ones, the best ``1 / reduction_factor`` of the trials the rung before
trained, by the objective each segment's worker recorded when it ended (its result in XCom, never a
later read of a tracker store). It returns the rung's segments (``expand_kwargs`` of the rung's
mapped ``TorchXSweepSegmentOperator``), each continuing its trial's previous segment: its
``checkpoint`` artifact, when the worker recorded one under that segment's output roots, is the new
segment's ``TORCHX_AIRFLOW_RESUME_FROM``, and that segment is its one lineage parent.

With ``max_cost``, a plan prices its rung before it trains it: the first from what each trial's app
requests (the connection's price table) for ``unit_duration`` seconds per unit of budget; the next ones
from what training the segments before them cost (their worker's record; a cache hit's, the run it
was cached from) per unit of budget, for each trial as if it started over (a trial whose segment
recorded none: its app's request, else the rung's dearest unit). When what the sweep spent plus that
estimate would pass ``max_cost``, the connection's approvers are asked (``cost_approval_timeout``:
Airflow's human-in-the-loop, as for a run over its ``max_cost``); rejected, unanswered or not asked,
the plan returns no segment: the rungs after train nothing, and the best trial so far is promoted.
What a segment spent counts whether it succeeded or failed (a failed one's worker pushes it as
``XCOM_SEGMENT_SPENT``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from torchx_airflow.exceptions import TorchXConfigError, TorchXError
from torchx_airflow.lineage.keys import (
    XCOM_LINEAGE_PARENTS,
    XCOM_RUN_ID,
    XCOM_SUBMITTED_APP,
    XCOM_SWEEP,
    XCOM_SWEEP_SPEC,
)
from torchx_airflow.lineage.metrics import as_metric
from torchx_airflow.operators.promote import TorchXPromoteOperator
from torchx_airflow.policies.cost.usage import cost_total, spent_total
from torchx_airflow.sweeps.halving import choose, survivors
from torchx_airflow.sweeps.segment import RESULT_TRIAL, XCOM_SEGMENT_SPENT, trial_view

if TYPE_CHECKING:
    from airflow.sdk import Context


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
    if isinstance(index, int) and 0 <= index < count and as_metric(own.get("budget")) is not None:
        return own
    return planned


def _trained(trial: Mapping[str, Any]) -> float:
    """The units of budget a segment of ``trial`` trains: from its previous budget to its budget."""
    return max(float(trial["budget"]) - float(trial.get("previous_budget") or 0), 0.0)


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
        unit_duration: float | None = None,
        app_parts: Mapping[str, Any] | None = None,
        torchx_conn_id: str | None = None,
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
        self.unit_duration = unit_duration
        self.app_parts = dict(app_parts or {})  # component, component_args, app, env, app_name
        self.torchx_conn_id = torchx_conn_id
        self.checkpoint_artifact = checkpoint_artifact
        self._read_settings: dict[str, Any] = {}  # connection id -> its settings, read at execute

    def execute(
        self, context: Context, event: dict[str, Any] | None = None, **parked: Any
    ) -> list[dict[str, Any]]:
        """The rung's segments; ``event`` and ``parked``: an approver's answer to a rung over the budget
        and what the plan asked (``policies.cost.approval``), when it resumes with them."""
        resumed = {**parked, "event": event} if event is not None or parked else None
        ti = context["ti"]
        budget = self.budgets[self.rung]
        if self.rung == 0:
            segments = [self._segment(i, budget, 0, None, None) for i in self._first_trials()]
            state: dict[str, Any] = {"spent": 0.0}
            if self.max_cost is not None:
                priced = self._requested(context, dict.fromkeys(self._first_trials(), budget))
                if not priced:
                    raise TorchXConfigError(
                        f"Task {self.task_id!r}: the sweep has max_cost={self.max_cost!r}, but its first "
                        f"rung cannot be priced: connection {self._conn_id(context)!r} "
                        'needs a price table in its extra (e.g. {"prices": {"cpu_hour": 0.05}}) and the '
                        "sweep unit_duration (seconds one unit of budget takes). Or remove max_cost."
                    )
                estimate = sum(e.total for e in priced.values())
                first = next(iter(priced.values()))
                how = f"{len(priced)} trials, each {first.total:.4f} {first.currency}: {first.explain()}"
                state = self._within_budget(context, resumed, state, segments, estimate, how)
                if state.get("stopped"):
                    return self._publish(ti, [], state)
            self.log.info("Rung 0 trains %d trials to %s", len(segments), budget)
            return self._publish(ti, segments, state)
        before_plan = self.plan_task_ids[self.rung - 1]
        state = ti.xcom_pull(task_ids=before_plan, key=XCOM_SWEEP)
        if not isinstance(state, Mapping):
            raise TorchXSweepError(
                f"Task {self.task_id!r}: {before_plan!r} left no plan (it failed or was cleared), so rung "
                f"{self.rung} cannot be chosen. Clear {before_plan!r} and the tasks after it to go on."
            )
        state = dict(state)
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
        failed_spent = _aligned(
            ti.xcom_pull(task_ids=previous, map_indexes=indexes, key=XCOM_SEGMENT_SPENT), indexes
        )
        # each segment's own record of its trial (a plan cleared and changed since cannot misplace it)
        trials = [_own_trial(results[i], before[i]["trial"], len(self.trials)) for i in indexes]
        recorded = [self._value(result) for result in results]
        # what each segment spent: its result's, else (its task failed) what its worker pushed
        spent = [
            spent_total(r if isinstance(r, Mapping) else f)
            for r, f in zip(results, failed_spent, strict=True)
        ]
        if self.max_cost is not None:  # none recorded (a job whose end its task never saw): its estimate
            # (no result: ``trials[i]`` is the plan's record of the segment)
            unknown = {
                int(trials[i]["index"]): _trained(trials[i])
                for i in indexes
                if spent[i] is None and not isinstance(results[i], Mapping)
            }
            priced = self._requested(context, unknown, rung=self.rung - 1) if unknown else {}
            for i in indexes:
                index = int(trials[i]["index"])
                if spent[i] is None and index in priced:
                    spent[i] = priced[index].total
                    self.log.warning(
                        "Segment %s of trial %s recorded no cost (its task failed before it saw its job "
                        "end): counted at its estimate, %.4f",
                        i,
                        trials[i]["id"],
                        priced[index].total,
                    )
        state["spent"] = float(state.get("spent") or 0.0) + sum(x or 0.0 for x in spent)
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
        if self.max_cost is not None and segments:
            estimate, how = self._estimate(context, trials, results, chosen, budget)
            state = self._within_budget(context, resumed, state, segments, estimate, how)
            if state.get("stopped"):
                return self._publish(ti, [], state)
        self.log.info("Rung %d trains %d of %d trials to %s", self.rung, len(segments), len(trials), budget)
        return self._publish(ti, segments, state)

    def _conn_id(self, context: Context) -> str:
        """The segments' torchx connection (its template rendered as theirs is)."""
        from torchx_airflow.hooks import TORCHX_DEFAULT_CONN_ID

        return str(self.render_template(self.torchx_conn_id or TORCHX_DEFAULT_CONN_ID, context))

    def _settings(self, context: Context) -> Any:
        """The torchx connection's settings (its price table, its approvers), read once per plan."""
        from torchx_airflow.hooks.torchx import TorchXHook

        conn_id = self._conn_id(context)
        if conn_id not in self._read_settings:
            self._read_settings[conn_id] = TorchXHook(conn_id).settings
        return self._read_settings[conn_id]

    def _within_budget(
        self,
        context: Context,
        resumed: Mapping[str, Any] | None,
        state: dict[str, Any],
        segments: Sequence[Mapping[str, Any]],
        estimate: float | None,
        how: str,
    ) -> dict[str, Any]:
        """``state``, with ``stopped`` (why) when the rung cannot be trained within ``max_cost``: it
        cannot be priced, or it would pass it and no approver approved it (asked: the task waits)."""
        from torchx_airflow.exceptions import TorchXCostApprovalError, TorchXCostLimitError

        max_cost = float(self.max_cost or 0.0)  # called only with max_cost
        spent, n, budget = float(state.get("spent") or 0.0), len(segments), self.budgets[self.rung]
        if estimate is None:
            why = (
                f"rung {self.rung} cannot be priced: {how} (give the torchx connection a price table, "
                "and the sweep unit_duration: docs, Sweeps, Budgets)"
            )
            self.log.warning("Sweep stops: %s: the best trial so far is promoted", why)
            return {**state, "stopped": why}
        self.log.info(
            "Rung %d (%d trials to %s) is estimated at %.4f, %.4f spent, max_cost=%g: %s",
            self.rung,
            n,
            budget,
            estimate,
            spent,
            max_cost,
            how,
        )
        if spent + estimate <= max_cost:
            return state
        why = (
            f"rung {self.rung} ({n} trials to {budget}) would cost about {estimate:.4f} more, past "
            f"max_cost={max_cost:g} with {spent:.4f} spent"
        )
        settings = self._settings(context)
        timeout_s = settings.cost_approval_timeout
        if timeout_s is None:
            self.log.warning("Sweep stops: %s: the best trial so far is promoted", why)
            return {**state, "stopped": why}
        from torchx_airflow.policies.cost.approval import (
            APPROVE,
            REJECT,
            Question,
            answer_or_ask,
            requester_of,
        )

        currency = settings.prices.currency if settings.prices is not None else ""
        over = TorchXCostLimitError(self.task_id, max_cost, spent + estimate, currency, f"{how}; {why}")
        now = {
            "estimate": round(spent + estimate, 6),
            "max_cost": max_cost,
            "currency": currency,
            "rung_fingerprint": self._fingerprint(segments, settings),
        }
        sweep = self.segment_task_ids[0].rsplit(".", 1)[0]
        subject = (
            f"Approve rung {self.rung} of sweep {sweep!r}: {n} trials to {budget}, "
            f"about {estimate:.4f} {currency} more, past max_cost {max_cost:g} {currency}?"
        )
        body = (
            f"**Spent so far**: {spent:.4f} {currency}\n\n**This rung**: {how}\n\n"
            f"**Trials**: {'; '.join(_described(s['trial']) for s in segments)}\n\n"
            f"**Rung fingerprint**: `{now['rung_fingerprint']}`\n\n"
            f"{APPROVE} trains this rung at this estimate (if what it trains has changed when the plan "
            f"resumes, it does not). {REJECT}, or no answer within {timeout_s:g} s, stops the sweep: the "
            "best trial so far is promoted."
        )
        question = Question(self.task_id, context["ti"].id, subject, body, now, timeout_s)
        try:
            approval = answer_or_ask(
                question,
                over,
                resumed,
                requester_of(context),
                settings,
                self._conn_id(context),
                self.log,
            )
        except TorchXCostApprovalError as e:
            why = f"{why}, and the approval was refused: {e.reason}"
            self.log.warning("Sweep stops: %s: the best trial so far is promoted", why)
            return {**state, "stopped": why}
        who = approval["approved_by"]["name"]
        self.log.warning("%s approved rung %d past max_cost at %s", who, self.rung, approval["responded_at"])
        return {**state, "approvals": [*state.get("approvals", []), {"rung": self.rung, **approval}]}

    def _fingerprint(self, segments: Sequence[Mapping[str, Any]], settings: Any) -> str:
        """``sha256:<hex>`` of what the rung trains and how it was priced: each segment's trial (its
        parameters, budget and checkpoint), what its app is built from, ``unit_duration``, the price
        table, the connection and ``max_cost`` (what an approver approved, and nothing else)."""
        import dataclasses
        import hashlib
        import json
        import re

        from airflow.sdk.log import redact

        from torchx_airflow.apps import json_safe

        fields = ("id", "params", "budget", "previous_budget", "resume_from")
        doc = {
            "rung": self.rung,
            "segments": [{k: s["trial"].get(k) for k in fields} for s in segments],
            "app": json_safe(
                {
                    k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else v
                    for k, v in self.app_parts.items()
                }
            ),
            "unit_duration": self.unit_duration,
            "prices": settings.prices.describe() if settings.prices is not None else None,
            "conn_id": self.torchx_conn_id,
            "max_cost": self.max_cost,
        }
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        text = str(redact(re.sub(r" at 0x[0-9a-fA-F]+", "", text)))  # no object's address: another process
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()

    def _first_trials(self) -> list[int]:
        """The trials the first rung trains: every one (a Hyperband bracket: its own draw)."""
        return list(range(len(self.trials)))

    def _requested(
        self, context: Context, units: Mapping[int, float], rung: int | None = None
    ) -> dict[int, Any]:
        """Per trial index of ``units`` (index -> units of budget it trains), the cost of what its app
        requests (its templates rendered for the trial, at ``rung``: default this plan's) for
        ``unit_duration`` seconds a unit (``CostEstimate``); {} without ``unit_duration`` or a price
        table."""
        from torchx_airflow.apps import build_task_app
        from torchx_airflow.policies.cost.pricing import estimate_cost, requested_resources

        prices = self._settings(context).prices
        if self.unit_duration is None or prices is None or not self.app_parts:
            return {}
        rung = self.rung if rung is None else rung
        priced = {}
        for i, trained in units.items():
            trial = self._segment(i, self.budgets[rung], rung, None, None)["trial"]
            parts, seen = dict(self.app_parts), {**dict(context), "trial": trial_view(trial)}
            for name in ("component", "component_args"):  # what decides the resources it requests
                parts[name] = self.render_template(parts.get(name), seen)  # type: ignore[arg-type]
            app = build_task_app(self.task_id, **parts)
            priced[i] = estimate_cost(
                requested_resources(app),
                prices,
                self.unit_duration * float(trained),
                f"unit_duration {self.unit_duration:g} s x {trained:g}",
            )
        return priced

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
        segment: dict[str, Any] = {"trial": trial}
        if self.unit_duration is not None:  # each segment's own estimate: what it trains
            segment["expected_duration"] = self.unit_duration * _trained(trial) or None
        return segment

    def _publish(
        self, ti: Any, segments: list[dict[str, Any]], state: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        ti.xcom_push(key=XCOM_SWEEP, value=dict(state))
        spec = {"objective": self.objective, "mode": self.mode, "budgets": self.budgets, "rung": self.rung}
        ti.xcom_push(key=XCOM_SWEEP_SPEC, value={**spec, "trials": len(self.trials)})
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
        context: Context,
        trials: Sequence[Mapping[str, Any]],
        results: Sequence[Any],
        chosen: Sequence[int],
        budget: float,
    ) -> tuple[float | None, str]:
        """The rung's cost and how it was made (None: it cannot be priced): per chosen trial, what
        its last segment's training cost per unit of budget, times the new budget as if it started
        over (never under); a trial whose segment recorded no cost: what its app requests for
        ``unit_duration`` per unit, else the dearest recorded unit of the rung."""
        units: dict[int, float] = {}
        for i, (trial, result) in enumerate(zip(trials, results, strict=True)):
            cost = cost_of_training(result)
            trained = _trained(trial)
            if cost is not None:
                units[i] = cost / trained if trained > 0 else cost
        # what each chosen trial's app requests is the floor: a job that ended early is not cheaper
        requested = self._requested(context, {int(trials[i]["index"]): float(budget) for i in chosen})
        floor = {
            i: requested[int(trials[i]["index"])].total
            for i in chosen
            if int(trials[i]["index"]) in requested
        }
        missing = [i for i in chosen if i not in units and i not in floor]
        if missing and not units:
            return None, f"no segment of rung {self.rung - 1} recorded a cost"
        dearest = max(units.values(), default=0.0)
        total = sum(
            max(units.get(i, dearest if i in missing else 0.0) * float(budget), floor.get(i, 0.0))
            for i in chosen
        )
        how = (
            f"{len(chosen)} trials x {budget} units, each at the higher of the cost per unit its last "
            "segment recorded and what its app requests for unit_duration a unit"
        )
        return total, how


def _described(trial: Mapping[str, Any]) -> str:
    """A trial as an approver reads it: its id and parameters."""
    params = ", ".join(f"{k}={v}" for k, v in (trial.get("params") or {}).items())
    return f"{trial.get('id')} ({params})"


def best_task(results: Mapping[str, Sequence[Any]], objective: str, mode: str) -> str | None:
    """Of segment tasks trained to the same budget (results by task id, each by map index, in the
    sweep's order), the one holding the best SUCCEEDED result by ``objective`` as its worker recorded
    it (a tie to the earlier task, then the earlier map index); None when no SUCCEEDED result has a
    finite value of it."""
    from torchx_airflow.lineage.promotion import recorded_metrics

    sign = 1.0 if mode == "min" else -1.0
    best: tuple[float, str] | None = None
    for task_id, values in results.items():
        for value in values:
            if not isinstance(value, Mapping) or value.get("state") != "SUCCEEDED":
                continue
            number = as_metric(recorded_metrics(value).get(objective))
            if number is not None and (best is None or sign * number < best[0]):
                best = (sign * number, task_id)
    return best[1] if best else None


class TorchXSweepPromoteOperator(TorchXPromoteOperator):
    """Promote the best trial trained to the highest budget at which a segment recorded the objective
    (``TorchXPromoteOperator``'s rules: the worker's record of each run, the artifact under its output
    roots); skipped, saying why, when none did.

    :param segment_task_ids: the sweep's segment tasks, in its order (Hyperband: bracket by bracket).
    :param segment_budgets: the budget each trains to (default: each its own, in rising order); the
        tasks of one budget are compared together, never across budgets.
    """

    def __init__(
        self,
        *,
        segment_task_ids: Sequence[str],
        segment_budgets: Sequence[float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(runs_of=segment_task_ids[-1], **kwargs)
        self.segment_task_ids = list(segment_task_ids)
        self.segment_budgets = (
            list(segment_budgets) if segment_budgets is not None else list(range(len(segment_task_ids)))
        )

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowSkipException

        ti = context["ti"]
        for budget in sorted(set(self.segment_budgets), reverse=True):
            task_ids = [
                t for t, b in zip(self.segment_task_ids, self.segment_budgets, strict=True) if b == budget
            ]
            chosen = best_task(
                {task_id: self._segment_results(ti, task_id) for task_id in task_ids},
                str(self.objective),
                str(self.mode),
            )
            if chosen is not None:
                self.runs_of = chosen
                break
        else:  # no rung has a segment that recorded the objective: nothing to promote
            why = (
                f"No segment of the sweep succeeded with a value of {self.objective!r}: nothing is promoted "
                "(the plans' logs say why: a budget stopped it, or every trial failed)"
            )
            self.log.warning("%s", why)
            raise AirflowSkipException(why)
        self.log.info("Promoting the best trial of %s", self.runs_of)
        return super().execute(context)

    @staticmethod
    def _segment_results(ti: Any, task_id: str) -> list[Any]:
        count = ti.get_ti_count(dag_id=ti.dag_id, task_ids=[task_id], run_ids=[ti.run_id])
        return list(ti.xcom_pull(task_ids=task_id, map_indexes=list(range(count))) or []) if count else []
