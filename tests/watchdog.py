"""Stop a test's services when the process that started them dies, however it dies (a SIGKILLed
pytest worker included, which runs no ``finally`` and no fixture teardown).

    python tests/watchdog.py OWNER_PID --group PGID    guard process group PGID; exit once it is gone
    python tests/watchdog.py OWNER_PID --pid-dir DIR   guard the group of every DIR/*.pid; exit when
                                                       stopped (scripts/airflow-stack.sh's services)

When OWNER_PID ends, every guarded group gets SIGTERM, and SIGKILL if anything of it is left after
GRACE_SECONDS. The watchdog runs in a session of its own, ignoring SIGINT and SIGHUP, so a Ctrl-C or a
signal sent to its owner's or to a service's group does not take it down before its work. It imports
nothing but the standard library (started with ``python -I``: a few MB, no test code).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from pathlib import Path

GRACE_SECONDS = 20
CHECK_SECONDS = 1.0


def _owner_ended(pidfd: int | None, owner: int, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``owner`` to end; True once it has (a zombie counts as ended)."""
    if pidfd is not None:
        return bool(select.select([pidfd], [], [], seconds)[0])
    try:  # no pidfd (an old kernel): the process's state in /proc
        state = Path(f"/proc/{owner}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    if state in ("Z", "X"):
        return True
    time.sleep(seconds)
    return False


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's group now: not ours to guard
        return False
    return True


def _groups(mode: str, target: str) -> list[int]:
    if mode == "--group":
        return [int(target)]
    groups = []
    for pid_file in Path(target).glob("*.pid"):
        try:
            pid = int(pid_file.read_text().strip())
            pgid = os.getpgid(pid)
        except (OSError, ValueError):
            continue
        # a service leads its group (setsid); a stale file's pid reused by another process rarely does
        if pgid == pid and pgid != os.getpgid(0):
            groups.append(pgid)
    return groups


def _stop(groups: list[int]) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + GRACE_SECONDS
    while any(_alive(pgid) for pgid in groups) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[2] not in ("--group", "--pid-dir"):
        print(__doc__, file=sys.stderr)
        return 2
    owner, mode, target = int(argv[1]), argv[2], argv[3]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        pidfd: int | None = os.pidfd_open(owner)
    except ProcessLookupError:
        _stop(_groups(mode, target))
        return 0
    except (AttributeError, OSError):
        pidfd = None
    while not _owner_ended(pidfd, owner, CHECK_SECONDS):
        if mode == "--group" and not _alive(int(target)):
            return 0  # stopped by its owner: nothing left to guard
    _stop(_groups(mode, target))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
