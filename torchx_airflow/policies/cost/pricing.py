"""What a TorchX run costs: the estimate before submitting, the actual after, and ``max_cost``.

The connection's price table is ``settings.prices.PriceTable``. The estimate (``estimate_cost``) is
the app's requested resources (every role's replicas x cpu, gpu, memMB) x a duration (the task's
``expected_duration``, else the elapsed time of its last successful run); the actual cost
(``actual_cost``) prices the run's ``usage`` totals (see :mod:`torchx_airflow.policies.cost.usage`).
Pure values: nothing here reads Airflow or a scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXCostLimitError
from torchx_airflow.settings.prices import DEFAULT_GPU, PriceTable, format_amount

if TYPE_CHECKING:
    from torchx.specs import AppDef


def requested_resources(app: AppDef) -> dict[str, Any]:
    """What ``app`` asks for: per role its replicas and each replica's cpu, gpu and memory, and the
    sums over replicas. An unset amount (TorchX's ``-1``) counts as 0 and is listed in ``unset``."""
    roles: list[dict[str, Any]] = []
    unset: list[str] = []
    for role in app.roles:
        resource = role.resource
        amounts = {"cpu": resource.cpu, "gpu": resource.gpu, "mem_mb": resource.memMB}
        unset += [f"{role.name}.{name}" for name, amount in amounts.items() if amount is None or amount < 0]
        amounts = {name: max(0, amount or 0) for name, amount in amounts.items()}
        roles.append({"role": role.name, "replicas": role.num_replicas, **amounts})
    totals = {name: sum(r["replicas"] * r[name] for r in roles) for name in ("cpu", "gpu", "mem_mb")}
    return {"roles": roles, **totals, "unset": unset}


def resource_hours(
    requested: Mapping[str, Any], seconds: float, gpu_type: str = DEFAULT_GPU
) -> dict[str, Any]:
    """``requested`` held for ``seconds``: CPU-hours, GPU-hours (all of ``gpu_type``), memory GB-hours."""
    hours = seconds / 3600.0
    gpu = requested["gpu"] * hours
    return {
        "cpu_hours": requested["cpu"] * hours,
        "gpu_hours": {gpu_type: gpu} if gpu else {},
        "mem_gb_hours": requested["mem_mb"] / 1024.0 * hours,
    }


@dataclass(frozen=True)
class CostEstimate:
    """An app's cost before it runs: its requested resources for ``duration_s`` at ``prices``."""

    total: float
    currency: str
    duration_s: float
    duration_source: str
    requested: dict[str, Any]
    breakdown: dict[str, Any]
    prices: PriceTable

    def explain(self) -> str:
        """How it was made: the resources, the duration and where it came from, the prices."""
        r = self.requested
        per_role = "; ".join(
            f"{x['role']}: {x['replicas']} x ({x['cpu']} CPU, {x['gpu']} GPU, {x['mem_mb']} MB)"
            for x in r["roles"]
        )
        unset = f" (not set, counted as 0: {', '.join(r['unset'])})" if r["unset"] else ""
        b = self.breakdown
        gpu = sum(b["gpu"].values())
        return (
            f"requested {r['cpu']} CPU, {r['gpu']} GPU, {r['mem_mb']} MB memory [{per_role}]{unset} "
            f"for {self.duration_s:g} s ({self.duration_source}) at {self.prices.describe()} = "
            f"{format_amount(b['cpu'])} (CPU) + {format_amount(gpu)} (GPU) + {format_amount(b['mem'])} "
            f"(memory) = {format_amount(self.total)} {self.currency}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as the task's result and XCom show it."""
        return {
            "total": self.total,
            "currency": self.currency,
            "duration_s": self.duration_s,
            "duration_source": self.duration_source,
            "requested": self.requested,
            "breakdown": self.breakdown,
            "explanation": self.explain(),
        }


def estimate_cost(
    requested: Mapping[str, Any], prices: PriceTable, duration_s: float, duration_source: str
) -> CostEstimate:
    """The cost of ``requested`` for ``duration_s`` seconds (GPUs priced at the ``default`` price:
    a TorchX resource names no GPU type)."""
    amounts = resource_hours(requested, duration_s)
    breakdown = prices.price(amounts["cpu_hours"], amounts["gpu_hours"], amounts["mem_gb_hours"])
    return CostEstimate(
        breakdown["total"], prices.currency, duration_s, duration_source, dict(requested), breakdown, prices
    )


def actual_cost(usage: Mapping[str, Any], prices: PriceTable) -> dict[str, Any] | None:
    """The cost of a finished run from its ``usage`` totals; None when the usage has no totals."""
    totals = usage.get("totals")
    if not isinstance(totals, Mapping):
        return None
    cost = prices.price(totals["cpu_hours"], totals["gpu_hours"], totals["mem_gb_hours"])
    return {**cost, "source": usage.get("source")}


def check_max_cost(
    task_id: str, max_cost: float | None, estimate: CostEstimate | None, spent: float = 0.0
) -> None:
    """Raise ``TorchXCostLimitError`` when ``estimate``, plus what the try's earlier attempts
    ``spent``, is over ``max_cost``: the bound holds for all attempts of a task try together."""
    if max_cost is None or estimate is None or estimate.total + spent <= max_cost:
        return
    explanation = estimate.explain()
    if spent:
        explanation += (
            f"; plus {spent:.4f} {estimate.currency} already spent by this try's earlier attempts of the "
            "job (max_cost bounds them all together)"
        )
    raise TorchXCostLimitError(task_id, max_cost, estimate.total + spent, estimate.currency, explanation)
