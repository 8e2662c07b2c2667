"""One retry policy for every path that asks a scheduler for an app's status, and one for tracker writes.

The worker's wait (``TorchXOperator``), the triggerer's wait (``TorchXAppTrigger``) and the sensor
all retry a failing status call the same way: up to ``STATUS_ATTEMPTS`` attempts with exponential
backoff capped at ``poll_interval`` (a ``sacct`` that times out once, an API server restarting),
then give up with the last error. Bad input (a malformed handle, an unknown scheduler) is never
retried: it cannot get better. Built on tenacity, which Airflow itself depends on.
"""

from __future__ import annotations

import logging
from typing import Any

from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

log = logging.getLogger(__name__)

STATUS_ATTEMPTS = 5
_MIN_WAIT = 0.5
# Tracker writes after submission (lineage edges, Airflow metadata): a few quick tries, then a warning.
TRACKER_ATTEMPTS = 3
_TRACKER_MAX_WAIT = 2.0


def _retryable(error: BaseException) -> bool:
    from torchx_airflow.exceptions import TorchXInputError

    return isinstance(error, Exception) and not isinstance(error, TorchXInputError)


def _policy(what: str, max_wait: float, attempts: int) -> dict[str, Any]:
    def before_sleep(state: Any) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning(
            "%s failed (attempt %d of %d), retrying in %.1f s: %s: %s",
            what,
            state.attempt_number,
            attempts,
            state.next_action.sleep if state.next_action else 0.0,
            type(error).__name__,
            error,
        )

    return {
        "stop": stop_after_attempt(attempts),
        "wait": wait_exponential(multiplier=_MIN_WAIT, min=_MIN_WAIT, max=max(_MIN_WAIT, max_wait)),
        "retry": retry_if_exception(_retryable),
        "before_sleep": before_sleep,
        "reraise": True,
    }


def status_retrying(what: str, max_wait: float = 30.0, attempts: int = STATUS_ATTEMPTS) -> Retrying:
    """Retrying for a blocking status call: ``status_retrying("Status of X")(hook.status, handle)``."""
    return Retrying(**_policy(what, max_wait, attempts))


def async_status_retrying(
    what: str, max_wait: float = 30.0, attempts: int = STATUS_ATTEMPTS
) -> AsyncRetrying:
    """The same policy for the triggerer: ``await async_status_retrying(...)(coroutine_fn, ...)``."""
    return AsyncRetrying(**_policy(what, max_wait, attempts))


def tracker_retrying(what: str) -> Retrying:
    """Retrying for one tracker write: ``tracker_retrying("Recording X")(store.add_source, ...)``."""
    return Retrying(**_policy(what, _TRACKER_MAX_WAIT, TRACKER_ATTEMPTS))


def call_within(seconds: float, what: str, fn: Any, *args: Any, reraise: bool = False) -> tuple[bool, Any]:
    """Run ``fn(*args)`` for at most ``seconds``: ``(True, result)``, or ``(False, None)`` with a warning.

    For work that must not hold a task hostage after its app was submitted (tracker writes to an
    MLflow server that hangs): the call goes on in a daemon thread that is left behind when the
    budget runs out, so a process exit never waits for it. An error from ``fn`` is a warning too,
    or raised in the calling thread with ``reraise=True``.
    """
    import threading

    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = fn(*args)
        except BaseException as e:  # reported below, in the calling thread
            outcome["error"] = e

    thread = threading.Thread(target=target, name=f"torchx-within-{what[:40]}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        log.warning("%s did not finish within %.0f s: going on without it", what, seconds)
        return False, None
    if "error" in outcome:
        error = outcome["error"]
        if reraise:
            raise error
        log.warning("%s failed: %s: %s", what, type(error).__name__, error)
        return False, None
    return True, outcome.get("result")
