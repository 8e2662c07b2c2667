"""The trigger's contracts: its exact serialized form (also of triggers serialized by older
versions), the one status retry policy, and a sensor's deadline that cancels nothing. The scheduler
is ``FakeSchedulerHook`` (tests/fakes.py)."""

from __future__ import annotations

import asyncio
import time

from torchx.specs import AppState

from tests.fakes import HANDLE, TRIGGER_PATH, FakeSchedulerHook
from torchx_airflow.triggers.torchx import TorchXAppTrigger


def test_trigger_serializes_to_its_class_path_and_exact_primitive_kwargs():
    trigger = TorchXAppTrigger(
        app_handle=HANDLE,
        torchx_conn_id="torchx_slurm",
        poll_interval=3,
        deadline=1700000000.5,
        log_cursor={"trainer/0/stdout": 7},
        cancel_on_kill=False,
        log_replicas={"trainer": 2},
        tracker_conn_ids=["mlflow_default"],
        outage_timeout=1800,
        log_offsets={"trainer/0/stdout": 4096},
    )
    assert trigger.serialize() == (
        TRIGGER_PATH,
        {
            "app_handle": HANDLE,
            "torchx_conn_id": "torchx_slurm",
            "poll_interval": 3.0,
            "deadline": 1700000000.5,
            "log_cursor": {"trainer/0/stdout": 7},
            "cancel_on_kill": False,
            "log_replicas": {"trainer": 2},
            "tracker_conn_ids": ["mlflow_default"],
            "outage_timeout": 1800.0,
            "log_offsets": {"trainer/0/stdout": 4096},
        },
    )


def test_a_trigger_serialized_before_live_logs_existed_is_still_re_created():
    old_kwargs = {"app_handle": HANDLE, "torchx_conn_id": "c", "poll_interval": 5.0, "deadline": None,
                  "log_cursor": {}, "cancel_on_kill": True}  # fmt: skip
    assert TorchXAppTrigger(**old_kwargs).serialize()[1] == {
        **old_kwargs,
        "log_replicas": None,
        "tracker_conn_ids": [],
        "outage_timeout": None,
        "log_offsets": {},
    }


def test_the_trigger_follows_the_same_retry_policy():
    boom = RuntimeError("sacct: timeout")
    hook = FakeSchedulerHook([boom, boom, AppState.SUCCEEDED])
    trigger = TorchXAppTrigger(HANDLE, poll_interval=0.01)
    trigger._hook = lambda: hook  # type: ignore[method-assign]

    async def collect():
        return [event.payload async for event in trigger.run()]

    events = asyncio.run(collect())
    assert [e["status"] for e in events] == ["terminal"] and hook.calls == 3
    hook = FakeSchedulerHook([boom])
    trigger = TorchXAppTrigger(HANDLE, poll_interval=0.01, outage_timeout=0.1)
    trigger._hook = lambda: hook  # type: ignore[method-assign]
    events = asyncio.run(collect())
    assert [e["status"] for e in events] == ["error"] and "outage_timeout" in events[0]["message"]


def test_a_sensor_trigger_deadline_reports_timeout_and_cancels_nothing():
    hook = FakeSchedulerHook([AppState.RUNNING])
    trigger = TorchXAppTrigger(HANDLE, poll_interval=0.02, deadline=time.time() + 0.1, cancel_on_kill=False)
    trigger._hook = lambda: hook  # type: ignore[method-assign]

    async def collect():
        return [event.payload async for event in trigger.run()]

    (event,) = asyncio.run(collect())
    assert event["status"] == "timeout" and event["state"] == "RUNNING"
    assert hook.cancelled == []
