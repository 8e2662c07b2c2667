"""Run a command (the test suite) and print, when it ends, the peak memory of all its processes together.

    python tests/peak_memory.py COMMAND [ARG...]

Every second the resident memory (RSS) of the suite's processes is summed: the command and its
descendants, and every process that carries this run's mark in its environment (``SUITE_RUN_MARK``,
which every child inherits) or descends from one. The mark finds what left the tree on purpose: the
services scripts/airflow-stack.sh starts with ``setsid`` and leaves behind, the watchdogs, a Slurm
cluster started for the run and its jobs' steps. Jobs of a cluster that was already up are not counted.

A sum of RSS counts a page shared by several processes once per process: it is an upper bound. The
figure reported is the sum of PSS (``/proc/PID/smaps_rollup``: each shared page divided between the
processes sharing it), which is what the processes hold together. Reading it walks every process's
page tables, so it is read only while the RSS sum is within 15 % of its highest value so far (where
the peak can be), at most once a second. The largest groups of processes at the peak are listed.

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
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

SUITE_RUN_MARK = "TORCHX_AIRFLOW_SUITE_RUN"
INTERVAL_SECONDS = 1.0
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Peak:
    """The largest sums seen (RSS, and PSS near the RSS peak), when, over how many processes, and who."""

    rss: int = 0
    processes: int = 0
    at: float = 0.0
    samples: int = 0
    pss: int = 0
    pss_processes: int = 0
    pss_at: float = 0.0
    pss_samples: int = 0
    groups: list[tuple[str, int, int]] = field(default_factory=list)  # (name, processes, PSS)
    error: str = ""


NEAR_PEAK = 0.85  # PSS is read while the RSS sum is at least this share of its highest value
TOP_GROUPS = 6


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


def sample(root: int, mark: bytes, verdicts: dict[tuple[int, str], bool]) -> tuple[int, list[int]]:
    """(summed RSS, the processes) of ``root``'s tree and of the marked processes' trees."""
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
    return sum(table[pid][2] for pid in mine), mine


def _pss(pid: int) -> int:
    """The process's proportional set size in bytes (0 when it is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _group(pid: int) -> str:
    """A short name for the kind of process: the program and, for an interpreter, what it runs."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        argv = [a for a in raw.split("\0") if a]
    except OSError:
        return "?"
    if not argv:
        return "?"
    words = [os.path.basename(argv[0].split()[0])] + argv[1:]
    if words[0].startswith("python") and len(words) > 1:
        words = words[1:]
        if words[0] == "-c":  # the code itself is no name
            return f"{os.path.basename(argv[0])} -c"
        if words[0] == "-m" and len(words) > 1:
            words = words[1:]
        words[0] = os.path.basename(words[0])
    return " ".join(word for word in words[:2] if not word.startswith("-"))[:40] or words[0][:40]


def pss_sample(pids: list[int]) -> tuple[int, list[tuple[str, int, int]]]:
    """(summed PSS, the largest groups by PSS as (name, processes, PSS)) of ``pids``."""
    by_group: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    total = 0
    for pid in pids:
        pss = _pss(pid)
        total += pss
        entry = by_group[_group(pid)]
        entry[0] += 1
        entry[1] += pss
    groups = sorted(((name, n, pss) for name, (n, pss) in by_group.items()), key=lambda g: -g[2])
    return total, groups[:TOP_GROUPS]


def _watch(root: int, mark: bytes, done: threading.Event, peak: Peak) -> None:
    verdicts: dict[tuple[int, str], bool] = {}
    try:
        while not done.wait(INTERVAL_SECONDS):
            rss, pids = sample(root, mark, verdicts)
            peak.samples += 1
            if rss > peak.rss:
                peak.rss, peak.processes, peak.at = rss, len(pids), time.time()
            if rss >= NEAR_PEAK * peak.rss:
                pss, groups = pss_sample(pids)
                peak.pss_samples += 1
                if pss > peak.pss:
                    peak.pss, peak.pss_processes, peak.pss_at = pss, len(pids), time.time()
                    peak.groups = groups
    except Exception as e:  # the figure is a report: it never ends the run
        peak.error = f"{type(e).__name__}: {e}"


def report(peak: Peak) -> str:
    if peak.error:
        return f"Peak memory of the suite's processes: not measured ({peak.error})"
    if not peak.samples:
        return "Peak memory of the suite's processes: not measured (the run ended before a sample)"
    when = time.strftime("%H:%M:%S", time.localtime(peak.pss_at))
    rss_when = time.strftime("%H:%M:%S", time.localtime(peak.at))
    largest = "; ".join(f"{name} x{n} {pss / 2**30:.2f}" for name, n, pss in peak.groups)
    return (
        f"Peak memory of the suite's processes: {peak.pss / 2**30:.3f} GiB "
        f"({peak.pss / 1e9:.3f} GB; sum of PSS over {peak.pss_processes} processes at {when}; "
        "sum of RSS, an upper bound: "
        f"{peak.rss / 2**30:.2f} GiB over {peak.processes} processes at {rss_when}; {peak.samples} samples, "
        f"one every {INTERVAL_SECONDS:g} s, PSS read in {peak.pss_samples}; tests/peak_memory.py)\n"
        f"Largest at the peak (GiB of PSS): {largest}"
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
