"""Run a command (the test suite) and print, when it ends, the peak memory of all its processes together.

    python tests/peak_memory.py COMMAND [ARG...]

Every second the resident memory (RSS) of the suite's processes is summed: the command and its
descendants, and every process that carries this run's mark in its environment (``SUITE_RUN_MARK``,
which every child inherits) or descends from one. The mark finds what left the tree on purpose: the
services scripts/airflow-stack.sh starts with ``setsid`` and leaves behind, the watchdogs, a Slurm
cluster started for the run and its jobs' steps. Jobs of a cluster that was already up are not counted.
A sum of RSS counts a page shared by several processes once per process: it is an upper bound.

The figure is a report, never a verdict: the command's exit status is returned unchanged, and a
sampling error prints a line saying so instead of the figure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

SUITE_RUN_MARK = "TORCHX_AIRFLOW_SUITE_RUN"
INTERVAL_SECONDS = 1.0
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Peak:
    """The largest sum seen, when, and over how many processes."""

    rss: int = 0
    processes: int = 0
    at: float = 0.0
    samples: int = 0
    error: str = ""


def _processes() -> dict[int, tuple[int, str, int]]:
    """pid -> (parent pid, start time, RSS in bytes) of every process readable now."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            rss_pages = int(Path(f"/proc/{entry}/statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        table[int(entry)] = (int(stat[1]), stat[19], rss_pages * PAGE)
    return table


def _marked(pid: int, mark: bytes) -> bool:
    try:
        return mark in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or another user's
        return False


def sample(root: int, mark: bytes, verdicts: dict[tuple[int, str], bool]) -> tuple[int, int]:
    """(summed RSS, number of processes) of ``root``'s tree and of the marked processes' trees."""
    table = _processes()
    counted: dict[int, bool] = {}

    def counts(pid: int) -> bool:
        chain = []
        while pid not in counted:
            if pid not in table:  # above init, or gone meanwhile
                counted[pid] = False
                break
            key = (pid, table[pid][1])
            if key not in verdicts:  # an environment is read once per process
                verdicts[key] = pid == root or _marked(pid, mark)
            if verdicts[key]:
                counted[pid] = True
                break
            chain.append(pid)
            pid = table[pid][0]
        for link in chain:  # the answer holds for every process on the way up
            counted[link] = counted[pid]
        return counted[pid]

    mine = [pid for pid in table if pid != os.getpid() and counts(pid)]
    return sum(table[pid][2] for pid in mine), len(mine)


def _watch(root: int, mark: bytes, done: threading.Event, peak: Peak) -> None:
    verdicts: dict[tuple[int, str], bool] = {}
    try:
        while not done.wait(INTERVAL_SECONDS):
            rss, count = sample(root, mark, verdicts)
            peak.samples += 1
            if rss > peak.rss:
                peak.rss, peak.processes, peak.at = rss, count, time.time()
    except Exception as e:  # the figure is a report: it never ends the run
        peak.error = f"{type(e).__name__}: {e}"


def report(peak: Peak) -> str:
    if peak.error:
        return f"Peak memory of the suite's processes: not measured ({peak.error})"
    if not peak.samples:
        return "Peak memory of the suite's processes: not measured (the run ended before a sample)"
    when = time.strftime("%H:%M:%S", time.localtime(peak.at))
    return (
        f"Peak memory of the suite's processes: {peak.rss / 2**30:.2f} GiB "
        f"(sum of RSS over {peak.processes} processes at {when}; {peak.samples} samples, "
        f"one every {INTERVAL_SECONDS:g} s; tests/peak_memory.py)"
    )


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    mark = uuid.uuid4().hex
    command = subprocess.Popen(argv, env={**os.environ, SUITE_RUN_MARK: mark})
    # the command gets a Ctrl-C from the terminal itself; a SIGTERM to this process is passed on
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, _frame: command.send_signal(signum))
    peak, done = Peak(), threading.Event()
    watcher = threading.Thread(
        target=_watch, args=(command.pid, f"{SUITE_RUN_MARK}={mark}".encode(), done, peak)
    )
    watcher.start()
    status = command.wait()
    done.set()
    watcher.join(timeout=30)
    try:
        print(report(peak), flush=True)
    except Exception as e:  # never fail the run for its report
        print(f"Peak memory of the suite's processes: not reported ({e})", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
