"""Reading a job's log files: following one as it grows, and what was appended since the last look.

Plain file reading, no scheduler and no hook: the scheduler layer says where a replica's log file is
(``SchedulerSupport.log_file``), these functions read it. ``follow_file`` serves the worker's wait
(one reader thread per replica stream); ``LogFileFollower`` serves the triggerer's live logs, whose
position travels in the trigger's serialized ``log_cursor``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any


def follow_file(
    locate: Callable[[bool], str | None],
    finished: Callable[[], bool],
    sleep: Callable[[float], Any],
    tail: bool = True,
    poll: float = 1.0,
) -> Iterator[str]:
    """Lines of a log file, followed until ``finished()`` when ``tail``.

    ``locate(ask)`` gives the file's path (None while unknown; ``ask=False`` while the app runs, so
    finding it never queries the scheduler); ``sleep(poll)`` waits between looks, and may return
    early (``Event.wait``) when the app ends.
    """
    path = None
    while True:  # wait for the file to appear
        path = path or locate(not tail)
        if path and os.path.isfile(path):
            break
        if not tail or finished():
            path = path or locate(True)  # written just before the end, or never written at all
            if path and os.path.isfile(path):
                break
            return
        sleep(poll)
    pending = ""
    with open(path, errors="replace", newline="\n") as f:
        while True:
            chunk = f.readline()
            if chunk:
                pending += chunk
                if pending.endswith("\n"):
                    yield pending.rstrip("\n")
                    pending = ""
                continue
            if not tail or finished():
                yield from (pending + f.read()).splitlines()
                return
            sleep(poll)


def log_cursor_key(role: str, k: int, stream: str | None) -> str:
    return f"{role}/{k}/{stream or 'all'}"


class LogFileFollower:
    """What was appended to each replica's log files since the last look: a deferred wait's live logs.

    Keeps a byte offset per file and the count of lines shown per replica and stream (the trigger's
    ``log_cursor``), so every line is shown once: by the trigger while the app runs, and the rest by
    the task when it resumes (``print_app_logs`` skips the counted lines). Lines already counted in
    ``cursor`` (a trigger re-created after a restart) are skipped, not shown again.

    :param streams: every ``(role, replica, stream)`` to follow.
    :param cursor: lines already shown, per ``log_cursor_key``.
    """

    def __init__(self, streams: list[tuple[str, int, str | None]], cursor: Mapping[str, int] | None = None):
        self.streams = streams
        self.cursor = {log_cursor_key(*s): 0 for s in streams}
        self.cursor.update(cursor or {})
        self._skip = dict(self.cursor)
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, bytes] = {}

    def read_new(
        self, locate: Callable[[str, int, str | None], str | None], final: bool = False
    ) -> list[tuple[str, str]]:
        """``(prefix, line)`` of the complete lines appended since the last call; with ``final`` (the
        app is terminal, its files are complete) the last line even without a newline."""
        new: list[tuple[str, str]] = []
        for role, k, stream in self.streams:
            key = log_cursor_key(role, k, stream)
            path = locate(role, k, stream)
            if not path or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                f.seek(self._offsets.get(key, 0))
                data = self._partial.pop(key, b"") + f.read()
                self._offsets[key] = f.tell()
            lines = data.split(b"\n")
            rest = lines.pop()  # after the last newline: an unfinished line
            if rest and final:
                lines.append(rest)
            elif rest:
                self._partial[key] = rest
            for raw in lines:
                if self._skip.get(key, 0) > 0:
                    self._skip[key] -= 1
                    continue
                self.cursor[key] += 1
                new.append((f"[{role}/{k}]", raw.decode(errors="replace").rstrip("\r")))
        return new
