"""The heap of a triggerer with thousands of waits is frozen once they are set up (their objects out
of the full garbage collection's walk), and unfrozen when they are gone (triggers/heap.py).

``BatchFakeHook`` (tests/unit/triggers/test_poller.py) is the fake scheduler, named as such; the
lateness the freeze buys is measured against real Slurm jobs by bench/bench_triggerer.py.
"""

from __future__ import annotations

import asyncio
import gc

import pytest
from torchx.specs import AppState

from tests.unit.triggers.test_poller import BatchFakeHook, _handles
from torchx_airflow.triggers import heap
from torchx_airflow.triggers.poller import shared_poller


@pytest.fixture(autouse=True)
def unfrozen():
    """Every test starts and ends with nothing frozen and a fresh freezer."""
    gc.unfreeze()
    saved = heap.FREEZER.frozen_waits, heap.FREEZER.ended
    heap.FREEZER.frozen_waits = heap.FREEZER.ended = 0
    yield
    gc.unfreeze()
    heap.FREEZER.frozen_waits, heap.FREEZER.ended = saved


def test_a_poll_of_thousands_of_waits_freezes_the_heap_and_their_end_unfreezes_it(monkeypatch):
    monkeypatch.setattr(heap, "FREEZE_FROM", 300)
    handles = _handles(300)
    hook = BatchFakeHook(dict.fromkeys(handles, AppState.RUNNING))
    frozen_while_waiting: list[int] = []

    async def main():
        poller = shared_poller("conn", "slurm", lambda: hook)
        waiting = asyncio.Event()

        async def one(handle: str) -> None:
            async with poller.subscribe(handle, 60) as sub:
                await sub.answers.get()
                await waiting.wait()

        waits = [asyncio.ensure_future(one(h)) for h in handles]
        for _ in range(1000):  # the first poll answers every wait, then freezes (bounded: 10 s)
            if gc.get_freeze_count():
                break
            await asyncio.sleep(0.01)
        frozen_while_waiting.append(gc.get_freeze_count())
        waiting.set()
        await asyncio.gather(*waits)
        for _ in range(1000):
            if poller._task is None:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert frozen_while_waiting[0] > 0
    assert heap.FREEZER.frozen_waits == 0
    assert gc.get_freeze_count() == 0  # the waits ended: what they left can be collected again


def test_fewer_waits_than_the_threshold_freeze_nothing():
    heap.FREEZER.after_poll(heap.FREEZE_FROM - 1)
    assert gc.get_freeze_count() == 0


def test_the_heap_is_collected_and_frozen_again_once_half_the_frozen_waits_ended(monkeypatch):
    collections: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(1) or 0)
    freezer = heap.HeapFreezer()
    freezer.after_poll(2000)
    assert freezer.frozen_waits == 2000 and gc.get_freeze_count() > 0
    for _ in range(999):
        freezer.wait_ended()
    freezer.after_poll(2000)  # ended waits replaced by new ones: the count alone does not move
    assert collections == []
    freezer.wait_ended()
    freezer.after_poll(2000)
    assert collections == [1] and freezer.ended == 0 and gc.get_freeze_count() > 0
    freezer.after_poll(2400)  # grown, but not by a quarter
    assert freezer.frozen_waits == 2000
    freezer.after_poll(2500)
    assert freezer.frozen_waits == 2500
