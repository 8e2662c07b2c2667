"""The price table, the estimate and max_cost (policies/cost/pricing.py); the connection's own bad
values are in the table of tests/unit/test_bad_inputs.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from torchx.specs import AppDef, Resource, Role

from torchx_airflow.exceptions import TorchXConfigError, TorchXCostLimitError
from torchx_airflow.policies.cost.pricing import (
    actual_cost,
    check_max_cost,
    estimate_cost,
    requested_resources,
)
from torchx_airflow.settings.checks import check_cost_params
from torchx_airflow.settings.connection import TorchXConnectionSettings
from torchx_airflow.settings.prices import PriceTable

PRICES = {
    "cpu_hour": 0.05,
    "gpu_hour": {"a100": 2.5, "default": 1.0},
    "mem_gb_hour": 0.005,
    "currency": "EUR",
}


def _app() -> AppDef:
    return AppDef(
        name="train",
        roles=[
            Role("trainer", image="/img", entrypoint="python", num_replicas=2, resource=Resource(4, 1, 8192)),
            Role("reader", image="/img", entrypoint="python", resource=Resource(cpu=1, gpu=0, memMB=-1)),
        ],
    )


def test_a_connection_reads_its_price_table():
    settings = TorchXConnectionSettings.from_extra("c", {"scheduler": "slurm", "prices": PRICES})
    assert settings.prices == PriceTable(0.05, {"a100": 2.5, "default": 1.0}, 0.005, "EUR")
    assert TorchXConnectionSettings.from_extra("c", {}).prices is None
    # as the connection form stores it: the JSON text, under the prefixed key
    text = TorchXConnectionSettings.from_extra("c", {"extra__torchx__prices": '{"gpu_hour": 2}'})
    assert text.prices == PriceTable(gpu_hour={"default": 2.0})


def test_gpu_prices_by_type_with_a_default():
    prices = PriceTable.from_extra("c", PRICES)
    assert prices is not None
    assert (prices.gpu_price("a100"), prices.gpu_price("h100"), prices.gpu_price("untyped")) == (
        2.5,
        1.0,
        1.0,
    )
    assert PriceTable(cpu_hour=1).gpu_price("a100") == 0  # a table that prices no GPU
    with pytest.raises(
        TorchXConfigError, match="no GPU-hour price for GPU type 'h100'.*Add 'h100' or 'default'"
    ):
        PriceTable(gpu_hour={"a100": 2.5}).gpu_price("h100")


def test_requested_resources_count_replicas_and_unset_amounts_as_zero():
    requested = requested_resources(_app())
    assert (requested["cpu"], requested["gpu"], requested["mem_mb"]) == (9, 2, 16384)
    assert requested["roles"][0] == {"role": "trainer", "replicas": 2, "cpu": 4, "gpu": 1, "mem_mb": 8192}
    assert requested["unset"] == ["reader.mem_mb"]


def test_the_estimate_prices_requested_resources_for_the_duration_and_says_how():
    prices = PriceTable.from_extra("c", PRICES)
    assert prices is not None
    estimate = estimate_cost(requested_resources(_app()), prices, 1800, "the task's expected_duration")
    # half an hour of 9 CPUs, 2 GPUs (default price: no type in a TorchX resource), 16 GB
    assert estimate.breakdown["cpu"] == pytest.approx(9 * 0.5 * 0.05)
    assert estimate.breakdown["gpu"] == {"default": pytest.approx(2 * 0.5 * 1.0)}
    assert estimate.breakdown["mem"] == pytest.approx(16 * 0.5 * 0.005)
    assert estimate.total == pytest.approx(0.225 + 1.0 + 0.04)
    text = estimate.explain()
    for part in (
        "requested 9 CPU, 2 GPU, 16384 MB memory",
        "trainer: 2 x (4 CPU, 1 GPU, 8192 MB)",
        "not set, counted as 0: reader.mem_mb",
        "for 1800 s (the task's expected_duration)",
        "0.05 EUR/CPU-h, 2.5 EUR/GPU-h (a100), 1 EUR/GPU-h (default), 0.005 EUR/GB-h",
        "= 1.2650 EUR",
    ):
        assert part in text, text
    assert estimate.to_dict()["explanation"] == text


def test_max_cost_refuses_an_estimate_over_it_and_the_message_shows_the_estimate():
    prices = PriceTable(cpu_hour=1.0)
    estimate = estimate_cost(requested_resources(_app()), prices, 3600, "the task's expected_duration")
    check_max_cost("train", 9.0, estimate)  # exactly at the limit is allowed
    check_max_cost("train", None, estimate)
    with pytest.raises(TorchXCostLimitError) as err:
        check_max_cost("train", 8.5, estimate)
    message = str(err.value)
    assert "estimated cost 9.0000 USD is over max_cost=8.5 USD, so nothing was submitted" in message
    assert "requested 9 CPU" in message and "for 3600 s (the task's expected_duration)" in message
    assert "raise max_cost" in message
    assert err.value.estimate == 9.0


def test_the_actual_cost_prices_the_usage_totals():
    prices = PriceTable.from_extra("c", PRICES)
    assert prices is not None
    usage = {
        "source": "sacct",
        "totals": {"cpu_hours": 2.0, "gpu_hours": {"a100": 1.0}, "mem_gb_hours": 10.0},
    }
    cost = actual_cost(usage, prices)
    assert cost == {
        "total": pytest.approx(0.1 + 2.5 + 0.05),
        "cpu": 0.1,
        "gpu": {"a100": 2.5},
        "mem": 0.05,
        "currency": "EUR",
        "source": "sacct",
    }
    assert actual_cost({"source": "unavailable", "reason": "x"}, prices) is None


@pytest.mark.parametrize(
    ("duration", "max_cost", "expected"),
    [
        (timedelta(hours=2), 25, (7200.0, 25.0)),
        (90, None, (90.0, None)),
        (None, 1.5, (None, 1.5)),
    ],
)
def test_task_cost_parameters(duration, max_cost, expected):
    assert check_cost_params("t", duration, max_cost) == expected
