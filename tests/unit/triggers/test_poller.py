"""SharedPoller: one batched status query per interval for every waiting trigger of a process.

``BatchFakeHook`` is a fake scheduler (named as such) that counts the batched queries; the same
poller runs against the real Slurm cluster in tests/slurm/test_slurm_shared_polling.py.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from torchx.specs import AppState, AppStatus

from torchx_airflow.triggers.poller import SharedPoller, shared_poller


class BatchFakeHook:
    """Fake scheduler: ``states[handle]`` answers; handles in ``drop`` are left out of batches."""

    def __init__(self, states: dict[str, AppState | None], fail_batches: int = 0) -> None:
        self.states = dict(states)
        self.fail_batches = fail_batches
        self.batches: list[list[str]] = []
        self.singles: list[str] = []
        self.drop: set[str] = set()
        self.threads: set[str] = set()
        self.closed = 0

    def _status(self, handle: str) -> AppStatus | None:
        state = self.states[handle]
        return None if state is None else AppStatus(state=state)

    def statuses(self, handles: list[str]) -> dict[str, AppStatus | None]:
        self.threads.add(threading.current_thread().name)
        self.batches.append(list(handles))
        if self.fail_batches:
            self.fail_batches -= 1
            raise RuntimeError("sacct: Unable to contact slurm controller")
        return {h: self._status(h) for h in handles if h not in self.drop}

    def status(self, handle: str) -> AppStatus | None:
        self.singles.append(handle)
        return self._status(handle)

    def close(self) -> None:
        self.closed += 1


def _handles(n: int) -> list[str]:
    return [f"slurm://torchx/{i}" for i in range(n)]


async def _first_answers(poller: SharedPoller, handles: list[str], interval: float = 0.05) -> list[Any]:
    async def one(handle: str) -> Any:
        async with poller.subscribe(handle, interval) as sub:
            return await sub.answers.get()

    return await asyncio.gather(*(one(h) for h in handles))


def test_many_waits_share_one_batched_query_off_the_event_loop():
    handles = _handles(200)
    hook = BatchFakeHook(dict.fromkeys(handles, AppState.RUNNING))

    async def main():
        poller = shared_poller("conn", "slurm", lambda: hook)
        answers = await _first_answers(poller, handles)
        for _ in range(500):  # the loop ends on its own once the last subscriber left
            if poller._task is None and hook.closed:
                break
            await asyncio.sleep(0.01)
        return poller, answers

    poller, answers = asyncio.run(main())
    assert all(a.state == AppState.RUNNING for a in answers)
    assert len(hook.batches) <= 2 and sorted(hook.batches[-1]) == sorted(handles)
    assert threading.main_thread().name not in hook.threads
    assert hook.closed == 1  # the last subscriber left: the loop ended and released its hook


def test_polls_every_interval_while_anyone_waits_and_triggers_join_and_leave_at_any_time():
    a, b = _handles(2)
    hook = BatchFakeHook({a: AppState.RUNNING, b: AppState.RUNNING})

    async def main():
        poller = shared_poller("conn", "slurm", lambda: hook)
        async with poller.subscribe(a, 0.02) as sub_a:
            for _ in range(3):
                await sub_a.answers.get()
            async with poller.subscribe(b, 0.02) as sub_b:
                assert (await sub_b.answers.get()).state == AppState.RUNNING
                hook.states[b] = AppState.SUCCEEDED
                while (await sub_b.answers.get()).state != AppState.SUCCEEDED:
                    pass
            batches_with_b = len(hook.batches)
            await sub_a.answers.get()
            await sub_a.answers.get()
        return batches_with_b

    batches_with_b = asyncio.run(main())
    assert any(len(batch) == 2 for batch in hook.batches)
    assert all(batch == [a] for batch in hook.batches[batches_with_b + 1 :])  # b left: no longer asked


def test_an_app_missing_from_the_batch_is_asked_for_on_its_own():
    a, b = _handles(2)
    hook = BatchFakeHook({a: AppState.RUNNING, b: None})
    hook.drop = {b}

    async def main():
        return await _first_answers(shared_poller("conn", "slurm", lambda: hook), [a, b])

    answer_a, answer_b = asyncio.run(main())
    assert answer_a.state == AppState.RUNNING and answer_b is None  # None: the scheduler does not know it
    assert hook.singles == [b]


def test_a_query_that_keeps_failing_reaches_every_waiting_trigger_and_none_hangs():
    handles = _handles(3)
    hook = BatchFakeHook(dict.fromkeys(handles, AppState.RUNNING), fail_batches=100)

    async def main():
        poller = shared_poller("conn", "slurm", lambda: hook)
        return await asyncio.wait_for(_first_answers(poller, handles, interval=0.01), timeout=60)

    answers = asyncio.run(main())
    assert all(isinstance(a, RuntimeError) for a in answers)
    assert len(hook.batches) == 5  # the shared status policy's attempts, once for everyone


def test_a_few_failed_queries_are_retried_and_nobody_sees_them():
    handles = _handles(3)
    hook = BatchFakeHook(dict.fromkeys(handles, AppState.SUCCEEDED), fail_batches=2)

    async def main():
        return await _first_answers(shared_poller("conn", "slurm", lambda: hook), handles, interval=0.01)

    assert all(a.state == AppState.SUCCEEDED for a in asyncio.run(main()))


@pytest.mark.parametrize("second", [("conn", "kubernetes"), ("other_conn", "slurm")])
def test_pollers_are_per_connection_and_scheduler(second):
    async def main():
        first = shared_poller("conn", "slurm", lambda: None)
        return first, shared_poller("conn", "slurm", lambda: None), shared_poller(*second, lambda: None)

    first, same, other = asyncio.run(main())
    assert first is same and first is not other
