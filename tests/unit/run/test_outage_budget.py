"""One outage budget for every wait: the task's ``outage_timeout``, else its connection's extra, else
``[torchx] outage_timeout``, resolved the same way by the operator (worker wait and trigger), the
sensor (poke and trigger) and the hook's own ``wait``. Each wait below meets a scheduler that never
answers and gives up after exactly the budget it resolved, which its error names."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from torchx.specs import AppState

from tests.fakes import HANDLE, FakeSchedulerHook, TaskStateStore, _context, _operator
from torchx_airflow.exceptions import TorchXSchedulerOutageError
from torchx_airflow.settings.connection import TorchXConnectionSettings

# (task's outage_timeout, connection's, site's): the budget each wait must use
CASES = [(0.2, 0.4, 0.6, 0.2), (None, 0.4, 0.6, 0.4), (None, None, 0.6, 0.6)]
IDS = ["task-wins", "connection-over-site", "site"]
DOWN = RuntimeError("slurmctld restarting")


def _scheduler(answers: list[Any], connection: float | None) -> FakeSchedulerHook:
    hook = FakeSchedulerHook(answers)
    hook.settings = TorchXConnectionSettings(scheduler="slurm", outage_timeout=connection)
    return hook


@pytest.fixture
def site(monkeypatch):
    def set_site(seconds: float) -> None:
        monkeypatch.setenv("AIRFLOW__TORCHX__OUTAGE_TIMEOUT", str(seconds))

    return set_site


def _budget_in(error: BaseException) -> str:
    return str(error).split("more than outage_timeout (", 1)[1].split(" s)")[0]


@pytest.mark.parametrize(("task", "connection", "site_seconds", "budget"), CASES, ids=IDS)
def test_the_operators_worker_wait(site, task, connection, site_seconds, budget):
    site(site_seconds)
    hook = _scheduler([AppState.RUNNING, DOWN], connection)
    op = _operator(hook, outage_timeout=task)
    with pytest.raises(TorchXSchedulerOutageError) as gave_up:
        op.execute(_context(TaskStateStore()))
    assert _budget_in(gave_up.value) == f"{budget:g}"


@pytest.mark.parametrize(("task", "connection", "site_seconds", "budget"), CASES, ids=IDS)
def test_the_operators_trigger(site, task, connection, site_seconds, budget):
    site(site_seconds)
    op = _operator(_scheduler([AppState.RUNNING], connection), outage_timeout=task, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(_context(TaskStateStore()))
    assert deferred.value.trigger.serialize()[1]["outage_timeout"] == budget


def _sensor(hook: FakeSchedulerHook, task: float | None, **kwargs: Any) -> Any:
    from torchx_airflow.sensors.torchx import TorchXAppSensor

    sensor = TorchXAppSensor(
        task_id="wait", app_handle=HANDLE, poke_interval=0.01, outage_timeout=task, **kwargs
    )
    sensor.__dict__["hook"] = hook
    return sensor


@pytest.mark.parametrize(("task", "connection", "site_seconds", "budget"), CASES, ids=IDS)
def test_the_sensors_poke(site, task, connection, site_seconds, budget):
    site(site_seconds)
    sensor = _sensor(_scheduler([DOWN], connection), task)
    with pytest.raises(TorchXSchedulerOutageError) as gave_up:
        sensor.execute(_context())
    assert _budget_in(gave_up.value) == f"{budget:g}"


@pytest.mark.parametrize(("task", "connection", "site_seconds", "budget"), CASES, ids=IDS)
def test_the_sensors_trigger(site, task, connection, site_seconds, budget):
    site(site_seconds)
    sensor = _sensor(_scheduler([AppState.RUNNING], connection), task, deferrable=True, timeout=60)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(_context())
    assert deferred.value.trigger.serialize()[1]["outage_timeout"] == budget


@pytest.mark.parametrize(("connection", "site_seconds", "budget"), [(0.4, 0.6, 0.4), (None, 0.6, 0.6)])
def test_the_hooks_wait(site, monkeypatch, connection, site_seconds, budget):
    from torchx_airflow.hooks.torchx import TorchXHook

    site(site_seconds)
    hook = TorchXHook("torchx_default")
    fake = _scheduler([DOWN], connection)
    hook.__dict__["settings"] = fake.settings
    monkeypatch.setattr(hook, "status", fake.status)
    with pytest.raises(TorchXSchedulerOutageError) as gave_up:
        hook.wait(HANDLE, wait_interval=0.01)
    assert _budget_in(gave_up.value) == f"{budget:g}"
