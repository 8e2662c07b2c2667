"""SharedPoller: one batched status query per interval for every waiting trigger of a process.

``BatchFakeHook`` is a fake scheduler (named as such) that counts the batched queries; the same
poller runs against the real Slurm cluster in tests/slurm/test_slurm_shared_polling.py.
"""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

import pytest
from torchx.specs import AppState, AppStatus

from torchx_airflow.triggers.poller import SharedPoller, bisect_statuses, shared_poller


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
    # nothing answers (an outage): the batch and two apps alone, no split into every handle
    assert len(hook.batches) == 3


class PoisonFakeHook(BatchFakeHook):
    """Fake scheduler whose batched query fails whenever it holds one of the ``poison`` handles,
    as ``sacct -j 100,١٢٣`` fails for every id when one is not a job id."""

    def __init__(self, states: dict[str, AppState | None], poison: set[str]) -> None:
        super().__init__(states)
        self.poison = poison

    def statuses(self, handles: list[str]) -> dict[str, AppStatus | None]:
        self.batches.append(list(handles))
        bad = sorted(self.poison.intersection(handles))
        if bad:
            raise RuntimeError(f"sacct: Invalid job id specified: {bad[0]}")
        return {h: self._status(h) for h in handles}


@pytest.mark.parametrize("poison_at", [[0], [999], [0, 999], [17, 500, 501]])
def test_a_failing_batch_is_split_until_the_error_reaches_only_the_bad_handles(poison_at):
    handles = sorted(_handles(1000))
    poison = {handles[i] for i in poison_at}
    hook = PoisonFakeHook(dict.fromkeys(handles, AppState.RUNNING), poison)
    answers, queries = bisect_statuses(hook.statuses, handles)
    assert {h for h, a in answers.items() if isinstance(a, Exception)} == poison
    assert all(answers[h].state == AppState.RUNNING for h in handles if h not in poison)
    assert queries <= 3 + 2 * len(poison) * math.ceil(math.log2(1000))


def test_an_outage_costs_three_queries_not_a_split_into_every_handle():
    handles = _handles(5000)
    hook = BatchFakeHook(dict.fromkeys(handles, AppState.RUNNING), fail_batches=10**6)
    answers, queries = bisect_statuses(hook.statuses, handles)
    assert queries == 3 and all(isinstance(answers[h], RuntimeError) for h in handles)


def test_a_poison_handle_ends_only_its_own_wait_in_the_poller():
    handles = _handles(50)
    hook = PoisonFakeHook(dict.fromkeys(handles, AppState.RUNNING), {handles[7]})

    async def main():
        return await _first_answers(shared_poller("conn", "slurm", lambda: hook), handles, interval=0.01)

    answers = dict(zip(handles, asyncio.run(main()), strict=True))
    assert isinstance(answers.pop(handles[7]), RuntimeError)
    assert all(a.state == AppState.RUNNING for a in answers.values())


def test_the_shared_query_never_runs_faster_than_the_floor(monkeypatch):
    """A deferrable sensor with poke_interval=0 must not make the poller query in a tight loop."""
    monkeypatch.setenv("AIRFLOW__TORCHX__MIN_POLL_INTERVAL", "0.2")
    handles = _handles(3)
    hook = BatchFakeHook(dict.fromkeys(handles, AppState.RUNNING))

    async def main():
        poller = shared_poller("conn", "slurm", lambda: hook)
        started = asyncio.get_running_loop().time()
        async with poller.subscribe(handles[0], 0.0) as sub:
            for handle in handles[1:]:  # joiners wake the loop: still no faster than the floor
                async with poller.subscribe(handle, 0.0):
                    await asyncio.sleep(0)
            while asyncio.get_running_loop().time() - started < 1.0:
                await sub.answers.get()
        return poller

    poller = asyncio.run(main())
    assert poller.floor == 0.2
    assert 3 <= len(hook.batches) <= 1.0 / 0.2 + 1


@pytest.mark.parametrize("second", [("conn", "kubernetes"), ("other_conn", "slurm")])
def test_pollers_are_per_connection_and_scheduler(second):
    async def main():
        first = shared_poller("conn", "slurm", lambda: None)
        return first, shared_poller("conn", "slurm", lambda: None), shared_poller(*second, lambda: None)

    first, same, other = asyncio.run(main())
    assert first is same and first is not other


def test_thousands_of_triggers_are_woken_a_batch_per_loop_iteration():
    """After a query, no event-loop iteration runs more than WAKE_BATCH (250) woken triggers."""
    handles = _handles(1000)
    hook = BatchFakeHook(dict.fromkeys(handles, AppState.RUNNING))
    woken_per_iteration: list[int] = []

    async def main():
        loop = asyncio.get_running_loop()
        counter = {"n": 0}

        def tick():  # runs once per loop iteration while the test waits
            woken_per_iteration.append(counter["n"])
            counter["n"] = 0
            if not done.is_set():
                loop.call_soon(tick)

        done = asyncio.Event()
        poller = shared_poller("conn", "slurm", lambda: hook)

        async def one(handle: str) -> None:
            async with poller.subscribe(handle, 60) as sub:
                await sub.answers.get()
                counter["n"] += 1

        loop.call_soon(tick)
        await asyncio.gather(*(one(h) for h in handles))
        done.set()

    asyncio.run(main())
    assert sum(woken_per_iteration) == 1000
    assert max(woken_per_iteration) <= 250
