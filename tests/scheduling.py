"""How `make test` hands test files to its workers (pytest-xdist, ``--dist loadfile``).

xdist's own order is the number of tests per file, largest first: the files that start an Airflow
stack or wait on Slurm hold one or two long tests, so they all came last and ran together at the
end, a long tail with several stacks alive at once. Here the longest files go first (each file's
seconds in the last full run, tests/durations.json; a file not in it is estimated from what it
starts), so the short files fill the gaps at the end. Every worker sorts its collection so
(``order_items``, from tests/conftest.py); the scheduler hands the units out in that order.

A package listed in ``ONE_WORKER_PACKAGES`` is one unit of work: its files share a package-scoped
service (tests/e2e/pipeline shares one stack of `make up`), started once and stopped after them.

At most ``HEAVY_AT_ONCE`` workers run a heavy unit at a time: one that starts an Airflow stack or
Chromium (``HEAVY``, found in its text), each 1.5-2.5 GB with its jobs. A worker the cap refuses gets
the longest light unit instead, so the heavy units (the longest, handed out first) run two at a time
while the third worker goes through the light ones. An xdist worker runs its last test only once it
is sent more work or told to stop (pytest needs the next item to tear down): a worker that holds
one test and may take nothing that is left (only heavy units remain, the cap is full) is told to
stop, never left waiting on a cap that the others, each taking the next heavy unit, keep full.

Refresh the table after adding long tests: ``python -m pytest ... --junitxml=/tmp/junit.xml``, then
``python -m tests.scheduling /tmp/junit.xml > tests/durations.json``.
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest
from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController

TESTS = Path(__file__).resolve().parent
DURATIONS = TESTS / "durations.json"
ONE_WORKER_PACKAGES = ("tests/e2e/pipeline/",)
# what makes a unit heavy: an Airflow stack (or the fixtures and helpers that start one), or Chromium;
# a test whose file starts either without naming one of these fails (``require_heavy``)
HEAVY = ("AirflowStack(", "dags_stack(", "celery_airflow(", "slurm_stack", "pipeline_stack", "chromium")
HEAVY_AT_ONCE = 2
# what a file that is not in the table starts, and what that costs (seconds, 2 loaded cores)
_STARTS = {**dict.fromkeys(HEAVY, 400.0), "run_dag(": 60.0, "slurm_cluster": 60.0, "k8s_cluster": 60.0}


def scope_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return next((package for package in ONE_WORKER_PACKAGES if path.startswith(package)), path)


def estimate(path: str, tests: int, known: dict[str, float], root: Path = TESTS.parent) -> float:
    """Seconds a file (``path`` under ``root``) is expected to take: the table's figure, else a guess
    from its text."""
    if path in known:
        return known[path]
    try:
        text = (root / path).read_text()
    except OSError:
        return float(tests)
    return tests + sum(cost * min(text.count(marker), 5) for marker, cost in _STARTS.items())


def order_items(items: list[pytest.Item]) -> None:
    """Sort ``items`` in place: the heaviest unit of work (``scope_of``) first, each unit's tests
    together in their collected order. Every xdist worker collects and sorts alike, so the controller
    receives the same ordered list from each (xdist sends workers indexes into it)."""
    known = _load_durations()
    tests: dict[str, int] = defaultdict(int)
    files: dict[str, set[str]] = defaultdict(set)
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        tests[path] += 1
        files[scope_of(item.nodeid)].add(path)
    root = items[0].config.rootpath if items else TESTS.parent
    weight = {scope: sum(estimate(p, tests[p], known, root) for p in paths) for scope, paths in files.items()}
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (-weight[scope_of(item.nodeid)], scope_of(item.nodeid), order[id(item)]))


def is_heavy(scope: str, root: Path = TESTS.parent) -> bool:
    """Whether a unit (a file, or a package's directory ending in ``/``) starts what ``HEAVY`` names."""
    path = root / scope
    files = sorted(path.rglob("*.py")) if scope.endswith("/") else [path]
    for file in files:
        try:
            text = file.read_text()
        except OSError:
            continue
        if any(marker in text for marker in HEAVY):
            return True
    return False


def require_heavy(what: str) -> None:
    """Called where a test starts ``what`` (an Airflow stack, Chromium): fails the test when its file
    is not a heavy unit, which the cap would not count."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    path = current.split("::", 1)[0]
    if not path.endswith(".py") or not (TESTS.parent / path).is_file():
        return  # not a test of this suite (a pytest run of a harness test's own files)
    if not is_heavy(scope_of(path)):
        raise RuntimeError(
            f"{path} starts {what}, but its text names none of tests/scheduling.py's HEAVY {HEAVY}, so "
            "the schedule would run it beside two other heavy files: add the name it starts it by to HEAVY"
        )


class LongestFirst(LoadFileScheduling):
    """``loadfile`` with ``ONE_WORKER_PACKAGES`` as units, handed out in the collected order (which
    ``order_items`` made longest first), not re-sorted by number of tests, with at most
    ``heavy_at_once`` workers holding heavy units (``is_heavy``)."""

    def __init__(self, config: pytest.Config, log: object = None, heavy_at_once: int = HEAVY_AT_ONCE) -> None:
        super().__init__(config, log)
        self.heavy_at_once = heavy_at_once
        self._root = config.rootpath
        self._heavy: dict[str, bool] = {}

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)

    def _is_heavy(self, scope: str) -> bool:
        if scope not in self._heavy:
            self._heavy[scope] = is_heavy(scope, self._root)
        return self._heavy[scope]

    def _holds_heavy(self, node: object) -> bool:
        """Whether a heavy unit given to ``node`` has a test not yet run (it runs, or will)."""
        work = self.assigned_work.get(node, {})
        return any(self._is_heavy(scope) and not all(done.values()) for scope, done in work.items())

    def _next_scope(self, node: object) -> str | None:
        """The first unit in the queue that ``node`` may take: any when it already holds a heavy unit
        (it runs one unit at a time) or fewer than ``heavy_at_once`` other workers do, else a light one."""
        others = sum(1 for other in self.assigned_work if other is not node and self._holds_heavy(other))
        may_take_heavy = self._holds_heavy(node) or others < self.heavy_at_once
        return next((s for s in self.workqueue if may_take_heavy or not self._is_heavy(s)), None)

    def _assign_work_unit(self, node: WorkerController) -> None:
        scope = self._next_scope(node)
        if scope is None:
            # what is left is heavy and the cap is full: a worker down to its last test would hold it
            # until told to stop, and the workers holding the cap take every heavy unit left in turn
            if self._pending_of(self.assigned_work[node]) <= 1:
                node.shutdown()
            return
        self.workqueue.move_to_end(scope, last=False)  # xdist's own assignment takes the first unit
        super()._assign_work_unit(node)


def _load_durations() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}


def make_scheduler(config: pytest.Config, log: object) -> LongestFirst | None:
    if config.getoption("dist", None) != "loadfile":
        return None
    config.option.loadscopereorder = False  # keep the collected (longest-first) order
    return LongestFirst(config, log)


def durations_from_junit(report: Path) -> dict[str, float]:
    """Seconds per test file (set-up, call and tear-down of its tests) from a JUnit XML report."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "")
        parts = module.split(".")
        # classname is the module path (plus a class): the longest prefix that is a file
        for end in range(len(parts), 0, -1):
            path = "/".join(parts[:end]) + ".py"
            if (TESTS.parent / path).is_file():
                seconds[path] += float(case.get("time") or 0)
                break
    return {path: round(value, 1) for path, value in sorted(seconds.items())}


if __name__ == "__main__":
    json.dump(durations_from_junit(Path(sys.argv[1])), sys.stdout, indent=1)
    sys.stdout.write("\n")
