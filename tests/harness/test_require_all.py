"""tests/require_all.py, the rule that nothing may skip in CI: a pytest run of a tiny test file, in a
fresh process, with and without ``TORCHX_AIRFLOW_REQUIRE_ALL``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.require_all import REQUIRE_ALL

SKIPS = """
import pytest

def test_runs():
    pass

def test_skips():
    pytest.skip("no cluster answers here")

@pytest.mark.xfail(reason="known to fail here")
def test_xfails():
    raise AssertionError
"""
PASSES = "def test_runs():\n    pass\n"
FAILS_AND_SKIPS = SKIPS + "\ndef test_fails():\n    raise AssertionError\n"


def _pytest(tmp_path: Path, code: str, require: str | None, **others: str) -> subprocess.CompletedProcess:
    """pytest on ``test_tiny.py`` holding ``code`` (and the files ``others`` names, given as well)."""
    for name, text in {"test_tiny": code, **others}.items():
        (tmp_path / f"{name}.py").write_text(text)
    env = {k: v for k, v in os.environ.items() if k != REQUIRE_ALL}
    env["PYTHONPATH"] = str(REPO)  # `tests.require_all` importable; the repo's conftest is not loaded
    if require is not None:
        env[REQUIRE_ALL] = require
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.require_all", "-p", "no:cacheprovider", "-rsx",
         "test_tiny.py", *(f"{name}.py" for name in others)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("require", [None, "", "0"])
def test_skips_are_allowed_and_their_reasons_printed_without_the_variable(tmp_path, require):
    proc = _pytest(tmp_path, SKIPS, require)
    assert proc.returncode == 0, proc.stdout
    assert "no cluster answers here" in proc.stdout and "known to fail here" in proc.stdout
    assert "did not run" not in proc.stdout


def test_with_the_variable_a_skip_or_xfail_fails_the_session_naming_each(tmp_path):
    proc = _pytest(tmp_path, SKIPS, "1")
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout
    assert f"{REQUIRE_ALL}=1: 2 test(s) did not run" in proc.stdout
    assert "test_tiny.py::test_skips (skipped): Skipped: no cluster answers here" in proc.stdout
    assert "test_tiny.py::test_xfails (xfailed): xfail: known to fail here" in proc.stdout


def test_with_the_variable_a_session_where_everything_ran_passes(tmp_path):
    proc = _pytest(tmp_path, PASSES, "1")
    assert proc.returncode == pytest.ExitCode.OK, proc.stdout
    assert "did not run" not in proc.stdout


def test_other_exit_statuses_are_kept(tmp_path):
    assert _pytest(tmp_path, FAILS_AND_SKIPS, "1").returncode == pytest.ExitCode.TESTS_FAILED
    proc = _pytest(tmp_path, "", "1")  # no tests: 5, not swallowed and not turned into 1
    assert proc.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, proc.stdout


def test_a_module_skipped_at_collection_counts_too(tmp_path):
    skipped = 'import pytest\npytest.skip("needs root", allow_module_level=True)\n'
    proc = _pytest(tmp_path, PASSES, "1", test_skipped_module=skipped)
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout
    assert "needs root" in proc.stdout
