"""A task's usage and cost (policies/cost/usage.py) through the operator: the estimate and max_cost
before anything is submitted, the usage and cost in the result and in the error of a failed app, the
fallback for schedulers without accounting, and a usage read that fails.

The scheduler is ``FakeSchedulerHook`` (tests/fakes.py, a fake, named as such): these tests pin
what the task does with the scheduler's answers. The real answers (sacct on the Slurm cluster,
local_cwd's processes) are tested in tests/unit/schedulers/test_processes.py, tests/integration/
test_usage_dags.py and tests/slurm/test_slurm_usage.py.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from torchx.specs import AppState

from tests.fakes import HANDLE, TI, FakeSchedulerHook, TaskStateStore, _context, _operator, _terminal
from torchx_airflow.exceptions import TorchXAppFailedError, TorchXConfigError, TorchXCostLimitError
from torchx_airflow.run.state import SUBMITTED_KEY
from torchx_airflow.settings.prices import PriceTable

PRICES = PriceTable(cpu_hour=0.5, mem_gb_hour=0.25, currency="EUR")
# what sacct gives for a 1-CPU, 1 GB job of 60 s (the shape of SlurmSupport.usage)
SACCT_USAGE = {
    "source": "sacct",
    "elapsed_s": 60,
    "cpu_time_s": 12.5,
    "max_rss_mb": 40.0,
    "allocated": {"cpu": 1, "mem_mb": 1024.0, "gpu": {}, "node": 1},
    "totals": {"cpu_hours": 60 / 3600, "gpu_hours": {}, "mem_gb_hours": 60 / 3600},
    "basis": {},
    "jobs": [],
}


class PreviousRunTI(TI):
    """The fake task instance, with a previous successful run whose result had ``usage``."""

    map_index = -1
    task_id = "train"

    def __init__(self, previous_result: Any) -> None:
        super().__init__()
        self.previous_result = previous_result
        self.asked: list[Any] = []

    def get_previous_ti(self, state: Any = None, map_index: int = -1) -> Any:
        self.asked.append((getattr(state, "value", state), map_index))
        return SimpleNamespace(run_id="manual__earlier") if self.previous_result is not None else None

    def xcom_pull(self, task_ids: str, run_id: str, map_indexes: int) -> Any:
        self.asked.append((task_ids, run_id, map_indexes))
        return self.previous_result


def _priced(answers: list[Any], prices: PriceTable | None = PRICES, **attrs: Any) -> FakeSchedulerHook:
    hook = FakeSchedulerHook(answers)
    hook.settings = replace(hook.settings, prices=prices)
    for name, value in attrs.items():
        setattr(hook, name, value)
    return hook


def _submitted(hook: FakeSchedulerHook) -> bool:
    return bool(getattr(hook, "tokens", None))


def test_an_estimate_over_max_cost_fails_the_task_before_anything_is_submitted():
    hook = _priced([AppState.SUCCEEDED])
    store = TaskStateStore()
    context = _context(store)
    # utils.echo asks for 1 CPU and 1024 MB: 2 h cost 2 x 0.5 + 2 x 0.25 = 1.5 EUR
    with pytest.raises(TorchXCostLimitError) as err:
        _operator(hook, max_cost=1.25, expected_duration=7200).execute(context)
    message = str(err.value)
    assert "estimated cost 1.5000 EUR is over max_cost=1.25 EUR, so nothing was submitted" in message
    assert "requested 1 CPU, 0 GPU, 1024 MB memory" in message
    assert "for 7200 s (the task's expected_duration)" in message
    assert "0.5 EUR/CPU-h" in message and "0.25 EUR/GB-h" in message
    assert not _submitted(hook) and hook.calls == 0
    assert store.values == {} and "app_handle" not in context["ti"].pushed


def test_an_estimate_within_max_cost_submits_and_the_result_has_both_costs():
    hook = _priced([AppState.SUCCEEDED], usage_answer=SACCT_USAGE)
    result = _operator(hook, max_cost=1.5, expected_duration=7200).execute(_context())
    assert _submitted(hook)
    assert result["usage"] == {**SACCT_USAGE, "requested": result["usage"]["requested"]}
    assert result["usage"]["requested"]["cpu"] == 1
    cost = result["cost"]
    assert cost["currency"] == "EUR"
    assert cost["actual"]["total"] == pytest.approx(60 / 3600 * 0.5 + 60 / 3600 * 0.25)
    assert cost["actual"]["source"] == "sacct"
    assert cost["estimate"]["total"] == pytest.approx(1.5)
    assert cost["estimate"]["duration_source"] == "the task's expected_duration"


def test_without_expected_duration_the_estimate_uses_the_last_successful_runs_elapsed():
    hook = _priced([AppState.SUCCEEDED], usage_answer=SACCT_USAGE)
    ti = PreviousRunTI({"state": "SUCCEEDED", "usage": {"source": "sacct", "elapsed_s": 3600}})
    context = {**_context(), "ti": ti}
    with pytest.raises(
        TorchXCostLimitError, match=r"for 3600 s \(elapsed of the last successful run, DAG run "
    ):
        _operator(hook, max_cost=0.5).execute(context)
    assert ti.asked == [("success", -1), ("train", "manual__earlier", -1)]
    assert not _submitted(hook)
    result = _operator(hook, max_cost=1.0).execute({**_context(), "ti": PreviousRunTI(ti.previous_result)})
    assert result["cost"]["estimate"]["total"] == pytest.approx(0.75)
    assert "'manual__earlier' (sacct)" in result["cost"]["estimate"]["duration_source"]


@pytest.mark.parametrize(
    ("prices", "previous", "fix"),
    [
        (None, None, "Add one to its extra"),
        (PRICES, None, "Set expected_duration"),
        (
            PRICES,
            {"state": "SUCCEEDED", "usage": {"source": "unavailable", "reason": "x"}},
            "expected_duration",
        ),
    ],
    ids=["no-price-table", "no-earlier-run", "earlier-run-without-usage"],
)
def test_max_cost_that_cannot_be_checked_fails_before_submitting(prices, previous, fix):
    hook = _priced([AppState.SUCCEEDED], prices=prices)
    with pytest.raises(TorchXConfigError, match=fix):
        _operator(hook, max_cost=10).execute({**_context(), "ti": PreviousRunTI(previous)})
    assert not _submitted(hook)


def test_a_failed_apps_error_carries_its_usage():
    hook = _priced([None], usage_answer={**SACCT_USAGE, "elapsed_s": 2, "cpu_time_s": 0.142})
    op = _operator(hook, expected_duration=60)
    with pytest.raises(TorchXAppFailedError) as err:
        op.execute_complete(_context(), _terminal("FAILED"))
    assert err.value.usage is not None and err.value.usage["elapsed_s"] == 2
    assert "usage (sacct): elapsed 2 s, CPU time 0.142 s" in str(err.value)
    lineage = op.get_openlineage_facets_on_failure(None)
    facet = lineage.run_facets["torchx_usage"]
    assert (facet.source, facet.elapsedSeconds, facet.cpuTimeSeconds) == ("sacct", 2, 0.142)
    assert facet.cost["actual"]["currency"] == "EUR"


def test_a_scheduler_without_accounting_counts_requested_resources_from_the_submission():
    hook = _priced([AppState.RUNNING, AppState.SUCCEEDED], accounts=False)
    store = TaskStateStore()
    result = _operator(hook).execute(_context(store))
    usage = result["usage"]
    assert usage["source"] == "requested" and usage["elapsed_s"] >= 0
    assert "submission" in usage["elapsed_basis"]
    assert usage["totals"]["cpu_hours"] == pytest.approx(usage["elapsed_s"] / 3600)
    assert store.values[SUBMITTED_KEY]["app_handle"] == HANDLE
    # a task that resumes in another process (after a deferred wait) takes the time from the store
    store.values[SUBMITTED_KEY]["at"] -= 100
    resumed = _operator(hook).execute_complete(_context(store), _terminal("SUCCEEDED"))
    assert resumed["usage"]["elapsed_s"] >= 100


def test_a_usage_read_that_fails_is_a_warning_not_a_failed_task():
    hook = _priced([AppState.SUCCEEDED], prices=None)

    def broken(handle: str) -> None:
        raise RuntimeError("sacct: Unable to contact slurm controller")

    hook.usage = broken  # type: ignore[method-assign]
    result = _operator(hook).execute(_context())
    assert result["state"] == "SUCCEEDED"
    assert result["usage"] == {
        "source": "unavailable",
        "reason": "RuntimeError: sacct: Unable to contact slurm controller",
    }
    assert "cost" not in result  # no price table


def test_without_waiting_the_result_says_why_there_is_no_usage_yet():
    hook = _priced([AppState.RUNNING], prices=None)
    result = _operator(hook, wait_for_completion=False).execute(_context())
    assert result["usage"] == {
        "source": "unavailable",
        "reason": "the app is RUNNING: its usage is read when it ends",
    }
