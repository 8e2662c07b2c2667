"""The DAGs the documentation shows run: the README's "DAG to copy" as it stands, every example DAG.

The README's block is taken from README.md at test time, so an edit that breaks it fails here; the
docs site includes the example DAGs from dags/ (pymdownx.snippets), so they are covered by running
or importing those files.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.integration


def readme_dag() -> str:
    """The Python block under the README's "## A DAG to copy" heading."""
    text = (REPO / "README.md").read_text()
    section = text.split("## A DAG to copy", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README.md has no Python block under '## A DAG to copy'"
    return match.group(1)


def test_the_readme_dag_to_copy_runs_as_written(run_dag, tmp_path: Path):
    dags = tmp_path / "dags"
    (dags / "jobs").mkdir(parents=True)
    (dags / "my_training.py").write_text(readme_dag())
    shutil.copy(REPO / "dags" / "jobs" / "hello.py", dags / "jobs" / "hello.py")
    result = run_dag("my_training", conf={"name": "Docs"}, dags_folder=dags)
    assert result.returncode == 0, result.output[-4000:]
    assert result.states == {"plan": "success", "train": "success"}
    assert "hello, Docs!" in result.output  # the job's line, templated from the conf, in the task log


def test_every_example_dag_imports_without_errors_and_cheaply(tmp_path: Path):
    """Every DAG file in dags/ parses in a DagBag with no import error (what the scheduler does)."""
    script = (
        "import json, sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(REPO / 'dags')!r})\n"
        "print(json.dumps({'errors': {k: str(v) for k, v in bag.import_errors.items()},"
        " 'dags': sorted(bag.dag_ids)}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["errors"] == {}
    # one DAG per file, named after it: a new example DAG that fails to import cannot hide here
    assert report["dags"] == sorted(p.stem for p in (REPO / "dags").glob("*.py"))
