"""Where tests leave files for a person to look at (screenshots of the UI): outside the repo, so
a test run writes nothing into the checkout. TORCHX_AIRFLOW_TEST_ARTIFACTS moves them (CI keeps
them by pointing it at its own artifact directory)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_DEFAULT = Path(tempfile.gettempdir()) / "torchx-airflow-test-artifacts"
ARTIFACTS = Path(os.environ.get("TORCHX_AIRFLOW_TEST_ARTIFACTS") or _DEFAULT)
SHOTS = ARTIFACTS / "ui"
