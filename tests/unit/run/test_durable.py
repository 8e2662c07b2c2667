"""The durable submission (torchx_airflow/run/durable.py) through the operator: the submission mark in
the task state store before the job reaches the scheduler, the handle persisted, and a retry that
reattaches, finds the job an earlier try submitted, or submits again. The scheduler is
``FakeSchedulerHook`` (tests/fakes.py); the real one runs in tests/slurm."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from torchx.specs import AppState

from tests.fakes import HANDLE, FakeSchedulerHook, TaskStateStore, _context, _operator, handle_keys
from torchx_airflow.exceptions import TorchXError


def test_a_retry_with_a_running_app_reattaches_and_defers_without_submitting():
    hook = FakeSchedulerHook([AppState.RUNNING])
    hook.schedule = None  # type: ignore[assignment]  # any submission would fail the test
    store = TaskStateStore()
    store.set("torchx_app_handle", HANDLE)
    with pytest.raises(TaskDeferred):
        _operator(hook, deferrable=True).execute(_context(store))


def test_a_submission_is_marked_in_the_store_before_it_reaches_the_scheduler():
    hook = FakeSchedulerHook([AppState.RUNNING])
    store = TaskStateStore()
    marks = []
    schedule = hook.schedule

    def schedule_and_look(info: Any, token: str | None = None) -> str:
        marks.append(dict(store.values))  # what a retry would find if this process died now
        return schedule(info, token)

    hook.schedule = schedule_and_look  # type: ignore[method-assign]
    with pytest.raises(TaskDeferred):
        _operator(hook, deferrable=True).execute(_context(store))
    (mark,) = marks
    assert mark["torchx_submission"]["token"] == hook.tokens[0] and hook.tokens[0]
    assert mark["torchx_submission"]["scheduler"] == "slurm"
    # the mark goes only once the handle is stored
    assert store.writes[:3] == [("set", "torchx_submission"), ("set", "torchx_app_handle"),
                                ("delete", "torchx_submission")]  # fmt: skip
    assert handle_keys(store) == {"torchx_app_handle": HANDLE}


def test_a_scheduler_that_cannot_find_a_job_by_its_mark_gets_no_mark():
    hook = FakeSchedulerHook([AppState.RUNNING])
    hook.finds = False
    store = TaskStateStore()
    with pytest.raises(TaskDeferred):
        _operator(hook, deferrable=True).execute(_context(store))
    assert hook.tokens == [None]
    assert ("set", "torchx_submission") not in store.writes


def test_a_retry_finds_the_job_a_try_submitted_but_died_before_recording_and_reattaches():
    hook = FakeSchedulerHook([AppState.RUNNING])
    hook.found = HANDLE
    hook.schedule = None  # type: ignore[assignment]  # any submission would fail the test
    store = TaskStateStore()
    store.set("torchx_submission", {"token": "t0k3n", "scheduler": "slurm", "since": 1.0})
    with pytest.raises(TaskDeferred):
        _operator(hook, deferrable=True).execute(_context(store))
    assert hook.searched == ("slurm", "t0k3n")
    assert handle_keys(store) == {"torchx_app_handle": HANDLE}


def test_a_retry_whose_earlier_submission_never_reached_the_scheduler_submits():
    hook = FakeSchedulerHook([AppState.RUNNING])
    store = TaskStateStore()
    store.set("torchx_submission", {"token": "t0k3n", "scheduler": "slurm", "since": 1.0})
    with pytest.raises(TaskDeferred):
        _operator(hook, deferrable=True).execute(_context(store))
    assert hook.searched == ("slurm", "t0k3n")
    assert len(hook.tokens) == 1 and hook.tokens[0] != "t0k3n"
    assert handle_keys(store) == {"torchx_app_handle": HANDLE}


def test_a_scheduler_that_cannot_tell_fails_the_try_submitting_nothing_and_keeps_the_mark(monkeypatch):
    monkeypatch.setattr("torchx_airflow.run.durable._LOOKUP_INTERVAL", 0.01)
    hook = FakeSchedulerHook([AppState.RUNNING])
    hook.found = RuntimeError("squeue failed (exit code 1): slurm_load_jobs error")
    hook.schedule = None  # type: ignore[assignment]
    store = TaskStateStore()
    mark = {"token": "t0k3n", "scheduler": "slurm", "since": 1.0}
    store.set("torchx_submission", mark)
    with pytest.raises(TorchXError, match="could not say whether that job exists") as error:
        _operator(hook, deferrable=True, outage_timeout=0.2).execute(_context(store))
    assert "squeue failed" in str(error.value) and "state-store/torchx_submission" in str(error.value)
    assert store.values == {"torchx_submission": mark}


def test_a_mark_that_cannot_be_removed_after_the_handle_is_stored_only_warns():
    hook = FakeSchedulerHook([AppState.RUNNING])
    store = TaskStateStore()

    def delete(key: str) -> None:
        raise RuntimeError("API server unavailable")

    store.delete = delete  # type: ignore[method-assign]
    context = _context(store)
    with pytest.raises(TaskDeferred):  # the wait goes on
        _operator(hook, deferrable=True).execute(context)
    assert store.values["torchx_app_handle"] == HANDLE
    assert context["ti"].pushed["app_handle"] == HANDLE
