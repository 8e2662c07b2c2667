"""What the lineage view shows of a run's usage and cost, and their sum over a DAG run.

A run's usage and cost are what its task recorded (``policies.cost.usage``): the task's result XCom
(``usage``, ``cost``) for a run of the DAG run shown, the tracker metadata (``torchx_usage``,
``torchx_cost``) for any run. The view keeps the figures it shows: source, elapsed and CPU time,
CPU-hours, GPU-hours by type, memory GB-hours and the actual cost.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torchx_airflow.settings.prices import format_amount


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class RunUsage:
    """One run's usage figures and actual cost, as the view shows them."""

    source: str
    elapsed_s: float | None = None
    cpu_time_s: float | None = None
    cpu_hours: float | None = None
    gpu_hours: dict[str, float] = field(default_factory=dict)
    mem_gb_hours: float | None = None
    cost: float | None = None
    currency: str | None = None

    @classmethod
    def from_values(cls, usage: object, cost: object = None) -> RunUsage | None:
        """From a recorded ``usage`` dict (and ``cost`` dict); None when there is no usage."""
        if not isinstance(usage, Mapping) or not isinstance(usage.get("source"), str):
            return None
        totals = _mapping(usage.get("totals"))
        gpu = _mapping(totals.get("gpu_hours"))
        actual = _mapping(cost.get("actual") if isinstance(cost, Mapping) else None)
        return cls(
            source=usage["source"],
            elapsed_s=_number(usage.get("elapsed_s")),
            cpu_time_s=_number(usage.get("cpu_time_s")),
            cpu_hours=_number(totals.get("cpu_hours")),
            gpu_hours={str(k): float(v) for k, v in gpu.items() if _number(v) is not None},
            mem_gb_hours=_number(totals.get("mem_gb_hours")),
            cost=_number(actual.get("total")),
            currency=actual.get("currency") if isinstance(actual.get("currency"), str) else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as the lineage endpoint answers it."""
        return {
            "source": self.source,
            "elapsed_s": self.elapsed_s,
            "cpu_time_s": self.cpu_time_s,
            "cpu_hours": self.cpu_hours,
            "gpu_hours": dict(self.gpu_hours),
            "mem_gb_hours": self.mem_gb_hours,
            "cost": self.cost,
            "currency": self.currency,
        }

    def text(self) -> str:
        """One short line for a run's card: ``43 s · 0.0358 CPU-h · 0.0015 USD``."""
        if self.elapsed_s is None:
            return f"usage {self.source}"
        parts = [f"{self.elapsed_s:g} s"]
        if self.cpu_hours is not None:
            parts.append(f"{format_amount(self.cpu_hours)} CPU-h")
        gpu = sum(self.gpu_hours.values())
        if gpu:
            parts.append(f"{format_amount(gpu)} GPU-h")
        if self.cost is not None:
            parts.append(f"{format_amount(self.cost)} {self.currency or ''}".rstrip())
        return " · ".join(parts)


def usage_total(usages: Iterable[RunUsage | None]) -> dict[str, Any]:
    """The sum over runs: every figure summed over the runs that have it, cost per currency."""
    runs = list(usages)
    known = [u for u in runs if u is not None]
    gpu_hours: dict[str, float] = {}
    cost: dict[str, float] = {}
    for usage in known:
        for gpu_type, hours in usage.gpu_hours.items():
            gpu_hours[gpu_type] = gpu_hours.get(gpu_type, 0.0) + hours
        if usage.cost is not None:
            cost[usage.currency or ""] = cost.get(usage.currency or "", 0.0) + usage.cost
    return {
        "runs": len(runs),
        "runs_with_usage": len(known),
        "elapsed_s": sum(u.elapsed_s for u in known if u.elapsed_s is not None),
        "cpu_time_s": sum(u.cpu_time_s for u in known if u.cpu_time_s is not None),
        "cpu_hours": sum(u.cpu_hours for u in known if u.cpu_hours is not None),
        "gpu_hours": gpu_hours,
        "mem_gb_hours": sum(u.mem_gb_hours for u in known if u.mem_gb_hours is not None),
        "cost": cost,
    }


def total_text(total: Mapping[str, Any]) -> str:
    """The header's line: ``usage of 4 runs: 120 s, 0.0333 CPU-h, 0 GPU-h, 0.0100 GB-h · 0.0020 USD``."""
    if not total["runs_with_usage"]:
        return "no usage recorded"
    gpu = sum(total["gpu_hours"].values())
    text = (
        f"usage of {total['runs_with_usage']} of {total['runs']} runs: {total['elapsed_s']:g} s, "
        f"{format_amount(total['cpu_hours'])} CPU-h, {format_amount(gpu)} GPU-h, "
        f"{format_amount(total['mem_gb_hours'])} GB-h"
    )
    costs = ", ".join(
        f"{format_amount(amount)} {currency}".rstrip() for currency, amount in sorted(total["cost"].items())
    )
    return f"{text} · cost {costs}" if costs else text
