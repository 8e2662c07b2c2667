"""How `make test` hands test files to its workers (pytest-xdist, ``--dist loadfile``).

xdist's own order is the number of tests per file, largest first: the files that start an Airflow
stack or wait on Slurm hold one or two long tests, so they all came last and ran together at the
end, a long tail with several stacks alive at once. Here the longest files go first (each file's
seconds in the last full run, tests/durations.json; a file not in it is estimated from what it
starts), so the short files fill the gaps at the end. Every worker sorts its collection so
(``order_items``, from tests/conftest.py); the scheduler hands the units out in that order.

A package listed in ``ONE_WORKER_PACKAGES`` is one unit of work: its files share a package-scoped
service (tests/e2e/pipeline shares one stack of `make up`), started once and stopped after them.

Refresh the table after adding long tests: ``python -m pytest ... --junitxml=/tmp/junit.xml``, then
``python -m tests.scheduling /tmp/junit.xml > tests/durations.json``.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest
from xdist.scheduler import LoadFileScheduling

TESTS = Path(__file__).resolve().parent
DURATIONS = TESTS / "durations.json"
ONE_WORKER_PACKAGES = ("tests/e2e/pipeline/",)
# what a file that is not in the table starts, and what that costs (seconds, 2 loaded cores)
_STARTS = {
    "AirflowStack(": 400.0,
    "dags_stack(": 400.0,
    "slurm_stack": 400.0,
    "pipeline_stack": 400.0,
    "run_dag(": 60.0,
    "slurm_cluster": 60.0,
    "k8s_cluster": 60.0,
}


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


class LongestFirst(LoadFileScheduling):
    """``loadfile`` with ``ONE_WORKER_PACKAGES`` as units, handed out in the collected order (which
    ``order_items`` made longest first), not re-sorted by number of tests."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


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
