"""One bounded poll for every test that waits on something outside it (a job's state, a log line, a
server, a DAG run): wait for the condition, never for a fixed time, so a loaded machine is only slower."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str, timeout: float, interval: float = 0.5) -> T:
    """Call ``condition`` every ``interval`` seconds until it returns something truthy, and return that.

    After ``timeout`` seconds raise ``TimeoutError`` naming ``what`` and the last answer. An
    exception from ``condition`` ends the wait at once (a server that exited, say).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout} s (last answer: {value!r})")
        time.sleep(interval)
