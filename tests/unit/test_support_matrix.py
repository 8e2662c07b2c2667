"""The support matrix of docs/versions.md against the installed TorchX: the schedulers it ships are
the table's rows that are not "gone upstream" in its column; a "dry run" row dry-runs through
``TorchXHook``; a "cfg checks only" row names the missing client that stops its dry run."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torchx
from torchx.schedulers import get_scheduler_factories
from torchx.specs import AppDef, Resource, Role

from torchx_airflow.hooks.torchx import TorchXHook

VERSIONS = Path(__file__).resolve().parents[2] / "docs" / "versions.md"
# the module of each client library the matrix names
CLIENT_MODULES = {
    "kubernetes": "kubernetes",
    "google-cloud-runtimeconfig": "google.cloud.runtimeconfig",
    "ray": "ray",
    "sagemaker": "sagemaker",
}
# run options a scheduler requires before it dry-runs
REQUIRED_CFG = {"aws_batch": {"queue": "training"}, "kubernetes": {"queue": "default"}}


def _column() -> str:
    return "TorchX 0.7.0" if torchx.__version__.startswith("0.7") else "TorchX main"


def _matrix() -> dict[str, str]:
    """scheduler -> this TorchX's cell of the per-scheduler table."""
    lines = [line for line in VERSIONS.read_text().splitlines() if line.startswith("| ")]
    header = next(i for i, line in enumerate(lines) if line.startswith("| scheduler |"))
    columns = [c.strip() for c in lines[header].strip("|").split("|")]
    rows = {}
    for line in lines[header + 2 :]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(columns) or not cells[0].startswith("`"):
            break
        rows[cells[0].strip("`")] = cells[columns.index(_column())]
    assert len(rows) >= 4, rows
    return rows


def test_the_matrix_lists_exactly_the_schedulers_this_torchx_ships():
    shipped = {name for name, cell in _matrix().items() if cell != "gone upstream"}
    assert shipped == set(get_scheduler_factories()), (_column(), torchx.__version__)


@pytest.mark.parametrize("scheduler", sorted(_matrix()))
def test_each_scheduler_does_what_the_matrix_says(scheduler):
    cell = _matrix()[scheduler]
    if cell == "gone upstream":
        assert scheduler not in get_scheduler_factories()
        return
    app = AppDef(
        "echo", [Role("echo", image="/tmp", entrypoint="echo", args=["hi"], resource=Resource(1, 0, 256))]
    )
    cfg = dict(REQUIRED_CFG.get(scheduler, {}))
    if scheduler == "kubernetes" and _column() == "TorchX main":
        cfg["validate_spec"] = False  # TorchX main's kubernetes dry run asks the API server by default
    hook = TorchXHook(scheduler=scheduler, cfg=cfg)
    if cell in ("dry run", "real jobs", "real cluster"):
        dryrun = hook.dryrun(app)
        assert dryrun.info.request is not None
        return
    missing = re.fullmatch(r"cfg checks only \(needs `([\w-]+)`\)", cell)
    assert missing, f"unknown cell {cell!r} for {scheduler}"
    module = CLIENT_MODULES[missing.group(1)]
    assert importlib.util.find_spec(module) is None, f"{module} is installed: {scheduler} may dry-run now"
    with pytest.raises(Exception):  # noqa: B017 - ImportError, or ray's NameError from its missing client
        hook.dryrun(app)
