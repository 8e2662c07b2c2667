"""The provider as Airflow sees it, and what importing it costs a DAG file."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import AIRFLOW
from torchx_airflow.get_provider_info import get_provider_info

HEAVY = ("torchx.schedulers.", "torchx.runner", "mlflow", "s3fs", "docker", "kubernetes", "boto3")


def test_importing_operators_loads_no_scheduler_or_backend_library():
    code = (
        "import json, sys\n"
        "import torchx_airflow.operators.torchx, torchx_airflow.sensors.torchx, torchx_airflow.hooks.torchx\n"
        "import torchx_airflow.hooks.tracker, torchx_airflow.tracking, torchx_airflow.dag_lineage\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    modules = json.loads(out.strip().splitlines()[-1])
    heavy = [m for m in modules if m.startswith(HEAVY) or m in ("torchx.specs", "torchx.components")]
    assert heavy == []


def test_provider_info_lists_every_class_and_they_import():
    import importlib

    info = get_provider_info()
    assert info["package-name"] == "torchx-airflow"
    conns = {c["connection-type"]: c for c in info["connection-types"]}
    assert set(conns) == {"torchx", "torchx_fsspec", "mlflow"}
    assert set(conns["torchx"]["conn-fields"]) == {
        "scheduler",
        "cfg",
        "trackers",
        "outage_timeout",
        "infrastructure_retries",
        "prices",
        "cache",
        "cache_ttl",
    }
    assert set(conns["torchx_fsspec"]["conn-fields"]) == {"root", "storage_options"}
    assert set(conns["mlflow"]["conn-fields"]) == {"experiment"}
    assert conns["mlflow"]["ui-field-behaviour"]["relabeling"]["host"] == "Tracking URI"
    paths = [*(c["hook-class-name"] for c in conns.values()), *info["extra-links"]]
    for path in paths:
        module, _, name = path.rpartition(".")
        assert hasattr(importlib.import_module(module), name), path
    for kind in ("hooks", "operators", "sensors"):
        for module in info[kind][0]["python-modules"]:
            importlib.import_module(module)


def test_airflow_lists_the_provider_and_its_connection_type():
    providers = subprocess.run(
        [AIRFLOW, "providers", "list", "-o", "json"], check=True, capture_output=True, text=True
    ).stdout
    assert "torchx-airflow" in providers
    conns = subprocess.run(
        [AIRFLOW, "providers", "hooks", "-o", "json"], check=True, capture_output=True, text=True
    ).stdout
    for hook in ("torchx.TorchXHook", "tracker.TorchXFsspecHook", "tracker.MlflowTrackerHook"):
        assert f"torchx_airflow.hooks.{hook}" in conns


def test_the_torchx_config_section_holds_the_defaults_a_task_and_connection_override(monkeypatch):
    from airflow.sdk.configuration import conf

    monkeypatch.delenv("AIRFLOW__TORCHX__MIN_POLL_INTERVAL")  # the unit tests' own setting

    section = get_provider_info()["config"]["torchx"]["options"]
    assert set(section) == {
        "outage_timeout",
        "poll_interval",
        "tracker_timeout",
        "max_log_lines",
        "min_poll_interval",
        "infrastructure_retries",
    }
    assert conf.getint("torchx", "infrastructure_retries") == 3
    # the defaults Airflow reads are the operators' own: nothing changes until a site sets them
    assert conf.getfloat("torchx", "outage_timeout") == 600.0
    assert conf.getfloat("torchx", "poll_interval") == 5.0
    assert conf.getfloat("torchx", "tracker_timeout") == 60.0
    assert conf.getint("torchx", "max_log_lines") == 1000
    assert conf.getfloat("torchx", "min_poll_interval") == 1.0
