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


#: Bytes read from a file at once, and at most per stream and look (the rest comes next look, or
#: from the task when it resumes): a multi-GB log never lands in the triggerer's memory whole.
CHUNK_BYTES = 1 << 20
MAX_BYTES_PER_LOOK = 8 << 20
#: An unfinished line (``\r`` progress output with no newline) is kept up to this many bytes: past
#: it only its last ``\r``-separated part (or its last bytes) is kept.
MAX_PARTIAL_LINE = 64 << 10


def cap_partial_line(data: bytes, limit: int = MAX_PARTIAL_LINE) -> tuple[bytes, int]:
    """``data`` (an unfinished line) cut to at most ``limit`` bytes: ``(kept, bytes dropped)``.

    Keeps what follows the last ``\r`` (a progress bar's current state) when that fits.
    """
    if len(data) <= limit:
        return data, 0
    cut = data.rfind(b"\r", 0, len(data) - 1) + 1
    if cut == 0 or len(data) - cut > limit:
        cut = len(data) - limit
    return data[cut:], cut


class LogFileFollower:
    """What was appended to each replica's log files since the last look: a deferred wait's live logs.

    Keeps per replica and stream the count of lines shown (``cursor``, the trigger's ``log_cursor``)
    and the byte offset they were read up to (``offsets``, the trigger's ``log_offsets``), so every
    line is shown once: by the trigger while the app runs, and the rest by the task when it resumes
    (``print_app_logs`` skips the counted lines). A trigger re-created after a restart reads on from
    its offsets; one serialized with counts but no offsets (older versions) skips the counted lines.

    Files are read in chunks of ``CHUNK_BYTES``, at most ``MAX_BYTES_PER_LOOK`` per stream and look;
    an unfinished line is kept up to ``MAX_PARTIAL_LINE`` bytes (``cap_partial_line``).

    :param streams: every ``(role, replica, stream)`` to follow.
    :param cursor: lines already shown, per ``log_cursor_key``.
    :param offsets: per ``log_cursor_key``, the byte offset the lines in ``cursor`` end at.
    """

    def __init__(
        self,
        streams: list[tuple[str, int, str | None]],
        cursor: Mapping[str, int] | None = None,
        offsets: Mapping[str, int] | None = None,
    ):
        self.streams = streams
        self.cursor = {log_cursor_key(*s): 0 for s in streams}
        self.cursor.update(cursor or {})
        self.offsets = {key: 0 for key in self.cursor}
        self.offsets.update(offsets or {})
        # lines to skip: counted by an older trigger that kept no offsets
        self._skip = {key: n for key, n in self.cursor.items() if n and key not in (offsets or {})}
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
            if path and os.path.isfile(path):
                new.extend((f"[{role}/{k}]", line) for line in self._read_stream(key, path, final))
        return new

    def _read_stream(self, key: str, path: str, final: bool) -> list[str]:
        partial = self._partial.pop(key, b"")
        # where the partial line starts: offsets[key]; the file is read on after it
        position = self.offsets[key] + len(partial)
        lines: list[str] = []
        complete = True
        with open(path, "rb") as f:
            f.seek(position)
            for _ in range(MAX_BYTES_PER_LOOK // CHUNK_BYTES):
                chunk = f.read(CHUNK_BYTES)
                if not chunk:
                    break
                partial = self._take_lines(key, partial + chunk, lines)
            else:
                complete = False
        if partial and final and complete:
            self._count(key, partial, lines)
            self.offsets[key] += len(partial)
        elif partial:
            self._partial[key] = partial
        return lines

    def _take_lines(self, key: str, data: bytes, lines: list[str]) -> bytes:
        """Count the complete lines of ``data`` into ``lines``; the unfinished rest, capped."""
        end = data.rfind(b"\n") + 1
        for raw in data[:end].split(b"\n")[:-1] if end else ():
            self._count(key, raw, lines)
        self.offsets[key] += end
        rest, dropped = cap_partial_line(data[end:])
        self.offsets[key] += dropped
        return rest

    def _count(self, key: str, raw: bytes, lines: list[str]) -> None:
        if self._skip.get(key, 0) > 0:
            self._skip[key] -= 1
            return
        self.cursor[key] += 1
        lines.append(raw.decode(errors="replace").rstrip("\r"))
