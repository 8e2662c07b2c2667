"""The suite's schedule (tests/scheduling.py): what goes first, what shares a worker, and the table
of seconds per file read back from a JUnit report."""

from __future__ import annotations

from pathlib import Path

from tests.scheduling import _load_durations, durations_from_junit, estimate, scope_of


def test_the_pipeline_package_is_one_unit_and_other_files_their_own():
    assert scope_of("tests/e2e/pipeline/test_ui.py::test_x") == "tests/e2e/pipeline/"
    assert scope_of("tests/e2e/pipeline/test_pipeline_rest.py::test_y[a::b]") == "tests/e2e/pipeline/"
    assert scope_of("tests/e2e/test_assets_rest.py::test_z") == "tests/e2e/test_assets_rest.py"


def test_a_file_in_the_table_takes_its_seconds_and_others_are_guessed_from_what_they_start():
    known = {"tests/unit/test_bad_inputs.py": 12.5}
    assert estimate("tests/unit/test_bad_inputs.py", 90, known) == 12.5
    # a stack-starting file outweighs a file of many unit tests
    stack = estimate("tests/e2e/test_assets_rest.py", 1, {})
    units = estimate("tests/unit/test_settings.py", 100, {})
    assert stack > units >= 100


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
    repo = Path(__file__).resolve().parents[2]
    table = _load_durations()
    assert all((repo / path).is_file() for path in table), [p for p in table if not (repo / p).is_file()]
