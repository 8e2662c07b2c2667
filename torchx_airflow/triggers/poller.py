"""One status query per poll interval for every app waited on in a triggerer process.

Every ``TorchXAppTrigger`` of one triggerer process that waits on an app of the same connection and
scheduler subscribes to one ``SharedPoller``. The poller runs one batched status query
(``TorchXHook.statuses``: for Slurm one ``sacct -j id1,...,idN``) per interval, in a thread, and
hands each subscriber its app's status. 1,000 deferred waits cost one scheduler query per interval,
not 1,000.

- Triggers join and leave at any moment; the poller starts with its first subscriber and stops
  with its last.
- An app missing from a batch is asked for on its own (``TorchXHook.status``), so a scheduler that
  drops an answer cannot make a trigger wait forever.
- A failing query is retried with the provider's status policy (``torchx_airflow.retry``); when the
  policy gives up, every subscriber gets the error (and ends with an ``error`` event): none hangs.
- A trigger re-created from ``serialize()`` after a triggerer restart just subscribes again: the
  poller is process state, never serialized.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from torchx_airflow.retry import async_status_retrying

log = logging.getLogger(__name__)


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


class SharedPoller:
    """The batched status loop of one (connection, scheduler) in this process.

    :param key: what the poller is shared by (connection id and scheduler).
    :param hook_factory: builds the ``TorchXHook`` that answers ``statuses``/``status``.
    """

    def __init__(self, key: tuple[str, str], hook_factory: Callable[[], Any]) -> None:
        self.key = key
        self._hook_factory = hook_factory
        self._subscribers: dict[int, _Subscriber] = {}
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        #: the hook of the running loop: what its queries learnt (a Slurm job's work dir) serves
        #: the triggers that follow the apps' log files, without a query of their own
        self.hook: Any = None
        self.queries = 0  # batched queries made: for tests and benchmarks

    @property
    def interval(self) -> float:
        return min(s.interval for s in self._subscribers.values())

    @contextlib.asynccontextmanager
    async def subscribe(self, app_handle: str, interval: float) -> AsyncIterator[_Subscriber]:
        """Receive ``app_handle``'s status after every batched query while inside the block."""
        subscriber = _Subscriber(app_handle, interval)
        self._subscribers[id(subscriber)] = subscriber
        if self._task is None:
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._loop(), name=f"torchx-poller-{self.key}")
        self._wake.set()  # a new app gets its first status now, not after a full interval
        try:
            yield subscriber
        finally:
            self._subscribers.pop(id(subscriber), None)
            if not self._subscribers:
                self._wake.set()  # the loop sees it has nobody left and ends

    async def _loop(self) -> None:
        hook = self.hook = self._hook_factory()
        try:
            while self._subscribers:
                self._wake.clear()
                await self._poll_once(hook)
                if not self._subscribers:
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=self.interval)
        finally:
            # No await between the last check of the subscribers and this: one who joins from now
            # on finds no running loop and starts a new one.
            self._task = None
            if self.hook is hook:
                self.hook = None
            await asyncio.to_thread(hook.close)

    async def _poll_once(self, hook: Any) -> None:
        subscribers = list(self._subscribers.values())
        handles = sorted({s.app_handle for s in subscribers})
        retrying = async_status_retrying(f"Status of {len(handles)} apps", max_wait=self.interval)
        try:
            statuses: dict[str, Any] = await retrying(asyncio.to_thread, hook.statuses, handles)
            self.queries += 1
        except Exception as e:  # the policy gave up: every waiting trigger sees it
            for subscriber in subscribers:
                subscriber.offer(e)
            return
        for handle in handles:
            if handle not in statuses:  # not answered in this batch: ask for it alone
                try:
                    statuses[handle] = await retrying(asyncio.to_thread, hook.status, handle)
                except Exception as e:
                    statuses[handle] = e
        for subscriber in subscribers:
            subscriber.offer(statuses[subscriber.app_handle])


# Per event loop (the triggerer runs one), then per connection and scheduler. A poller without
# subscribers holds no task and no hook, so the few idle ones are kept while their loop lives.
_POLLERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], SharedPoller]] = (
    weakref.WeakKeyDictionary()
)


def shared_poller(conn_id: str, scheduler: str, hook_factory: Callable[[], Any]) -> SharedPoller:
    """The poller of this event loop for ``(conn_id, scheduler)``, created on first use."""
    pollers = _POLLERS.setdefault(asyncio.get_running_loop(), {})
    key = (conn_id, scheduler)
    if key not in pollers:
        pollers[key] = SharedPoller(key, hook_factory)
    return pollers[key]
