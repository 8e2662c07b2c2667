"""Streaming every role's and replica's log lines of a TorchX app into the task log.

One reader thread follows each replica's log stream and queues its lines; the waiting thread drains
the queue between status polls, so all task-log writes happen on one thread and each line is written
once, prefixed ``[role/replica]``. The waiting loop is the only thing that asks the scheduler for the
app's status: readers follow it through ``AppLogStreamer.app_ended`` (an Event set when the app is
terminal, or when the wait ends any other way) and stop then, on every exit path.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from torchx_airflow.schedulers.log_files import log_cursor_key
from torchx_airflow.secrets import redact_text

if TYPE_CHECKING:
    from torchx_airflow.hooks.torchx import TorchXHook

_DONE = object()
READER_THREAD_PREFIX = "torchx-log-"


class AppLogStreamer:
    """Follows the logs of every replica of an app; ``drain()`` writes what arrived to ``log``.

    Use it as a context manager around the wait: readers start on entry, and on exit (the app ended,
    the wait raised, the task was killed) ``app_ended`` is set and every reader is joined::

        with AppLogStreamer(hook, app_handle, {"trainer": 2}, log) as streamer:
            while not (status := hook.status(app_handle)).is_terminal():
                streamer.drain(timeout=poll_interval)

    :param hook: the hook that launched (or can see) the app.
    :param app_handle: the app's handle.
    :param replicas: role name -> number of replicas.
    :param log: where lines go (the task's logger).
    :param poll: seconds between looks at a log file that has no new line.
    :param enabled: False streams nothing (the context manager then does nothing).
    """

    def __init__(
        self,
        hook: TorchXHook,
        app_handle: str,
        replicas: Mapping[str, int],
        log: Any,
        poll: float = 1.0,
        enabled: bool = True,
    ) -> None:
        self._hook = hook
        self._app_handle = app_handle
        self._replicas = dict(replicas)
        self._log = log
        self._poll = poll
        self._enabled = enabled
        self._lines: queue.Queue[Any] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self.app_ended = threading.Event()

    def __enter__(self) -> AppLogStreamer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        # After a terminal status readers read to the end of their files; after an error the wait
        # is over all the same, and they stop at the end of what is there.
        self.finish()

    @property
    def threads(self) -> list[threading.Thread]:
        """The reader threads started so far."""
        return list(self._threads)

    def start(self) -> AppLogStreamer:
        if not self._enabled:
            return self
        for role, k, stream in replica_streams(self._hook, self._app_handle, self._replicas):
            thread = threading.Thread(
                target=self._follow,
                args=(role, k, stream),
                name=f"{READER_THREAD_PREFIX}{role}-{k}-{stream or 'all'}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
        return self

    def _follow(self, role: str, k: int, stream: str | None) -> None:
        prefix = f"[{role}/{k}]"
        try:
            lines = self._hook.log_lines(
                self._app_handle,
                role,
                k,
                should_tail=True,
                stream=stream,
                until=self.app_ended,
                poll=self._poll,
            )
            for chunk in lines:
                for line in chunk.splitlines():
                    self._lines.put((prefix, line))
        except Exception as e:  # logs are best effort: the app's status decides the task's outcome
            self._lines.put((prefix, f"<log stream ended: {e}>"))
        finally:
            self._lines.put(_DONE)

    def drain(self, timeout: float = 0.0) -> None:
        """Write queued lines; wait up to ``timeout`` seconds for the first one."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                item = self._lines.get(timeout=remaining) if remaining > 0 else self._lines.get_nowait()
            except queue.Empty:
                return
            if item is not _DONE:
                # Jobs get tracker credentials in their env: a job that prints one must not put it in the
                # task log, whether or not the log's writer masks secrets (`airflow dags test` does not).
                prefix, line = item
                self._log.info("%s %s", prefix, redact_text(line))

    def finish(self, timeout: float = 30.0) -> None:
        """The wait is over: readers read to the end of the logs and stop; the rest is written."""
        self.app_ended.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.drain()


def replica_streams(
    hook: TorchXHook, app_handle: str, replicas: Mapping[str, int]
) -> Iterator[tuple[str, int, str | None]]:
    """Every (role, replica, log stream) of an app."""
    streams = hook.log_streams(app_handle)
    for role, count in replicas.items():
        for k in range(count):
            for stream in streams:
                yield role, k, stream


def print_app_logs(
    hook: TorchXHook,
    app_handle: str,
    replicas: Mapping[str, int],
    log: Any,
    cursor: Mapping[str, int] | None = None,
    max_lines: int = 1000,
) -> dict[str, int]:
    """Write the logs of a finished app to ``log``: per replica and stream, the lines after ``cursor``
    (lines already shown), at most the last ``max_lines``. Returns the new cursor."""
    from collections import deque

    seen = dict(cursor or {})
    for role, k, stream in replica_streams(hook, app_handle, replicas):
        key = log_cursor_key(role, k, stream)
        skip = seen.get(key, 0)
        tail: deque[str] = deque(maxlen=max_lines)
        total = 0
        try:
            for chunk in hook.log_lines(app_handle, role, k, should_tail=False, stream=stream):
                for line in chunk.splitlines():
                    total += 1
                    if total > skip:
                        tail.append(line)
        except Exception as e:  # logs are best effort
            log.info("[%s/%d] <logs unavailable: %s>", role, k, e)
            continue
        omitted = total - skip - len(tail)
        if omitted > 0:
            log.info(
                "[%s/%d] ... %d earlier lines not shown (max_log_lines=%d)",
                role,
                k,
                omitted,
                max_lines,
            )
        for line in tail:
            log.info("[%s/%d] %s", role, k, redact_text(line))
        seen[key] = total
    return seen
