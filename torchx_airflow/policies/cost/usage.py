"""What a TorchX run used and cost, as its task records it.

When the app ends, ``RunAccounting.at_end`` reads its usage from the scheduler's own accounting
(``SchedulerSupport.usage``: ``sacct`` on Slurm, the replica processes on local_cwd); a scheduler
without accounting gets the requested resources x elapsed, marked ``source: "requested"``. The
usage dict always has ``source`` (``"sacct"``, ``"process"``, ``"requested"`` or ``"unavailable"``
with a ``reason``), and, when known, ``elapsed_s``, ``cpu_time_s``, ``totals`` (``cpu_hours``,
``gpu_hours`` by GPU type, ``mem_gb_hours``: what a price table prices) and ``basis`` (what each
total counts). A usage read that fails is a warning and ``source: "unavailable"``, never a failed
task.

With a price table on the connection (``policies.cost.pricing``), ``check_estimate`` estimates the
cost from the dry run's requested resources x the task's ``expected_duration`` or, without one, the
elapsed time of the task's last successful run (the ``usage`` in the result XCom of the previous
successful task instance, as Airflow records it: same DAG, task and map index), and refuses to
submit when the estimate is over ``max_cost``; ``at_end`` prices the usage.

The usage and cost go into the task's result (``usage``, ``cost``), the tracker metadata of the run
(``torchx_usage``, ``torchx_cost``), the OpenLineage run facet ``torchx_usage`` and the lineage view.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torchx_airflow.apps import json_safe
from torchx_airflow.exceptions import TorchXConfigError
from torchx_airflow.lineage.keys import COST_KEY, USAGE_KEY
from torchx_airflow.lineage.metrics import as_metric
from torchx_airflow.policies.cost.pricing import (
    CostEstimate,
    actual_cost,
    check_max_cost,
    estimate_cost,
    requested_resources,
    resource_hours,
)
from torchx_airflow.run.state import SUBMITTED_KEY
from torchx_airflow.settings.prices import PriceTable, format_amount

if TYPE_CHECKING:
    from airflow.sdk import Context
    from torchx.specs import AppDef

    from torchx_airflow.hooks.torchx import TorchXHook
    from torchx_airflow.lineage.stores import TrackerSet

log = logging.getLogger(__name__)

#: Tracker metadata keys of a run's usage and cost.
#: ``task_state_store`` key: when the app was submitted (``{app_handle, at}``), for ``requested``.
REQUESTED_BASIS = {
    "cpu": "requested CPUs x elapsed",
    "gpu": "requested GPUs x elapsed",
    "mem": "requested memory x elapsed",
}


def unavailable(reason: str) -> dict[str, Any]:
    """The usage of a run whose usage could not be read, and why."""
    return {"source": "unavailable", "reason": reason}


def requested_usage(
    requested: Mapping[str, Any], elapsed_s: float | None, elapsed_basis: str
) -> dict[str, Any]:
    """``source: requested``: the requested resources x ``elapsed_s`` (no totals when it is unknown)."""
    return {
        "source": "requested",
        "elapsed_s": elapsed_s,
        "elapsed_basis": elapsed_basis,
        "requested": dict(requested),
        "totals": resource_hours(requested, elapsed_s) if elapsed_s is not None else None,
        "basis": dict(REQUESTED_BASIS),
    }


def complete_usage(measured: Mapping[str, Any], requested: Mapping[str, Any]) -> dict[str, Any]:
    """A scheduler's usage with ``requested`` beside it and, for one that measures processes but
    allocates nothing (local_cwd), totals: the CPU time used, GPUs and memory as requested x elapsed."""
    usage = {**measured, "requested": dict(requested)}
    if usage.get("totals") is None and usage.get("elapsed_s") is not None:
        totals = resource_hours(requested, float(usage["elapsed_s"]))
        if usage.get("cpu_time_s") is not None:
            totals["cpu_hours"] = float(usage["cpu_time_s"]) / 3600.0
        usage["totals"] = totals
    return usage


def read_usage(
    hook: TorchXHook, app_handle: str, app: AppDef, submitted_at: float | None, task_log: Any = log
) -> dict[str, Any]:
    """The usage of the ended app ``app_handle`` (JSON-safe); never raises."""
    try:
        requested = requested_resources(app)
        measured = hook.usage(app_handle)
        if measured is None:
            elapsed = None if submitted_at is None else round(max(0.0, time.time() - submitted_at), 3)
            basis = "from its submission to when the task saw it end (the scheduler keeps no accounting)"
            return json_safe(requested_usage(requested, elapsed, basis))
        return json_safe(complete_usage(measured, requested))
    except Exception as e:
        task_log.warning("Could not read the usage of TorchX app %s: %s: %s", app_handle, type(e).__name__, e)
        return unavailable(f"{type(e).__name__}: {e}")


def previous_elapsed(context: Context) -> tuple[float, str] | None:
    """The elapsed seconds of the task's last successful run (same DAG, task and map index) and where
    they come from, read from that task instance's result XCom; None when there is none."""
    from airflow.sdk import TaskInstanceState

    ti = context["ti"]
    map_index = ti.map_index if ti.map_index is not None else -1
    previous = ti.get_previous_ti(state=TaskInstanceState.SUCCESS, map_index=map_index)
    if previous is None:
        return None
    result = ti.xcom_pull(task_ids=ti.task_id, run_id=previous.run_id, map_indexes=map_index)
    usage = result.get("usage") if isinstance(result, Mapping) else None
    elapsed = usage.get("elapsed_s") if isinstance(usage, Mapping) else None
    if isinstance(elapsed, bool) or not isinstance(elapsed, int | float):
        return None
    source = usage.get("source") if isinstance(usage, Mapping) else None
    return float(elapsed), f"elapsed of the last successful run, DAG run {previous.run_id!r} ({source})"


def record_usage(
    trackers: TrackerSet, app_handle: str, usage: Mapping[str, Any], cost: Mapping[str, Any] | None
) -> None:
    """Write the run's usage (and cost) to every tracker store as metadata ``torchx_usage`` (and
    ``torchx_cost``); a store that keeps failing is a warning (``dag_lineage.record_run``'s policy)."""
    from torchx_airflow.lineage.edges import record_run

    metadata: dict[str, Any] = {USAGE_KEY: dict(usage)}
    if cost is not None:
        metadata[COST_KEY] = dict(cost)
    record_run(trackers.stores, app_handle, (), metadata)


def describe_usage(usage: Mapping[str, Any], cost: Mapping[str, Any] | None = None) -> str:
    """One line for the task log: ``sacct: elapsed 8 s, CPU time 3.195 s, 0.0044 CPU-h, ...``."""
    if usage.get("source") == "unavailable":
        return f"unavailable ({usage.get('reason')})"
    parts = [f"elapsed {usage.get('elapsed_s')} s"]
    if usage.get("cpu_time_s") is not None:
        parts.append(f"CPU time {usage['cpu_time_s']} s")
    if usage.get("max_rss_mb") is not None:
        parts.append(f"peak RSS {usage['max_rss_mb']:.1f} MB")
    totals = usage.get("totals")
    if isinstance(totals, Mapping):
        gpu = sum(totals["gpu_hours"].values())
        parts.append(
            f"{format_amount(totals['cpu_hours'])} CPU-h, {format_amount(gpu)} GPU-h, "
            f"{format_amount(totals['mem_gb_hours'])} GB-h memory"
        )
    actual = (cost or {}).get("actual")
    if isinstance(actual, Mapping):
        parts.append(f"cost {format_amount(actual['total'])} {actual['currency']}")
    return f"{usage.get('source')}: {', '.join(parts)}"


def cost_total(cost: Any) -> float | None:
    """The total of a result's or an attempt's ``cost`` field: the actual cost, else the estimate's;
    None without one."""
    if not isinstance(cost, Mapping):
        return None
    for figure in (cost.get("actual"), cost.get("estimate")):
        total = as_metric(figure.get("total")) if isinstance(figure, Mapping) else None
        if total is not None:
            return total
    return None


def spent_total(result: Any) -> float | None:
    """What a task's worker recorded its app spent (its result, or the cost a failed task pushed):
    its last job's cost, plus what each earlier attempt (a job the infrastructure ended, resubmitted)
    recorded; 0 for a cache hit; None when the worker recorded no cost at all.

    Example::

        earlier = {"cost": {"actual": {"total": 1.5}}}
        spent_total({"cost": {"actual": {"total": 2.0}}, "attempts": [earlier, {}]})  # 3.5
    """
    if not isinstance(result, Mapping):
        return None
    cost = result.get("cost")
    total = cost_total(cost) if isinstance(cost, Mapping) else as_metric(cost)
    attempts = result.get("attempts")
    for attempt in attempts[:-1] if isinstance(attempts, list) else []:  # the last one is ``cost``
        earlier = cost_total(attempt.get("cost")) if isinstance(attempt, Mapping) else None
        if earlier is not None:
            total = (total or 0.0) + earlier
    return total


class RunAccounting:
    """The usage and cost of one task's app: the estimate and ``max_cost`` before submitting, the
    usage and the actual cost when it ends.

    :param hook: the task's hook (its connection's price table, its scheduler's accounting).
    :param task_id: for messages.
    :param max_cost: refuse to submit when the estimate is over it (needs a price table).
    :param expected_duration: seconds the app is expected to run, for the estimate.
    :param task_log: the task's logger.
    :param store: the task's state store (``run.state``), where a scheduler without accounting
        keeps the submission time; None keeps it in memory only.
    """

    def __init__(
        self,
        hook: TorchXHook,
        task_id: str,
        max_cost: float | None,
        expected_duration: float | None,
        task_log: Any = log,
        store: Any = None,
    ) -> None:
        self.hook = hook
        self.store = store
        self.task_id = task_id
        self.max_cost = max_cost
        self.expected_duration = expected_duration
        self.log = task_log
        self.estimate: CostEstimate | None = None
        self.submitted_at: float | None = None
        #: what ``at_end`` found
        self.usage: dict[str, Any] | None = None
        self.cost: dict[str, Any] | None = None

    @property
    def prices(self) -> PriceTable | None:
        return self.hook.settings.prices

    def _duration(self, context: Context) -> tuple[float, str] | None:
        if self.expected_duration is not None:
            return self.expected_duration, "the task's expected_duration"
        try:
            return previous_elapsed(context)
        except Exception as e:  # no previous run to learn from is not an error
            self.log.warning("Could not read the last successful run's usage: %s: %s", type(e).__name__, e)
            return None

    def _estimate(self, app: AppDef, context: Context) -> CostEstimate | None:
        prices = self.prices
        if prices is None:
            if self.max_cost is not None:
                raise TorchXConfigError(
                    f"Task {self.task_id!r} has max_cost={self.max_cost!r}, but connection "
                    f"{self.hook.torchx_conn_id!r} has no price table to estimate a cost with. Add one to "
                    'its extra, e.g. {"prices": {"cpu_hour": 0.05, "gpu_hour": 2.5, "mem_gb_hour": 0.005}}, '
                    "or remove max_cost."
                )
            return None
        duration = self._duration(context)
        if duration is None:
            if self.max_cost is not None:
                raise TorchXConfigError(
                    f"Task {self.task_id!r} has max_cost={self.max_cost!r}, but no duration to estimate its "
                    "cost with: it has no expected_duration and no earlier successful run with a usage. "
                    "Set expected_duration (a timedelta or seconds) on the task."
                )
            return None
        return estimate_cost(requested_resources(app), prices, *duration)

    def check_estimate(self, app: AppDef, context: Context, spent: float = 0.0) -> CostEstimate | None:
        """The estimate of ``app``'s cost (None without a price table or a duration); raises
        ``TorchXCostLimitError`` when it, plus ``spent`` (by the try's earlier attempts), is over
        ``max_cost``, and ``TorchXConfigError`` when ``max_cost`` is set but no estimate can be
        made. Nothing has been submitted yet."""
        try:
            self.estimate = self._estimate(app, context)
        except TorchXConfigError:
            if self.max_cost is not None:
                raise
            self.log.warning("No cost estimate for task %s", self.task_id, exc_info=True)
            return None
        if self.estimate is not None:
            self.log.info("Estimated cost of app %s: %s", app.name, self.estimate.explain())
        check_max_cost(self.task_id, self.max_cost, self.estimate, spent)
        return self.estimate

    def note_submission(self, app_handle: str, context: Context) -> None:
        """Remember when ``app_handle`` was submitted: the elapsed time of a scheduler without
        accounting, kept in ``task_state_store`` too for a task that resumes in another process."""
        from torchx_airflow.apps import scheduler_of

        self.submitted_at = time.time()
        store = self.store
        if store is None or self.hook.accounts_usage(scheduler_of(app_handle)):
            return
        try:
            store.set(SUBMITTED_KEY, {"app_handle": app_handle, "at": self.submitted_at})
        except Exception as e:
            self.log.warning("Could not keep the submission time of %s: %s", app_handle, e)

    def _submitted_at(self, app_handle: str, context: Context) -> float | None:
        if self.submitted_at is not None:
            return self.submitted_at
        store = self.store
        try:
            kept = store.get(SUBMITTED_KEY) if store is not None else None
        except Exception:
            return None
        if isinstance(kept, Mapping) and kept.get("app_handle") == app_handle:
            at = kept.get("at")
            return float(at) if isinstance(at, int | float) else None
        return None

    def at_end(
        self, app_handle: str, app: AppDef, state: str, terminal: bool, context: Context
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The usage of the app (and its cost, with a price table) once it ended; never raises."""
        self.usage, self.cost = self._at_end(app_handle, app, state, terminal, context)
        return self.usage, self.cost

    def _at_end(
        self, app_handle: str, app: AppDef, state: str, terminal: bool, context: Context
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        if not terminal:
            return unavailable(f"the app is {state}: its usage is read when it ends"), None
        usage = read_usage(self.hook, app_handle, app, self._submitted_at(app_handle, context), self.log)
        try:
            prices = self.prices
        except Exception as e:  # the connection cannot be read any more: no cost, the usage stands
            self.log.warning("No cost for %s: %s: %s", app_handle, type(e).__name__, e)
            return usage, None
        if prices is None:
            return usage, None
        if self.estimate is None:  # a resumed or reattached task: estimate as the submitting try did
            try:
                self.estimate = self._estimate(app, context)
            except Exception as e:
                self.log.warning("No cost estimate for %s: %s", app_handle, e)
        cost: dict[str, Any] = {"currency": prices.currency, "actual": None, "estimate": None}
        try:
            cost["actual"] = actual_cost(usage, prices)
        except TorchXConfigError as e:  # a GPU type the table cannot price
            self.log.warning("No cost for the usage of %s: %s", app_handle, e)
            cost["error"] = str(e)
        if self.estimate is not None:
            cost["estimate"] = self.estimate.to_dict()
        return usage, json_safe(cost)
