"""Both registrations of the stores: ``torchx.tracker`` entry points (TorchX 0.7) and TorchX main's plugin
registry (``torchx_plugins.tracker``), each found by a real job on local_cwd.

TorchX main is the torchx-nightly wheel the Makefile pins, fetched with pip and put first on the
PYTHONPATH of a driver process, whose local_cwd job inherits it (``torchx_readers.fetch_torchx_main``):
the release stays installed, and the two ``torchx`` packages never meet in one interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.plugins import STORES

from tests.tracker.torchx_readers import REPO, fetch_torchx_main, nightly_version

JOB = str(REPO / "tests" / "jobs" / "registry_job.py")
PARENT = "airflow://registry/run-1/prepare"

# Runs the job on local_cwd with the TorchX first on the path; the job's role env carries the tracker
# config and TORCHX_PLUGINS_SOURCE (the driver itself keeps TorchX's default, both channels).
_DRIVER = """
import json, sys
from torchx.components.utils import python
from torchx.runner import get_runner
from torchx.schedulers.api import Stream
app = python(script=sys.argv[1])
app.roles[0].env.update(json.loads(sys.argv[2]))
with get_runner() as runner:
    handle = runner.run(app, "local_cwd")
    status = runner.wait(handle, wait_interval=0.2)
    log = "".join(runner.log_lines(handle, "python", 0, streams=Stream.COMBINED))
print(json.dumps({"handle": handle, "state": status.state.name, "log": log}))
"""

# What TorchX main's registry finds for trackers, and the errors it records (collisions among them)
_REGISTRY = """
import json
from torchx import plugins
registry = plugins.registry()
found = registry.get(plugins.PluginType.TRACKER)
print(json.dumps({
    "ours": sorted(n for n, f in found.items() if n.startswith("airflow_")),
    "modules": sorted({f.__module__ for n, f in found.items() if n.startswith("airflow_")}),
    "errors": [str(e) for e in registry.load_errors(plugins.PluginType.TRACKER)],
}))
"""


@pytest.fixture(scope="module")
def torchx_main(tmp_path_factory) -> Path:
    """TorchX main's files (the pinned torchx-nightly)."""
    return fetch_torchx_main(tmp_path_factory.mktemp("torchx-main"))


def _python(code: str, args: list[str], torchx_path: Path | None, env: dict[str, str]) -> dict:
    full_env = {**os.environ, **env}
    if torchx_path is not None:
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(torchx_path), full_env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=full_env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run_job(
    tmp_path: Path, torchx_path: Path | None, plugins_source: str | None
) -> tuple[dict, FsspecStore]:
    root = str(tmp_path / "store")
    env = {
        "TORCHX_TRACKERS": "airflow_fsspec",
        "TORCHX_TRACKER_AIRFLOW_FSSPEC_CONFIG": json.dumps({"root": root}),
    }
    if plugins_source is not None:
        env["TORCHX_PLUGINS_SOURCE"] = plugins_source
    ran = _python(_DRIVER, [JOB, json.dumps(env)], torchx_path, {})
    assert ran["state"] == "SUCCEEDED", ran
    return ran, FsspecStore(root)


def test_entry_points_and_plugin_registry_name_the_same_stores():
    """The installed distribution's entry points (what TorchX 0.7 reads) are the registry's table."""
    installed = distribution("torchx-airflow-tracker").entry_points.select(group="torchx.tracker")
    assert {ep.name: ep.value for ep in installed} == STORES


@pytest.mark.integration
def test_torchx_07_job_records_through_entry_points(tmp_path):
    ran, store = _run_job(tmp_path, None, None)
    handle = ran["handle"]
    assert store.metadata(handle)["torchx_version"].startswith("0.7")
    assert [s.source_run_id for s in store.sources(handle)] == [PARENT]
    assert f"tracked {handle} with 1 backends" in ran["log"]


@pytest.mark.integration
def test_torchx_main_job_records_through_the_plugin_registry_alone(tmp_path, torchx_main):
    """TORCHX_PLUGINS_SOURCE=1: TorchX main reads no entry point, only torchx_plugins.* packages."""
    ran, store = _run_job(tmp_path, torchx_main, "1")
    handle = ran["handle"]
    assert store.metadata(handle) == {"torchx_version": nightly_version(), "plugins_source": "1"}
    assert [s.source_run_id for s in store.sources(handle)] == [PARENT]
    assert store.lineage(handle).parent_ids == [PARENT]
    assert f"tracked {handle} with 1 backends" in ran["log"]
    assert "no tracker factory" not in ran["log"]


@pytest.mark.integration
def test_torchx_main_job_with_both_channels_records_without_a_collision(tmp_path, torchx_main):
    """TorchX main's default reads both: every name once (the entry point), no 'registered via both'."""
    ran, store = _run_job(tmp_path, torchx_main, None)
    assert store.metadata(ran["handle"])["torchx_version"] == nightly_version()
    assert "registered via both" not in ran["log"]


@pytest.mark.parametrize("plugins_source", ["1", "3"])
def test_torchx_main_registry_finds_every_store_once(torchx_main, plugins_source):
    found = _python(_REGISTRY, [], torchx_main, {"TORCHX_PLUGINS_SOURCE": plugins_source})
    assert found["ours"] == sorted(STORES)
    assert found["errors"] == []
    # namespace only: every name from our namespace module; both: the entry points load the stores'
    # modules themselves, and the namespace module registers none of the same names
    namespace_module = "torchx_plugins.tracker.torchx_airflow"
    assert (found["modules"] == [namespace_module]) == (plugins_source == "1")
