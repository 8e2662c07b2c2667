"""Unit tests run triggers in-process: their events come at once, without the settle delay that
guards a real triggerer against Airflow's deferral race (``TorchXAppTrigger`` module docs)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_trigger_settle_delay(monkeypatch):
    monkeypatch.setattr("torchx_airflow.triggers.torchx.SETTLE_SECONDS", 0.0)


@pytest.fixture(autouse=True)
def _no_poll_interval_floor(monkeypatch):
    """Unit tests poll fake schedulers every few milliseconds; the floor has its own tests."""
    monkeypatch.setenv("AIRFLOW__TORCHX__MIN_POLL_INTERVAL", "0")
