"""The README's sample output is what `make demo` prints: scripts/demo.sh runs here for real (in an
Airflow home of its own, prepared by scripts/airflow-home.sh as `make demo` does), and every line the
README shows appears in its output, in order, once app ids, numbers and directories are set aside.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.services import die_with_parent

# three DDP trainings (torchrun, torch imports) on 2 cores: more than the default 300 s
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

HANDLE = re.compile(r"\b(local_cwd://torchx/[a-z_]+)-[a-z0-9]+\b")
# a path (absolute, or relative with a slash) stands for its last part: the test's directories differ
PATH = re.compile(r"(?<![\w:/])(?:/|\.[\w-]*/)(?:[\w.+-]+/)*([\w.+-]+)")
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def normalized(line: str) -> str:
    line = HANDLE.sub(r"\1-ID", line.rstrip())
    line = re.sub(r"\bhost \S+", "host HOST", line)  # the machine's name, in the train ranks' lines
    line = PATH.sub(lambda m: m.group(0) if "://" in m.group(0) else f"PATH/{m.group(1)}", line)
    return NUMBER.sub("N", line)


def readme_sample() -> list[str]:
    """The lines of the README's sample output, without its `...` (lines left out)."""
    text = (REPO / "README.md").read_text()
    section = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"\n```\n(Submitted TorchX app.*?)```", section, re.S)
    assert block, "README.md: no sample output under '## The two commands'"
    return [line for line in block.group(1).splitlines() if line.strip() not in ("", "...")]


def test_the_readme_sample_output_is_what_the_demo_prints(tmp_path: Path):
    home, out = tmp_path / "home", tmp_path / "out"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        # the demo's own params, shorter: the lines are the same, their numbers differ
        "DEMO_CONF": json.dumps({"epochs": 2, "rows": 40, "output_dir": str(out)}),
    }
    for name in ("AIRFLOW_CONN_TORCHX_DEFAULT", "MLFLOW_TRACKING_URI", "DEMO_DAG"):
        env.pop(name, None)  # the demo's connections are the ones airflow-home.sh writes
    proc = subprocess.run(
        ["bash", "-c", "bash scripts/airflow-home.sh && bash scripts/demo.sh"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=die_with_parent,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    printed = [normalized(line) for line in proc.stdout.splitlines()]
    shown = readme_sample()
    assert len(shown) > 20
    assert sum("[model]" in line for line in shown) >= 3, "the sample shows the edges' artifact names"
    position = 0
    for line in shown:
        wanted = normalized(line)
        try:
            position = printed.index(wanted, position) + 1
        except ValueError:
            pytest.fail(f"README.md shows a line the demo does not print (in this order):\n{line}\n{wanted}")
