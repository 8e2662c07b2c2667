"""What the lineage view shows of a run's usage and cost, and their sum over a DAG run."""

from __future__ import annotations

import pytest

from torchx_airflow.plugins.usage_view import RunUsage, total_text, usage_total

SACCT = {
    "source": "sacct",
    "elapsed_s": 120,
    "cpu_time_s": 200.5,
    "totals": {"cpu_hours": 0.5, "gpu_hours": {"a100": 1.5, "h100": 0.25}, "mem_gb_hours": 2.0},
}
COST = {"actual": {"total": 3.0, "currency": "USD"}, "estimate": {"total": 99.0}}


def test_a_recorded_usage_and_its_actual_cost_are_read_figure_by_figure():
    usage = RunUsage.from_values(SACCT, COST)
    assert usage == RunUsage("sacct", 120.0, 200.5, 0.5, {"a100": 1.5, "h100": 0.25}, 2.0, 3.0, "USD")
    assert usage.text() == "120 s · 0.5000 CPU-h · 1.7500 GPU-h · 3.0000 USD"
    assert usage.to_dict()["gpu_hours"] == {"a100": 1.5, "h100": 0.25}


@pytest.mark.parametrize("recorded", [None, "sacct", {"elapsed_s": 3}, {"source": 7}, ["sacct"]])
def test_no_usage_without_a_recorded_source(recorded):
    assert RunUsage.from_values(recorded, COST) is None


def test_figures_a_job_wrote_wrongly_are_left_out_not_shown_or_summed():
    usage = RunUsage.from_values(
        {"source": "proc", "elapsed_s": True, "totals": {"cpu_hours": "lots", "gpu_hours": {"a100": "x"}}},
        {"actual": {"total": "free", "currency": 5}},
    )
    assert usage == RunUsage("proc")
    assert usage.text() == "usage proc"


def test_the_total_sums_each_figure_over_the_runs_that_have_it_and_cost_per_currency():
    eur = RunUsage("sacct", 30.0, None, 0.25, {"a100": 0.5}, None, 1.0, "EUR")
    runs = [RunUsage.from_values(SACCT, COST), RunUsage.from_values(SACCT, COST), eur, None]
    total = usage_total(runs)
    assert total == {
        "runs": 4,
        "runs_with_usage": 3,
        "elapsed_s": 270.0,
        "cpu_time_s": 401.0,
        "cpu_hours": 1.25,
        "gpu_hours": {"a100": 3.5, "h100": 0.5},
        "mem_gb_hours": 4.0,
        "cost": {"USD": 6.0, "EUR": 1.0},
    }
    assert total_text(total) == (
        "usage of 3 of 4 runs: 270 s, 1.2500 CPU-h, 4.0000 GPU-h, 4.0000 GB-h · cost 1.0000 EUR, 6.0000 USD"
    )


def test_a_dag_run_without_usage_says_so():
    assert total_text(usage_total([None, None])) == "no usage recorded"
