"""TorchX's own tracker tests, pointed at our stores.

TorchX does not ship its tests in the wheel or the sdist: ``torchx_upstream/`` holds unchanged copies
of the two files from the release tag (see its README). To run another TorchX's copies (main, say),
point ``TORCHX_SRC`` at its checkout::

    TORCHX_SRC=~/src/torchx pytest tests/tracker/test_torchx_suite.py

``torchx/tracker/backend/test/fsspec_test.py`` runs with its ``FsspecTracker`` replaced by our
``FsspecStore``; ``torchx/tracker/test/api_test.py`` runs with its in-memory ``TestTrackerBackend``
replaced by our fsspec store and by our MLflow store (SQLite). Each test must pass, apart from the
documented differences below, which the README lists too.
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


def _run(test_case: type[unittest.TestCase]) -> dict[str, str]:
    """Run a TestCase; {test name: "pass" | the failure's first line}."""
    outcomes: dict[str, str] = {}
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(test_case).run(result)
    for test, trace in result.failures + result.errors:
        outcomes[test._testMethodName] = trace.strip().splitlines()[-1]
    for name in unittest.defaultTestLoader.getTestCaseNames(test_case):
        outcomes.setdefault(name, "pass")
    return outcomes


def test_torchx_fsspec_backend_tests_on_our_fsspec_store():
    module = _load("torchx/tracker/backend/test/fsspec_test.py")
    module.FsspecTracker = lambda fs, root_dir: FsspecStore(root_dir)  # their fs is always "file"
    outcomes = _run(module.FsspecTest)
    failing = {name for name, outcome in outcomes.items() if outcome != "pass"}
    assert failing == set(FSSPEC_DIFFERENCES), outcomes
    assert len(outcomes) >= 10


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


@pytest.mark.parametrize("backend", [_FsspecBackend, _MlflowBackend], ids=["fsspec", "mlflow"])
def test_torchx_api_tests_on_our_stores(backend, tmp_path, monkeypatch):
    monkeypatch.setattr(backend, "base_dir", tmp_path)
    module = _load("torchx/tracker/test/api_test.py")
    module.TestTrackerBackend = backend
    AppRun.run_from_env.cache_clear()  # TorchX caches the AppRun per process: not across our backends
    outcomes = {}
    for case in (module.AppRunApiTest, module.TrackerFactoryMethodsTest):
        outcomes.update(_run(case))
    failing = {name for name, outcome in outcomes.items() if outcome != "pass"}
    assert failing == set(API_DIFFERENCES), outcomes
    assert len(outcomes) >= 20
