"""The suite's schedule (tests/scheduling.py): what goes first, what shares a worker, and the table
of seconds per file read back from a JUnit report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.scheduling import (
    HEAVY,
    _load_durations,
    durations_from_junit,
    estimate,
    is_heavy,
    require_heavy,
    scope_of,
)

REPO = Path(__file__).resolve().parents[2]


def test_the_pipeline_package_is_one_unit_and_other_files_their_own():
    assert scope_of("tests/e2e/pipeline/test_ui.py::test_x") == "tests/e2e/pipeline/"
    assert scope_of("tests/e2e/pipeline/test_pipeline_rest.py::test_y[a::b]") == "tests/e2e/pipeline/"
    assert scope_of("tests/e2e/test_assets_rest.py::test_z") == "tests/e2e/test_assets_rest.py"


def test_a_file_in_the_table_takes_its_seconds_and_others_are_guessed_from_what_they_start():
    known = {"tests/unit/test_bad_inputs.py": 12.5}
    assert estimate("tests/unit/test_bad_inputs.py", 90, known) == 12.5
    # a stack-starting file outweighs a file of many unit tests
    stack = estimate("tests/e2e/test_assets_rest.py", 1, {})
    units = estimate("tests/unit/test_apps.py", 100, {})
    assert stack > units >= 100


def test_a_file_that_starts_a_stack_without_naming_it_heavy_fails(monkeypatch: pytest.MonkeyPatch):
    """The cap counts heavy files by their text; a file that starts a stack through a name HEAVY lacks
    fails where the stack starts (``AirflowStack``, the ``browser`` fixture call ``require_heavy``)."""
    # (this file names none of HEAVY, or it would be heavy itself)
    assert is_heavy("tests/e2e/test_celery_kills.py")  # by the Celery stack's helper, from another file
    assert is_heavy("tests/e2e/pipeline/")  # by the package's stack fixture, in its conftest.py
    assert not is_heavy("tests/unit/test_apps.py")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/e2e/test_celery_kills.py::test_x (setup)")
    require_heavy("an Airflow stack")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/unit/test_apps.py::test_x (call)")
    with pytest.raises(RuntimeError, match=r"tests/unit/test_apps.py starts an Airflow stack.*HEAVY"):
        require_heavy("an Airflow stack")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "test_a.py::test_0 (call)")  # a harness test's own pytest run
    require_heavy("an Airflow stack")


def test_durations_sum_each_files_cases_from_a_junit_report(tmp_path: Path):
    report = tmp_path / "junit.xml"
    report.write_text(
        """<testsuites><testsuite>
        <testcase classname="tests.harness.test_scheduling" name="a" time="1.25"/>
        <testcase classname="tests.harness.test_scheduling" name="b" time="2.5"/>
        <testcase classname="tests.e2e.pipeline.test_ui" name="c" time="100"/>
        <testcase classname="tests.no_such_file" name="d" time="7"/>
        </testsuite></testsuites>"""
    )
    assert durations_from_junit(report) == {
        "tests/e2e/pipeline/test_ui.py": 100.0,
        "tests/harness/test_scheduling.py": 3.8,
    }


def test_the_checked_in_table_names_existing_files():
    table = _load_durations()
    assert len(table) > 100, "tests/durations.json missing or nearly empty: refresh it (tests/scheduling.py)"
    assert all((REPO / path).is_file() for path in table), [p for p in table if not (REPO / p).is_file()]


def test_under_xdist_each_file_runs_on_one_worker_the_heaviest_first(tmp_path: Path):
    """A real ``pytest -n 2 --dist loadfile`` over files of 5, 2 and 1 tests with this schedule: every
    file's tests on one worker, in their order, and the 1-test file handed out first, as it names
    ``run_dag(`` (a DAG run: estimated heavier than 5 quick tests), where xdist's own order is the
    most tests first and the collected order is alphabetical."""
    _scheduling_conftest(tmp_path)
    record = tmp_path / "ran.jsonl"
    body = (
        "import json, os\n"
        "def _ran(name):\n"
        f"    with open({str(record)!r}, 'a') as f:\n"
        "        f.write(json.dumps([os.environ['PYTEST_XDIST_WORKER'], __name__, name]) + '\\n')\n"
    )
    for name, count in (("test_a", 5), ("test_b", 2), ("test_z", 1)):
        tests = "".join(f"def test_{i}():\n    _ran({i})\n" for i in range(count))
        heavy = "# as if it ran a DAG: run_dag(\n" if name == "test_z" else ""
        (tmp_path / f"{name}.py").write_text(body + heavy + tests)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = [json.loads(line) for line in record.read_text().splitlines()]
    workers: dict[str, set[str]] = {}
    for worker, module, _ in ran:
        workers.setdefault(module, set()).add(worker)
    assert len(ran) == 8 and all(len(w) == 1 for w in workers.values()), ran
    for module in workers:
        assert [i for _, m, i in ran if m == module] == sorted(i for _, m, i in ran if m == module), ran
    assert next(m for w, m, _ in ran if w in workers["test_z"]) == "test_z", ran


@pytest.mark.parametrize("light_files", [4, 0])
def test_two_heavy_files_at_most_at_once_and_a_worker_left_only_heavy_ones_stops(
    tmp_path: Path, light_files: int
):
    """A real ``pytest -n 3 --dist loadfile`` over three heavy files (their text names an Airflow
    stack) of four 1 s tests and quick light files: never three heavy files at once; the third worker
    goes through the light files meanwhile, and once only a heavy file is left to take it is told to
    stop, so it runs its last test then (an xdist worker holds its last test until it is sent more
    work or told to stop: left waiting on the cap, that test would run after every heavy file)."""
    _scheduling_conftest(tmp_path)
    record = tmp_path / "ran.jsonl"
    body = (
        "import json, os, time\n"
        "def _ran(seconds):\n"
        "    start = time.monotonic()\n"
        "    time.sleep(seconds)\n"
        f"    with open({str(record)!r}, 'a') as f:\n"
        "        row = [os.environ['PYTEST_XDIST_WORKER'], __name__, start, time.monotonic()]\n"
        "        f.write(json.dumps(row) + '\\n')\n"
    )
    heavy = [f"test_heavy_{i}" for i in range(3)]
    light = [f"test_light_{i}" for i in range(light_files)]
    for name in heavy:
        tests = "".join(f"def test_{i}():\n    _ran(1.0)\n" for i in range(4))
        (tmp_path / f"{name}.py").write_text(f"{body}# as if it started one: {HEAVY[0]}\n{tests}")
    for name in light:
        tests = "".join(f"def test_{i}():\n    _ran(0.2)\n" for i in range(2))
        (tmp_path / f"{name}.py").write_text(body + tests)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadfile", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(ran) == 4 * len(heavy) + 2 * len(light), ran
    spans = {
        m: (min(s for _, n, s, _ in ran if n == m), max(e for _, n, _, e in ran if n == m)) for m in heavy
    }
    for start, _ in spans.values():
        running = [m for m, (s, e) in spans.items() if s <= start < e]
        assert len(running) <= 2, (running, spans)
    if light:
        first_heavy_end = min(end for _, end in spans.values())
        assert max(e for _, n, _, e in ran if n in light) < first_heavy_end, ran


def _scheduling_conftest(directory: Path) -> None:
    """A conftest.py that schedules ``directory``'s tests as the suite's own conftest does."""
    (directory / "conftest.py").write_text(
        textwrap.dedent(
            """
            from tests.scheduling import make_scheduler, order_items

            def pytest_xdist_make_scheduler(config, log):
                return make_scheduler(config, log)

            def pytest_collection_modifyitems(config, items):
                order_items(items)
            """
        )
    )
