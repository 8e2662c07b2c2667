"""A pytest plugin: with ``TORCHX_AIRFLOW_REQUIRE_ALL=1`` (CI sets it in ``.ci/run``) a test that did
not run fails the session. Skipped, xfailed and xpassed tests are listed with their reasons and a
session that would have passed exits 1; any other exit status (failures, 5 for no tests) is kept.
Without the variable skips are allowed (pytest's ``-rsx``, in ``addopts``, prints their reasons).

tests/conftest.py registers it; ``python -m pytest -p tests.require_all`` loads it elsewhere.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_ALL = "TORCHX_AIRFLOW_REQUIRE_ALL"
# the terminal reporter's stats keys of tests that did not run as written
NOT_RUN = ("skipped", "xfailed", "xpassed")


def required() -> bool:
    """True where every test must run (the variable is set to anything but "", "0" or "false")."""
    return os.environ.get(REQUIRE_ALL, "").strip().lower() not in ("", "0", "false")


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    if getattr(report, "wasxfail", None) is not None:
        return f"xfail: {report.wasxfail}" if report.wasxfail else "xfail"
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        return str(longrepr[2])
    return str(longrepr)


def not_run(config: pytest.Config) -> list[str]:
    """``node id (outcome): reason`` of every test or collector that did not run, as reported."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return []
    return [
        f"{report.nodeid} ({key}): {_reason(report)}"
        for key in NOT_RUN
        for report in reporter.stats.get(key, [])
    ]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not required() or hasattr(session.config, "workerinput"):  # xdist's controller decides
        return
    missing = not_run(session.config)
    if not missing:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")  # after the progress line, which has no newline yet
        reporter.write_sep("=", f"{REQUIRE_ALL}=1: {len(missing)} test(s) did not run", red=True)
        for line in missing:
            reporter.write_line(line)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
