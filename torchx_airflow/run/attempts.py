"""The attempts of a task's job: every job the task submitted in one chain, and how each ended.

A new submission starts a chain; a job a policy submits in place of one that ended (a
``NextAttempt``: the infrastructure ended it) is the chain's next attempt. The lifecycle is the one
writer: it records each attempt when it is submitted, and when its end is seen, with what the
policies learned of it (``usage``, ``cost``) and why it was replaced (``reason``). It keeps them in
``task_state_store`` key ``torchx_attempts`` (in memory without one), so a later try or a resumed
deferral continues the same chain. Policies read it (``run.attempts``): what the try's earlier
attempts cost, how many resubmissions were spent, what an attempt resumed from.
"""

from __future__ import annotations

import time
from typing import Any

from torchx_airflow.run.state import ATTEMPTS_KEY


class Attempts:
    """The attempts of one task's job, oldest first.

    Each attempt: ``{attempt, app_handle, submitted_at, resumed_from, ended_at, state, elapsed_s,
    reason, usage, cost}`` (the end's fields once it ended); ``reason`` is why it was replaced (the
    infrastructure's ``NODE_FAIL``...), and ``elapsed_s`` the seconds from its submission to the
    moment its end was seen: the work it lost is at most that (less what its checkpoint kept).

    :param store: the task's ``task_state_store``; None keeps them in memory only.
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self._memory: list[dict[str, Any]] = []  # the list as this process last read or wrote it
        self._read = store is None

    def load(self) -> list[dict[str, Any]]:
        """The attempts: read from the store once per process (an execution is their only writer
        while it runs; a resumed or retried one reads them again)."""
        if not self._read:
            value = self.store.get(ATTEMPTS_KEY)
            self._memory = [dict(a) for a in value if isinstance(a, dict)] if isinstance(value, list) else []
            self._read = True
        return [dict(a) for a in self._memory]

    def of(self, app_handle: str) -> dict[str, Any] | None:
        """The attempt of ``app_handle``, if recorded."""
        return next((a for a in self.load() if a.get("app_handle") == app_handle), None)

    def _save(self, attempts: list[dict[str, Any]]) -> None:
        self._memory, self._read = [dict(a) for a in attempts], True
        if self.store is not None:
            self.store.set(ATTEMPTS_KEY, attempts)

    def reset(self) -> None:
        """Start a new chain: a fresh submission (not a resubmission) follows."""
        if self.load():
            self._save([])

    def record_start(self, app_handle: str, number: int | None = None, **details: Any) -> int:
        """Record a submitted job as the chain's attempt ``number`` (default: the next), with the
        ``details`` of the ``NextAttempt`` that asked for it (``resume_from``...); its number."""
        attempts = self.load()
        number = number if number is not None else len(attempts) + 1
        attempts.append(
            {
                "resumed_from": None,
                **details,
                "attempt": number,
                "app_handle": app_handle,
                "submitted_at": time.time(),
            }
        )
        self._save(attempts)
        return number

    def record_end(self, app_handle: str, state: str) -> dict[str, Any]:
        """Record that ``app_handle`` ended in ``state`` (an attempt this record lacks is added: an
        earlier try's, which died before recording it)."""
        attempts = self.load()
        mine = next((a for a in attempts if a.get("app_handle") == app_handle), None)
        if mine is None:
            mine = {"attempt": len(attempts) + 1, "app_handle": app_handle, "submitted_at": None}
            attempts.append(mine)
        elif mine.get("ended_at") and mine.get("state") == state:  # its end was recorded when seen
            return dict(mine)
        now = time.time()
        submitted = mine.get("submitted_at")
        mine.update(
            state=state, ended_at=now, elapsed_s=round(now - float(submitted), 3) if submitted else None
        )
        self._save(attempts)
        return dict(mine)

    def annotate(self, app_handle: str, **values: Any) -> None:
        """Add ``values`` (its usage, its cost, why it was replaced) to the attempt of ``app_handle``,
        if recorded."""
        attempts = self.load()
        for attempt in attempts:
            if attempt.get("app_handle") == app_handle:
                attempt.update(values)
                self._save(attempts)
                return

    def resubmissions(self) -> int:
        """How many times the chain's job was resubmitted so far."""
        return max(0, len(self.load()) - 1)

    def summary(self, app_handle: str, state: str | None) -> list[dict[str, Any]]:
        """Every attempt, the last (``app_handle``) with its current ``state``; for the task's result."""
        attempts = self.load()
        if not attempts or attempts[-1].get("app_handle") != app_handle:
            attempts.append({"attempt": len(attempts) + 1, "app_handle": app_handle})
        if state is not None or "state" not in attempts[-1]:
            attempts[-1]["state"] = state
        return attempts
