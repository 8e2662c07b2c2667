"""Wall and CPU time of local replica processes, from the kernel's own accounting (``wait4``).

A local_cwd replica is a child process of the task (TorchX's ``subprocess.Popen``). Whoever reaps
a child gets its resource usage: ``os.wait4`` returns the ``rusage`` of the child *and of every
descendant it waited for* (``torchrun``'s workers, a shell's commands), which ``Popen.poll`` throws
away. So each replica gets a thread that reaps it: holding the ``Popen``'s own wait lock, it blocks in
``os.wait4`` and, when the replica exits, hands its exit code to the ``Popen`` (``returncode``,
exactly as ``Popen.poll`` would have set it) with the usage kept here. While the thread holds the
lock, TorchX's ``poll()`` answers "still running" (it never blocks on that lock) and its ``wait()``
waits for the thread; nothing else reaps the replica, so no exit code is ever lost.

The wall time runs from just after TorchX started the process to its exit; CPU time is user +
system time. No memory peak: on Linux a child's ``ru_maxrss`` starts from the resident set of the
process that forked it (the task process, over 100 MB), so it says nothing about the replica.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: Seconds ``usage`` gives the reaping threads of a terminal app to finish their bookkeeping.
SETTLE_SECONDS = 5.0


@dataclass
class ReplicaProcess:
    """One replica's process and, once it exited, what it used."""

    role: str
    replica: int
    pid: int
    started: float  # time.monotonic() just after the process started
    ended: float | None = None
    exit_code: int | None = None
    user_s: float | None = None
    system_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; the times are None while the process runs (or when it was not reaped here)."""
        done = self.ended is not None and self.user_s is not None and self.system_s is not None
        return {
            "role": self.role,
            "replica": self.replica,
            "pid": self.pid,
            "exit_code": self.exit_code,
            "wall_s": round(self.ended - self.started, 3) if done and self.ended is not None else None,
            "cpu_time_s": round((self.user_s or 0.0) + (self.system_s or 0.0), 3) if done else None,
            "user_s": round(self.user_s, 6) if self.user_s is not None else None,
            "system_s": round(self.system_s, 6) if self.system_s is not None else None,
        }


class ProcessWatch:
    """Reaps the replica processes of local apps and keeps their usage, app by app."""

    def __init__(self) -> None:
        self._replicas: dict[str, list[ReplicaProcess]] = {}
        self._threads: dict[str, list[threading.Thread]] = {}

    def watch(self, app_id: str, role: str, replica: int, proc: Any) -> bool:
        """Reap ``proc`` (a ``subprocess.Popen``) when it exits, keeping its usage; False when this
        Python cannot (no ``os.wait4``, or a ``Popen`` without its wait lock)."""
        lock = getattr(proc, "_waitpid_lock", None)
        if not hasattr(os, "wait4") or lock is None or proc.returncode is not None:
            return False
        record = ReplicaProcess(role, replica, proc.pid, time.monotonic())
        holding = threading.Event()
        thread = threading.Thread(
            target=self._reap, args=(record, proc, lock, holding), name=f"torchx-reap-{proc.pid}", daemon=True
        )
        thread.start()
        holding.wait()  # from here on nothing but this thread can reap the process
        self._replicas.setdefault(app_id, []).append(record)
        self._threads.setdefault(app_id, []).append(thread)
        return True

    @staticmethod
    def _reap(record: ReplicaProcess, proc: Any, lock: threading.Lock, holding: threading.Event) -> None:
        with lock:
            holding.set()
            if proc.returncode is not None:
                return
            try:
                _, status, rusage = os.wait4(proc.pid, 0)
            except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): Popen says what it can
                log.warning("Replica process %s was reaped elsewhere: no usage for it", proc.pid)
                return
            record.ended = time.monotonic()
            proc.returncode = os.waitstatus_to_exitcode(status)
        record.exit_code = proc.returncode
        record.user_s, record.system_s = rusage.ru_utime, rusage.ru_stime

    def watches(self, app_id: str) -> bool:
        """Whether this watch started the replicas of ``app_id``."""
        return app_id in self._replicas

    def replicas(self, app_id: str, settle: float = SETTLE_SECONDS) -> list[dict[str, Any]]:
        """The replicas of ``app_id`` as dicts, after waiting up to ``settle`` seconds for the ones
        that exited to be accounted."""
        deadline = time.monotonic() + settle
        for thread in self._threads.get(app_id, []):
            thread.join(max(0.0, deadline - time.monotonic()))
        return [record.to_dict() for record in self._replicas.get(app_id, [])]
