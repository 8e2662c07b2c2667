"""One status query per poll interval for every app waited on in a triggerer process.

Every ``TorchXAppTrigger`` of one triggerer process that waits on an app of the same connection and
scheduler subscribes to one ``SharedPoller``. The poller runs one batched status query
(``TorchXHook.statuses``: for Slurm one ``sacct -j id1,...,idN``) per interval, in a thread, and
hands each subscriber its app's status. 5,000 deferred waits cost one scheduler query per interval,
not 5,000.

- Triggers join and leave at any moment; the poller starts with its first subscriber and stops
  with its last.
- The interval is the shortest of the subscribers', but never below ``MIN_POLL_INTERVAL``
  (``[torchx] min_poll_interval``, 1 s): the query is shared by every wait on the connection, so a
  sensor with ``poke_interval=0`` must not make it run in a tight loop. A new subscriber is answered
  at the next query, which comes no sooner than that floor after the previous one.
- An app missing from a batch is asked for on its own (``TorchXHook.status``), so a scheduler that
  drops an answer cannot make a trigger wait forever.
- One bad handle never fails the others: a failing batch is split in halves, and those again
  (``bisect_statuses``), until the error reaches only the handles that fail on their own. When
  nothing answers at all (the scheduler is down: two apps asked for alone fail too) there is no
  split, and every subscriber gets the error.
- An error is an answer like any other: each trigger decides with the one retry policy
  (``retry.StatusOutage``) whether its wait goes on (an outage shorter than its ``outage_timeout``)
  or ends.
- A trigger re-created from ``serialize()`` after a triggerer restart just subscribes again: the
  poller is process state, never serialized.

Why not Airflow 3.3's shared streams (``BaseEventTrigger.shared_stream_key``): see the README's
"Waiting at scale".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from torchx_airflow.triggers.heap import FREEZER

log = logging.getLogger(__name__)


def min_poll_interval() -> float:
    """``[torchx] min_poll_interval`` (seconds): the shortest interval of the shared status query."""
    from torchx_airflow.settings.options import site_value

    return float(site_value("min_poll_interval"))


@dataclass
class _Subscriber:
    app_handle: str
    interval: float
    answers: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(maxsize=1))

    def offer(self, answer: Any) -> None:
        """Keep only the newest answer: a slow consumer never sees a stale status."""
        with contextlib.suppress(asyncio.QueueEmpty):
            self.answers.get_nowait()
        self.answers.put_nowait(answer)


#: Triggers woken per event-loop iteration after a query.
WAKE_BATCH = 250
#: Apps asked for alone when a batch fails, before it is split: if none answers, nothing does.
PROBES = 2


def bisect_statuses(
    query: Callable[[list[str]], dict[str, Any]],
    handles: Sequence[str],
    rng: random.Random | None = None,
) -> tuple[dict[str, Any], int]:
    """``query(handles)``; when it raises, the halves again, until the error reaches only the handles
    that fail on their own. Returns (handle -> status, None or the exception of its query; the
    number of queries made).

    Before splitting, ``PROBES`` apps picked at random are asked for alone: when none answers, the
    scheduler itself fails (an outage), every handle gets the error, and the round cost
    ``1 + PROBES`` queries instead of a split into every handle. One poison handle among N costs
    about 2·log2(N) extra queries.
    """
    handles = list(handles)
    if not handles:
        return {}, 0
    try:
        return dict(query(handles)), 1
    except Exception as e:
        error = e
    if len(handles) == 1:
        return {handles[0]: error}, 1
    answers: dict[str, Any] = {}
    queries = 1
    for handle in (rng or random).sample(handles, min(PROBES, len(handles))):
        queries += 1
        try:
            answers.update(query([handle]))
            break
        except Exception as e:
            answers[handle] = e
    else:  # nothing answers: an outage, not some handles
        return {handle: answers.get(handle, error) for handle in handles}, queries
    return answers, queries + _split(query, [h for h in handles if h not in answers], answers)


def _split(query: Callable[[list[str]], dict[str, Any]], handles: list[str], answers: dict[str, Any]) -> int:
    """Ask for ``handles``, splitting in halves while the query fails; returns the queries made."""
    if not handles:
        return 0
    try:
        answers.update(query(handles))
        return 1
    except Exception as e:
        if len(handles) == 1:
            answers[handles[0]] = e
            return 1
    middle = len(handles) // 2
    return 1 + _split(query, handles[:middle], answers) + _split(query, handles[middle:], answers)


class SharedPoller:
    """The batched status loop of one (connection, scheduler) in this process.

    :param key: what the poller is shared by (connection id and scheduler).
    :param hook_factory: builds the ``TorchXHook`` that answers ``statuses``/``status``.
    :param floor: the shortest interval (default ``min_poll_interval()``).
    """

    def __init__(
        self, key: tuple[str, str], hook_factory: Callable[[], Any], floor: float | None = None
    ) -> None:
        self.key = key
        self._hook_factory = hook_factory
        self.floor = floor if floor is not None else min_poll_interval()
        self._subscribers: dict[int, _Subscriber] = {}
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        #: the hook of the running loop: what its queries learnt (a Slurm job's work dir) serves
        #: the triggers that follow the apps' log files, without a query of their own
        self.hook: Any = None
        self.queries = 0  # scheduler queries made (batches, halves, single apps): tests, benchmarks
        self.rounds = 0  # polls made

    @property
    def interval(self) -> float:
        return max(self.floor, min(s.interval for s in self._subscribers.values()))

    @contextlib.asynccontextmanager
    async def subscribe(self, app_handle: str, interval: float) -> AsyncIterator[_Subscriber]:
        """Receive ``app_handle``'s status after every batched query while inside the block."""
        subscriber = _Subscriber(app_handle, interval)
        self._subscribers[id(subscriber)] = subscriber
        if self._task is None:
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._loop(), name=f"torchx-poller-{self.key}")
        self._wake.set()  # a new app gets its first status soon, not after a full interval
        try:
            yield subscriber
        finally:
            self._subscribers.pop(id(subscriber), None)
            FREEZER.wait_ended()
            if not self._subscribers:
                self._wake.set()  # the loop sees it has nobody left and ends

    async def _loop(self) -> None:
        hook = self.hook = self._hook_factory()
        try:
            while self._subscribers:
                self._wake.clear()
                started = time.monotonic()
                await self._poll_once(hook)
                if not self._subscribers:
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=self.interval)
                # woken early (a new subscriber): still no sooner than the floor after this poll
                await asyncio.sleep(max(0.0, started + self.floor - time.monotonic()))
        finally:
            # No await between the last check of the subscribers and this: one who joins from now
            # on finds no running loop and starts a new one.
            self._task = None
            if self.hook is hook:
                self.hook = None
            FREEZER.after_poll(_waits_of_this_loop())
            await asyncio.to_thread(hook.close)

    async def _poll_once(self, hook: Any) -> None:
        subscribers = list(self._subscribers.values())
        handles = sorted({s.app_handle for s in subscribers})
        statuses, queries = await asyncio.to_thread(self._statuses, hook, handles)
        self.queries += queries
        self.rounds += 1
        for count, subscriber in enumerate(subscribers, 1):
            subscriber.offer(statuses[subscriber.app_handle])
            if count % WAKE_BATCH == 0:
                # each offer wakes a trigger: let the loop run these before waking more, so that
                # 5,000 triggers never hold the event loop in one iteration
                await asyncio.sleep(0)
        # thousands of waits: their objects out of the full garbage collection's walk (triggers/heap.py)
        FREEZER.after_poll(_waits_of_this_loop())

    @staticmethod
    def _statuses(hook: Any, handles: list[str]) -> tuple[dict[str, Any], int]:
        """Runs in a thread: the batch (split while it fails), then each unanswered app alone."""
        statuses, queries = bisect_statuses(hook.statuses, handles)
        for handle in handles:
            if handle not in statuses:  # not answered in this batch: ask for it alone
                queries += 1
                try:
                    statuses[handle] = hook.status(handle)
                except Exception as e:
                    statuses[handle] = e
        return statuses, queries


# Per event loop (the triggerer runs one), then per connection and scheduler. A poller without
# subscribers holds no task and no hook, so the few idle ones are kept while their loop lives.
_POLLERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], SharedPoller]] = (
    weakref.WeakKeyDictionary()
)


def _waits_of_this_loop() -> int:
    return sum(len(p._subscribers) for p in _POLLERS.get(asyncio.get_running_loop(), {}).values())


def shared_poller(conn_id: str, scheduler: str, hook_factory: Callable[[], Any]) -> SharedPoller:
    """The poller of this event loop for ``(conn_id, scheduler)``, created on first use."""
    pollers = _POLLERS.setdefault(asyncio.get_running_loop(), {})
    key = (conn_id, scheduler)
    if key not in pollers:
        pollers[key] = SharedPoller(key, hook_factory)
    return pollers[key]
