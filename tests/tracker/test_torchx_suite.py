"""TorchX's own tracker tests, pointed at our stores.

TorchX does not ship its tests in the wheel or the sdist: ``torchx_upstream/`` holds unchanged copies
of the two files from the release tag (see its README). To run another TorchX's copies (main, say),
point ``TORCHX_SRC`` at its checkout::

    TORCHX_SRC=~/src/torchx pytest tests/tracker/test_torchx_suite.py

``torchx/tracker/backend/test/fsspec_test.py`` runs with its ``FsspecTracker`` replaced by our
``FsspecStore``; ``torchx/tracker/test/api_test.py`` runs with its in-memory ``TestTrackerBackend``
replaced by our fsspec store and by our MLflow store (SQLite). Each test must pass (run and pass:
a skip or an expected failure is not a pass), apart from the documented differences below, which the
README lists too. A control run of each suite against a store that raises on every call must fail,
so a suite that stopped reaching the store it is given cannot pass unnoticed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import unittest
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from torchx.tracker.api import AppRun, TrackerBase
from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.mlflow_store import MlflowStore

UPSTREAM = Path(__file__).parent / "torchx_upstream"
# a checkout's path for a file, or the copy here (same base name) when TORCHX_SRC is unset
SOURCE = os.environ.get("TORCHX_SRC")

# test name -> why ours differs on purpose (none today; the README keeps the same list)
FSSPEC_DIFFERENCES: dict[str, str] = {}
API_DIFFERENCES: dict[str, str] = {}


def _load(relative: str) -> ModuleType:
    if "torchx.tracker.mlflow" not in sys.modules:
        # api_test imports TorchX's MLflow tracker only as a type for a mock; the real module imports
        # torch, which this environment does not install: a stand-in class (a fake, named as one)
        stand_in = ModuleType("torchx.tracker.mlflow")
        stand_in.MLflowTracker = type("MLflowTracker", (TrackerBase,), {})  # type: ignore[attr-defined]
        sys.modules["torchx.tracker.mlflow"] = stand_in
    path = Path(SOURCE) / relative if SOURCE else UPSTREAM / Path(relative).name
    spec = importlib.util.spec_from_file_location(f"torchx_suite_{path.stem}_{uuid.uuid4().hex[:6]}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Outcomes(unittest.TestResult):
    """Each test's own outcome: ``passed`` only for a test that ran and passed; a skip, an expected
    failure or an unexpected success is not a pass."""

    def __init__(self) -> None:
        super().__init__()
        self.outcomes: dict[str, str] = {}

    def _record(self, test: unittest.TestCase, outcome: str) -> None:
        name = getattr(test, "_testMethodName", str(test))
        if self.outcomes.get(name, "passed") == "passed":  # a failing subtest is not overwritten
            self.outcomes[name] = outcome

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._record(test, "failed: " + self._exc_info_to_string(err, test).strip().splitlines()[-1])

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        self._record(test, "error: " + self._exc_info_to_string(err, test).strip().splitlines()[-1])

    def addSubTest(self, test: unittest.TestCase, subtest: Any, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._record(test, f"failed in {subtest}")

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._record(test, f"skipped: {reason}")

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self._record(test, "expected failure")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self._record(test, "unexpected success")


def _run(*test_cases: type[unittest.TestCase]) -> dict[str, str]:
    """Run TestCases; {test name: "passed" | what else happened}. A test that never reported (its
    class failed to set up) is "not run"."""
    result = _Outcomes()
    outcomes: dict[str, str] = {}
    for test_case in test_cases:
        outcomes.update(dict.fromkeys(unittest.defaultTestLoader.getTestCaseNames(test_case), "not run"))
        unittest.defaultTestLoader.loadTestsFromTestCase(test_case).run(result)
    outcomes.update(result.outcomes)
    return outcomes


def _not_passed(outcomes: dict[str, str]) -> dict[str, str]:
    return {name: outcome for name, outcome in outcomes.items() if outcome != "passed"}


class _RaisingStore(TrackerBase):
    """The control: a store that raises on every call, opening included. The suites must fail on it,
    or they do not test the store they are given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the control store raises on every call")

    def _raise(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the control store raises on every call")

    add_artifact = artifacts = add_metadata = metadata = _raise
    add_source = sources = lineage = run_ids = _raise


# fsspec_test tests of TorchX's own fsspec module (its file names, its run id encoding, its config
# file parser and its ``create`` factory, which builds TorchX's tracker): they never touch ours.
FSSPEC_STORE_INDEPENDENT = {
    "test_create",
    "test_encode_decode_torchx_run",
    "test_generate_filename",
    "test_read_config",
    "test_read_config_bad_key",
}
# api_test tests that never build or call the tracker backend they are given: TorchX's parsing of
# TORCHX_TRACKERS / TORCHX_TRACKER_<NAME>_CONFIG, its factory lookup (mocked) and run_from_env without a
# launcher. They pass on any store (the control included), so they prove nothing about ours.
API_STORE_INDEPENDENT = {
    "test_build_trackers_with_module",
    "test_build_trackers_with_no_entrypoints_group_defined",
    "test_build_trackers_with_no_trackers_defined",
    "test_config_env_var_name",
    "test_extract_tracker_name_and_config_from_environ_undefined",
    "test_extract_tracker_name_and_config_from_environ_with_just_name",
    "test_extract_tracker_name_and_config_from_environ_with_name_and_config",
    "test_run_from_env_not_launched_with_torchx",
    "test_tracker_from_environ_that_wasnt_setup",
    "test_tracker_from_environ_with_missing_entrypoint",
    "test_trackers_from_environ_with_no_trackers_specified",
}


def _fsspec_suite(store: Any) -> dict[str, str]:
    module = _load("torchx/tracker/backend/test/fsspec_test.py")
    module.FsspecTracker = store
    return _run(module.FsspecTest)


def test_torchx_fsspec_backend_tests_on_our_fsspec_store():
    outcomes = _fsspec_suite(lambda fs, root_dir: FsspecStore(root_dir))  # their fs is always "file"
    assert len(outcomes) >= 10
    assert _not_passed(outcomes).keys() == FSSPEC_DIFFERENCES.keys(), _not_passed(outcomes)


def test_torchx_fsspec_backend_tests_fail_on_a_store_that_raises():
    """The control: every test that uses its tracker fails when the store raises, so the run above
    can fail; only the tests of TorchX's own helpers (listed above, with why) pass."""
    outcomes = _fsspec_suite(lambda fs, root_dir: _RaisingStore())
    assert len(outcomes) >= 10
    failing = set(_not_passed(outcomes))
    assert failing == outcomes.keys() - FSSPEC_STORE_INDEPENDENT, outcomes
    assert len(failing) > len(outcomes) / 2


class _FsspecBackend(FsspecStore):
    """TorchX's test backend takes an optional config path; ours keeps it and stores in a fresh dir."""

    base_dir = Path(tempfile.gettempdir())  # the test sets its tmp_path

    def __init__(self, config_path: str | None = None) -> None:
        super().__init__(tempfile.mkdtemp(prefix="store-", dir=self.base_dir))
        self.config_path = config_path


class _MlflowBackend(MlflowStore):
    base_dir = Path(tempfile.gettempdir())

    def __init__(self, config_path: str | None = None) -> None:
        uri = f"sqlite:///{self.base_dir / 'mlflow.db'}"
        super().__init__(uri, experiment=f"suite-{uuid.uuid4().hex[:8]}")
        self.config_path = config_path


def _api_suite(backend: type[TrackerBase]) -> dict[str, str]:
    module = _load("torchx/tracker/test/api_test.py")
    module.TestTrackerBackend = backend
    AppRun.run_from_env.cache_clear()  # TorchX caches the AppRun per process: not across our backends
    # TorchX's tests set TORCHX_JOB_ID (and trackers) in os.environ and leave them: a later test in
    # this process, or a reader it starts, would act as that job
    saved = dict(os.environ)
    try:
        return _run(module.AppRunApiTest, module.TrackerFactoryMethodsTest)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        AppRun.run_from_env.cache_clear()


@pytest.mark.parametrize("backend", [_FsspecBackend, _MlflowBackend], ids=["fsspec", "mlflow"])
def test_torchx_api_tests_on_our_stores(backend, tmp_path, monkeypatch):
    monkeypatch.setattr(backend, "base_dir", tmp_path)
    outcomes = _api_suite(backend)
    assert len(outcomes) >= 20
    assert _not_passed(outcomes).keys() == API_DIFFERENCES.keys(), _not_passed(outcomes)


def test_torchx_api_tests_fail_on_a_store_that_raises():
    """The control: every api_test that builds or calls its backend fails on a store that raises;
    only the store-independent ones (listed above, with why) pass."""
    outcomes = _api_suite(_RaisingStore)
    assert len(outcomes) >= 20
    failing = set(_not_passed(outcomes))
    assert failing == outcomes.keys() - API_STORE_INDEPENDENT, outcomes
    assert len(failing) > len(outcomes) / 2
