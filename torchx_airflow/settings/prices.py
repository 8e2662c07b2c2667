"""A ``torchx`` connection's price table: prices per CPU-hour, GPU-hour by type and memory GB-hour.

The connection's extra::

    {"prices": {"cpu_hour": 0.05, "gpu_hour": {"a100": 2.5, "default": 1.0},
                "mem_gb_hour": 0.005, "currency": "USD"}}

``cpu_hour`` is the price of one CPU for one hour, ``gpu_hour`` of one GPU for one hour (one number
for every type, or a price per type with ``default`` for the others), ``mem_gb_hour`` of one GB
(1024 MB, as Slurm counts) of memory for one hour. A price left out is 0. What the prices are used
for (estimates, ``max_cost``, actual costs) is ``policies.cost``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torchx_airflow.exceptions import TorchXConfigError, TorchXConnectionError
from torchx_airflow.settings.extras import parse_json_object

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
            value = parse_json_object(conn_id, "prices", value, PRICES_EXAMPLE)
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
