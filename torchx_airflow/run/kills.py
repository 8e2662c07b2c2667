"""Is this kill a person's (or Airflow's) decision to stop the app, or only its waiter going away?

Airflow calls ``on_kill`` in more cases than a user's kill. In the worker, any SIGTERM runs the
operator's ``on_kill`` (``airflow/sdk/execution_time/task_runner.py``, ``_on_term``): the supervisor
forwards its own SIGTERM (a pod eviction, a rolling deploy, ``systemctl stop``) exactly as it sends
one when the API server says the task instance changed state (marked failed or success, cleared).
In the triggerer, every trigger no longer assigned to this triggerer is cancelled with the
"user action" message (``TriggerRunnerSupervisor.update_triggers`` -> ``cancel_triggers``), which
runs the trigger's ``on_kill`` also when the trigger moved to another triggerer because this one's
heartbeat went stale.

What tells these apart is the task instance's state, which the API server holds: after a user's kill
it is ``failed``, ``success``, ``restarting`` (cleared while running), ``None`` (cleared) or the task
instance is gone (its run deleted); while only the process running the wait goes away it is still
``running`` (worker) or ``deferred`` (triggerer), and a try that is coming (``up_for_retry``,
``scheduled``, ``queued``) will reattach. So the app is cancelled on the first kind of answer only;
when the state cannot be read, nothing is cancelled: a job left running can be cancelled by hand,
a cancelled multi-day training cannot be given back.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# States a task instance is put in by a person (mark failed/success, clear, delete) or by Airflow
# ending the task for good; ``None`` is a cleared task instance that waits to be scheduled again.
KILLED_STATES = frozenset({"failed", "success", "skipped", "removed", "upstream_failed", "restarting", None})
# Seconds on_kill waits for the API server's answer. In the worker the kill escalates to SIGKILL
# 5 s after SIGTERM (the supervisor's escalation delay), and the cancel needs some of them.
STATE_TIMEOUT = 3.0
# In the triggerer Airflow gives on_kill ``[triggerer] on_kill_timeout`` (30 s by default); the
# question may use all of it but what the cancel itself needs (a status query and ``scancel``).
CANCEL_SECONDS = 5.0
# The triggerer's supervisor answers a trigger's question through an in-process Execution API that it
# builds on the first question it gets (``InProcessExecutionAPI.transport`` and ``.app``: the FastAPI
# app and its DAG bag). That first answer took 18.5 s on a 2-core host at a load of 18, blocking the
# supervisor meanwhile; every later one takes milliseconds. A trigger asks once when it starts (the
# answer is not used) so that the question its on_kill asks finds the API built.
_warmups: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[None]] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True)
class TaskInstanceKey:
    """The task instance whose kill is judged: what the API server's state query needs."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1

    @classmethod
    def of(cls, ti: Any) -> TaskInstanceKey | None:
        """The key of a task instance (a task's ``context["ti"]`` or a trigger's ``task_instance``)."""
        try:
            return cls(str(ti.dag_id), str(ti.run_id), str(ti.task_id), int(ti.map_index))
        except (AttributeError, TypeError, ValueError):
            return None

    @property
    def state_key(self) -> str:
        """The task's key in the API server's answer (``task_id`` or ``task_id_mapindex``)."""
        return self.task_id if self.map_index < 0 else f"{self.task_id}_{self.map_index}"


@dataclass(frozen=True)
class KillVerdict:
    """Whether to cancel the app, and why (for the log)."""

    cancel: bool
    reason: str


def verdict_for_state(state: str | None, found: bool = True) -> KillVerdict:
    """The verdict for a task instance's current state (``found=False``: the API server knows no such
    task instance any more, e.g. its DAG run was deleted)."""
    if not found:
        return KillVerdict(True, "the task instance no longer exists (its DAG run was deleted)")
    if state in KILLED_STATES:
        if state is None:
            return KillVerdict(True, "the task instance was cleared")
        return KillVerdict(True, f"the task instance is now {state!r}")
    return KillVerdict(
        False,
        f"the task instance is still {state!r}: only the process waiting for the app is going away",
    )


def read_task_state(key: TaskInstanceKey) -> tuple[str | None, bool]:
    """``(state, found)`` of the task instance, asked of the API server through the supervisor."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    states = RuntimeTaskInstance.get_task_states(
        dag_id=key.dag_id, task_ids=[key.task_id], run_ids=[key.run_id], map_index=key.map_index
    )
    return _state_in(states, key)


async def aread_task_state(key: TaskInstanceKey) -> tuple[str | None, bool]:
    """``read_task_state`` on the triggerer's event loop, through its supervisor channel."""
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import GetTaskStates

    request = GetTaskStates(
        dag_id=key.dag_id, task_ids=[key.task_id], run_ids=[key.run_id], map_index=key.map_index
    )
    response = await task_runner.SUPERVISOR_COMMS.asend(request)
    return _state_in(getattr(response, "task_states", None) or {}, key)


def trigger_state_timeout() -> float:
    """Seconds a trigger's ``on_kill`` waits for the state: Airflow's ``[triggerer] on_kill_timeout``
    less what the cancel needs."""
    from airflow.sdk.configuration import conf

    return max(1.0, conf.getfloat("triggerer", "on_kill_timeout", fallback=30.0) - CANCEL_SECONDS)


def warm_state_channel(key: TaskInstanceKey | None) -> None:
    """Ask ``key``'s state once per event loop in the background (the answer is not used), so that the
    triggerer's supervisor has built its in-process Execution API before an ``on_kill`` needs an answer.
    """
    if key is None:
        return
    loop = asyncio.get_running_loop()
    if loop not in _warmups:
        _warmups[loop] = loop.create_task(_warm(key), name="torchx-kill-verdict-warmup")


async def _warm(key: TaskInstanceKey) -> None:
    # outside a triggerer, or the supervisor is away: on_kill will say so itself
    with contextlib.suppress(Exception):
        await aread_task_state(key)


async def akill_verdict(key: TaskInstanceKey | None, timeout: float | None = None) -> KillVerdict:
    """``kill_verdict`` for a trigger, asked on the triggerer's event loop (``timeout``: by default
    ``trigger_state_timeout()``)."""
    if timeout is None:
        timeout = trigger_state_timeout()
    if key is None:
        return KillVerdict(False, "this process does not know its task instance, so its state cannot be read")
    try:
        state, found = await asyncio.wait_for(aread_task_state(key), timeout)
    except asyncio.TimeoutError:
        return KillVerdict(False, f"the task instance's state could not be read within {timeout} s")
    except Exception as e:
        return KillVerdict(False, f"the task instance's state could not be read ({type(e).__name__}: {e})")
    return verdict_for_state(state, found)


def _state_in(states: Any, key: TaskInstanceKey) -> tuple[str | None, bool]:
    of_run = states.get(key.run_id) or {}
    if key.state_key not in of_run:
        return None, False
    state = of_run[key.state_key]
    return (str(getattr(state, "value", state)) if state is not None else None), True


def kill_verdict(key: TaskInstanceKey | None, timeout: float = STATE_TIMEOUT) -> KillVerdict:
    """Whether the task instance ``key`` was really killed, from its state in the API server.

    The question runs in a thread, bounded by ``timeout``: in the worker, ``on_kill`` runs inside a
    signal handler, which may have interrupted the task while it held the supervisor channel's lock;
    asking from the same thread would then wait forever. No answer in time is "cannot tell":
    do not cancel.
    """
    if key is None:
        return KillVerdict(False, "this process does not know its task instance, so its state cannot be read")
    answer: list[tuple[str | None, bool]] = []
    failure: list[BaseException] = []

    def ask() -> None:
        try:
            answer.append(read_task_state(key))
        except BaseException as e:  # reported below; a thread's exception would be lost
            failure.append(e)

    thread = threading.Thread(target=ask, name="torchx-kill-verdict", daemon=True)
    thread.start()
    thread.join(timeout)
    if failure:
        error = failure[0]
        return KillVerdict(
            False, f"the task instance's state could not be read ({type(error).__name__}: {error})"
        )
    if not answer:
        return KillVerdict(False, f"the task instance's state could not be read within {timeout} s")
    state, found = answer[0]
    return verdict_for_state(state, found)


class KillGuard:
    """An operator's ``on_kill`` judgement for one execution: which task instance it is, whether
    ``execution_timeout`` ended it, and whether it is only waiting (so a SIGTERM that is no kill may
    end the wait at once)."""

    def __init__(self) -> None:
        self.key: TaskInstanceKey | None = None
        self.timed_out = False
        self.waiting = False
        self.killed = False  # a kill was judged a person's or Airflow's: submit nothing more
        self.reason = ""  # why, once killed
        self.cancelled = False  # the cancel of that kill went through

    @contextlib.contextmanager
    def running(self, ti: Any) -> Iterator[None]:
        """Around ``execute``/``execute_complete``: remember the task instance, and notice the
        ``AirflowTaskTimeout`` that Airflow raises before it calls ``on_kill`` for a timeout."""
        from airflow.sdk.exceptions import AirflowTaskTimeout

        self.key = TaskInstanceKey.of(ti)
        try:
            yield
        except AirflowTaskTimeout:
            self.timed_out = True
            raise

    @contextlib.contextmanager
    def only_waiting(self) -> Iterator[None]:
        """Around polls and log reads: nothing is lost if a SIGTERM ends them."""
        self.waiting = True
        try:
            yield
        finally:
            self.waiting = False

    def on_kill(
        self, app_handle: str, cancel: Callable[[str], object], task_log: Any, outlives_launcher: bool = True
    ) -> None:
        """Cancel ``app_handle`` if the task was killed, and end a wait under way with
        ``TorchXTaskKilledError``; else leave it, and end a wait under way with the retryable
        ``TorchXWaitInterruptedError``. An app that ends with this process anyway
        (``outlives_launcher=False``: local_cwd, local_docker) is always cancelled, cleanly: no try
        could reattach to it."""
        from torchx_airflow.exceptions import TorchXTaskKilledError, TorchXWaitInterruptedError

        if self.timed_out:
            verdict = KillVerdict(True, "its execution_timeout passed")
        elif not outlives_launcher:
            verdict = KillVerdict(True, "its app ends with this process")
        else:
            verdict = kill_verdict(self.key)
        if verdict.cancel:
            self.killed, self.reason = True, verdict.reason
            task_log.info("Task killed (%s): cancelling TorchX app %s", verdict.reason, app_handle)
            cancel(app_handle)
            self.cancelled = True
            if self.waiting:  # the execution ends now, in its own thread (which closes it)
                self.waiting = False
                raise TorchXTaskKilledError(app_handle, verdict.reason)
            return
        task_log.warning(
            "Asked to stop, but not cancelling TorchX app %s: %s. It is left running for the next try "
            "to reattach.",
            app_handle,
            verdict.reason,
        )
        if self.waiting:  # once: a process group's SIGTERM comes twice (its own and the supervisor's)
            self.waiting = False
            raise TorchXWaitInterruptedError(app_handle, verdict.reason)
