"""What a TorchX run costs: a connection's price table, the estimate before submitting, the actual after.

A ``torchx`` connection may carry a price table in its extra::

    {"prices": {"cpu_hour": 0.05, "gpu_hour": {"a100": 2.5, "default": 1.0},
                "mem_gb_hour": 0.005, "currency": "USD"}}

``cpu_hour`` is the price of one CPU for one hour, ``gpu_hour`` of one GPU for one hour (one number
for every type, or a price per type with ``default`` for the others), ``mem_gb_hour`` of one GB
(1024 MB, as Slurm counts) of memory for one hour. A price left out is 0.

The estimate (``estimate_cost``) is the app's requested resources (every role's replicas x cpu,
gpu, memMB) x a duration (the task's ``expected_duration``, else the elapsed time of its last
successful run); the actual cost (``actual_cost``) prices the run's ``usage`` totals (see
:mod:`torchx_airflow.usage`). Pure values: nothing here reads Airflow or a scheduler.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXConfigError, TorchXConnectionError, TorchXCostLimitError

if TYPE_CHECKING:
    from torchx.specs import AppDef

PRICE_KEYS = ("cpu_hour", "gpu_hour", "mem_gb_hour", "currency")
DEFAULT_GPU = "default"
PRICES_EXAMPLE = (
    '{"prices": {"cpu_hour": 0.05, "gpu_hour": {"a100": 2.5, "default": 1.0}, '
    '"mem_gb_hour": 0.005, "currency": "USD"}}'
)


def format_amount(amount: float) -> str:
    """An amount of money or resource-hours as text: 4 decimals, 6 below 0.001 (a short local job).

    >>> format_amount(1.265), format_amount(0.0000309)
    ('1.2650', '0.000031')
    """
    return f"{amount:.4f}" if abs(amount) >= 0.001 or amount == 0 else f"{amount:.6f}"


def _price(conn_id: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: extra 'prices' {key!r} must be a price (a number, 0 or more), got "
            f"{value!r}. Write it as e.g. {PRICES_EXAMPLE}."
        )
    return float(value)


@dataclass(frozen=True)
class PriceTable:
    """Prices per CPU-hour, GPU-hour (by GPU type) and memory GB-hour, in ``currency``."""

    cpu_hour: float = 0.0
    gpu_hour: dict[str, float] = field(default_factory=dict)
    mem_gb_hour: float = 0.0
    currency: str = "USD"

    @classmethod
    def from_extra(cls, conn_id: str, value: Any) -> PriceTable | None:
        """The ``prices`` extra of connection ``conn_id`` (a JSON object, or its text); None when unset.

        Raises ``TorchXConnectionError`` naming the key, the value and the fix.
        """
        if value is None or value == "":
            return None
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as e:
                raise TorchXConnectionError(
                    f"Connection {conn_id!r}: extra 'prices' is not valid JSON ({e}): {value!r}. "
                    f"Write it as e.g. {PRICES_EXAMPLE}."
                ) from e
        if not isinstance(value, Mapping):
            raise TorchXConnectionError(
                f"Connection {conn_id!r}: extra 'prices' must be a JSON object, got {value!r}. "
                f"Write it as e.g. {PRICES_EXAMPLE}."
            )
        for key in value:
            if key not in PRICE_KEYS:
                close = difflib.get_close_matches(str(key), PRICE_KEYS, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise TorchXConnectionError(
                    f"Connection {conn_id!r}: extra 'prices' has an unknown key {key!r}.{hint} Its keys are "
                    f"{', '.join(map(repr, PRICE_KEYS))}, e.g. {PRICES_EXAMPLE}."
                )
        if not any(key in value for key in PRICE_KEYS[:3]):
            raise TorchXConnectionError(
                f"Connection {conn_id!r}: extra 'prices' {dict(value)!r} has no price. Give at least one of "
                f"'cpu_hour', 'gpu_hour', 'mem_gb_hour', e.g. {PRICES_EXAMPLE}, or remove 'prices'."
            )
        currency = value.get("currency", "USD")
        if not isinstance(currency, str) or not currency.strip():
            raise TorchXConnectionError(
                f"Connection {conn_id!r}: extra 'prices' 'currency' must be a name such as \"USD\", got "
                f"{currency!r}."
            )
        return cls(
            cpu_hour=_price(conn_id, "cpu_hour", value.get("cpu_hour", 0)),
            gpu_hour=_gpu_prices(conn_id, value.get("gpu_hour", {})),
            mem_gb_hour=_price(conn_id, "mem_gb_hour", value.get("mem_gb_hour", 0)),
            currency=currency.strip(),
        )

    def gpu_price(self, gpu_type: str) -> float:
        """The price of one GPU-hour of ``gpu_type``: its own, else ``default``; 0 when the table
        prices no GPU at all. Raises ``TorchXConfigError`` for a type it cannot price."""
        if gpu_type in self.gpu_hour:
            return self.gpu_hour[gpu_type]
        if DEFAULT_GPU in self.gpu_hour:
            return self.gpu_hour[DEFAULT_GPU]
        if not self.gpu_hour:
            return 0.0
        raise TorchXConfigError(
            f"The price table has no GPU-hour price for GPU type {gpu_type!r} (it prices "
            f"{sorted(self.gpu_hour)}). Add {gpu_type!r} or 'default' to 'gpu_hour' in the connection's "
            "extra 'prices'."
        )

    def price(self, cpu_hours: float, gpu_hours: Mapping[str, float], mem_gb_hours: float) -> dict[str, Any]:
        """The cost of those amounts: ``{total, cpu, gpu: {type: cost}, mem, currency}``."""
        gpu = {gpu_type: hours * self.gpu_price(gpu_type) for gpu_type, hours in sorted(gpu_hours.items())}
        cpu, mem = cpu_hours * self.cpu_hour, mem_gb_hours * self.mem_gb_hour
        return {
            "total": cpu + sum(gpu.values()) + mem,
            "cpu": cpu,
            "gpu": gpu,
            "mem": mem,
            "currency": self.currency,
        }

    def describe(self) -> str:
        """The prices as text: ``0.05 USD/CPU-h, 2.5 USD/GPU-h (a100), 0.005 USD/GB-h``."""
        gpus = ", ".join(f"{p:g} {self.currency}/GPU-h ({t})" for t, p in sorted(self.gpu_hour.items()))
        parts = [
            f"{self.cpu_hour:g} {self.currency}/CPU-h",
            gpus,
            f"{self.mem_gb_hour:g} {self.currency}/GB-h",
        ]
        return ", ".join(p for p in parts if p)


def _gpu_prices(conn_id: str, value: Any) -> dict[str, float]:
    if isinstance(value, Mapping):
        return {str(gpu_type): _price(conn_id, f"gpu_hour.{gpu_type}", p) for gpu_type, p in value.items()}
    return {DEFAULT_GPU: _price(conn_id, "gpu_hour", value)}


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


def check_max_cost(task_id: str, max_cost: float | None, estimate: CostEstimate | None) -> None:
    """Raise ``TorchXCostLimitError`` when ``estimate`` is over ``max_cost``."""
    if max_cost is not None and estimate is not None and estimate.total > max_cost:
        raise TorchXCostLimitError(task_id, max_cost, estimate.total, estimate.currency, estimate.explain())


def check_cost_params(
    task_id: str, expected_duration: timedelta | float | None, max_cost: float | None
) -> tuple[float | None, float | None]:
    """A task's ``expected_duration`` in seconds and its ``max_cost``, checked: both positive numbers
    (``expected_duration`` may be a ``timedelta``) or None. Raises ``TorchXConfigError``."""
    seconds = (
        expected_duration.total_seconds() if isinstance(expected_duration, timedelta) else expected_duration
    )
    for name, value, example in (
        ("expected_duration", seconds, "timedelta(hours=2) or 7200"),
        ("max_cost", max_cost, "25.0"),
    ):
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            shown = expected_duration if name == "expected_duration" else value
            raise TorchXConfigError(
                f"Task {task_id!r}: {name} must be a positive number, got {shown!r}. Write it as e.g. "
                f"{name}={example}, or leave it out."
            )
    return (float(seconds) if seconds is not None else None), (
        float(max_cost) if max_cost is not None else None
    )
