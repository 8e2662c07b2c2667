"""One retry policy for every path that asks a scheduler for an app's status, and one for tracker writes.

The worker's wait (``waiting.py``), the sensor, the triggerer's shared poller and trigger, and the
lookup of an interrupted submission (``durable.py``) all treat a failing status query the same way:
a scheduler whose control plane is down (``slurmctld`` restarting, ``slurmdbd`` upgraded, an API
server failing over) is *waited out*. Queries go on at the wait's own interval; the wait gives up
only when no good answer came for ``outage_timeout`` seconds (the task's, else its ``torchx``
connection's extra, else ``[torchx] outage_timeout``, 10 minutes by default: one rule,
``settings.resolve.outage_budget``), counted from the last good answer. An outage is logged
once when it starts and once when it ends, never once per poll. An app is lost only when its scheduler
positively answers that it does not know it (a status of ``None``); a failing query never means that.
Bad input (a malformed handle, an unknown scheduler) is never retried: it cannot get better.

``StatusOutage`` is the policy's state for one wait; ``StatusPolls`` is a blocking wait's queries
under it (the worker's, the sensor's, ``TorchXHook.wait``), each run with tenacity (which Airflow
itself depends on); the triggerer's waits, which receive answers from the shared poller instead of
calling, ask the same object whether an error is still within budget (``StatusOutage.failed``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_fixed,
)

log = logging.getLogger(__name__)

_MIN_WAIT = 0.5
# Tracker writes after submission (lineage edges, Airflow metadata): a few quick tries, then a warning.
TRACKER_ATTEMPTS = 3
_TRACKER_MAX_WAIT = 2.0


def is_retryable(error: BaseException) -> bool:
    """Whether asking again can help: not for bad input (a malformed handle, an unknown scheduler),
    and not once this process was asked to stop (``TorchXWaitInterruptedError``, raised by the kill
    guard in whatever frame the signal lands, a status query's included): that ends the wait at
    once, for the task's next try to reattach (``TorchXWaitInterruptedError``) or because the task
    was killed (``TorchXTaskKilledError``)."""
    from torchx_airflow.exceptions import TorchXInputError, TorchXTaskKilledError, TorchXWaitInterruptedError

    stops = (TorchXInputError, TorchXWaitInterruptedError, TorchXTaskKilledError)
    return isinstance(error, Exception) and not isinstance(error, stops)


class StatusOutage:
    """One wait's view of its scheduler: when the last good answer came, and whether an outage is on.

    :param what: what is asked, for the log (``"Status of slurm://torchx/42"``).
    :param budget: seconds without a good answer before the wait gives up.
    :param logger: where the outage is logged (the task's logger).
    :param clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        what: str,
        budget: float,
        logger: Any = log,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.budget = float(budget)
        self.log = logger
        self.clock = clock
        self.last_good = clock()
        self.since: float | None = None  # when the current outage started; None while answers come
        self.outages = 0  # outages seen, for tests and benchmarks

    def answered(self) -> None:
        """A good answer came (a status, or ``None``: the scheduler does not know the app)."""
        now = self.clock()
        if self.since is not None:
            self.log.warning(
                "%s answers again after %.0f s without an answer: the wait goes on",
                self.what,
                now - self.since,
            )
            self.since = None
        self.last_good = now

    def exhausted(self) -> bool:
        """Whether the budget since the last good answer is spent."""
        return self.clock() - self.last_good >= self.budget

    def failed(self, error: BaseException) -> bool:
        """Record a failed query; True while the wait should go on (retryable and within budget)."""
        if not is_retryable(error):
            return False
        if self.since is None:
            self.since = self.clock()
            self.outages += 1
            self.log.warning(
                "%s failed (%s: %s): waiting the outage out, asking again at every poll for up to %.0f s "
                "after the last good answer (outage_timeout)",
                self.what,
                type(error).__name__,
                error,
                self.budget,
            )
        return not self.exhausted()

    def give_up_message(self, error: BaseException) -> str:
        """Why the wait ends: the error, and how long the scheduler has not answered."""
        return (
            f"{self.what} has not answered for {self.clock() - self.last_good:.3g} s, more than "
            f"outage_timeout ({self.budget:g} s); last error: {type(error).__name__}: {error}. The app "
            "itself was not touched. Raise outage_timeout (task, torchx connection or [torchx] "
            "outage_timeout) to wait longer for the scheduler."
        )


def status_retrying(outage: StatusOutage, interval: float) -> Retrying:
    """Retrying for a blocking status call under ``outage``: asked again every ``interval`` seconds
    until a good answer or the budget is spent (``TorchXSchedulerOutageError`` from the last error)::

        status = call_status(outage, interval, hook.status, app_handle)
    """
    return Retrying(**_outage_policy(outage, interval))


def async_status_retrying(outage: StatusOutage, interval: float) -> AsyncRetrying:
    """The same policy for the triggerer: ``await async_status_retrying(o, i)(coroutine_fn, ...)``."""
    return AsyncRetrying(**_outage_policy(outage, interval))


def _outage_policy(outage: StatusOutage, interval: float) -> dict[str, Any]:
    def retry(error: BaseException) -> bool:
        outage.failed(error)  # logs the outage's start once
        return is_retryable(error)

    def give_up(state: Any) -> Any:
        from torchx_airflow.exceptions import TorchXSchedulerOutageError

        error = state.outcome.exception()
        raise TorchXSchedulerOutageError(outage.give_up_message(error)) from error

    return {
        "stop": lambda state: outage.exhausted(),
        "wait": wait_fixed(max(0.0, interval)),
        "retry": retry_if_exception(retry),
        "retry_error_callback": give_up,
    }


def call_status(outage: StatusOutage, interval: float, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` under ``outage``'s policy; a good answer ends any outage (logged once)."""
    result = status_retrying(outage, interval)(fn, *args)
    outage.answered()
    return result


class StatusPolls:
    """One wait's status queries of its app: each asked with ``call_status`` under one ``StatusOutage``
    (the budget counts from the app's last good answer, across every query of the wait), again every
    ``interval`` while the scheduler fails. The worker's wait, the sensor's pokes (in poke mode one
    object spans them) and ``TorchXHook.wait`` each keep one; the triggerer's waits hear answers from
    the shared poller and keep a ``StatusOutage`` of their own.

    :param ask: the status query (``TorchXHook.status``): an ``AppStatus``, or None for an app the
        scheduler does not know.
    :param interval: seconds between queries while the scheduler fails.
    :param budget: seconds without a good answer (``settings.resolve.outage_budget``).
    :param logger: where outages are logged (the task's logger).
    :param clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        ask: Callable[[str], Any],
        interval: float,
        budget: float,
        logger: Any = log,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ask = ask
        self.interval = interval
        self.budget = budget
        self.log = logger
        self.clock = clock
        self.outage: StatusOutage | None = None  # of the app asked last (a new app starts afresh)

    def status(self, app_handle: str) -> Any:
        """The app's status; ``TorchXSchedulerOutageError`` once the scheduler gave no good answer for
        ``budget`` seconds."""
        what = f"Status of {app_handle}"
        if self.outage is None or self.outage.what != what:
            self.outage = StatusOutage(what, self.budget, self.log, clock=self.clock)
        return call_status(self.outage, self.interval, self.ask, app_handle)


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
        "retry": retry_if_exception(is_retryable),
        "before_sleep": before_sleep,
        "reraise": True,
    }


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
