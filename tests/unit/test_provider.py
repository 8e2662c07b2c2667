"""The provider as Airflow sees it, and what importing it costs a DAG file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import AIRFLOW
from torchx_airflow.get_provider_info import get_provider_info

HEAVY = ("torchx.schedulers.", "torchx.runner", "mlflow", "s3fs", "docker", "kubernetes", "boto3")


def test_importing_operators_loads_no_scheduler_or_backend_library():
    code = (
        "import json, sys\n"
        "import torchx_airflow.operators.torchx, torchx_airflow.sensors.torchx, torchx_airflow.hooks.torchx\n"
        "import torchx_airflow.hooks.tracker, torchx_airflow.tracking, torchx_airflow.lineage.edges\n"
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


def test_the_torchx_config_section_and_the_docs_are_rendered_from_the_options_table(monkeypatch):
    """One table: Airflow's [torchx] section, the defaults it reads, the resolver and the docs."""
    from airflow.sdk.configuration import conf

    from torchx_airflow.settings.options import OPTIONS, options_markdown, site_value

    monkeypatch.delenv("AIRFLOW__TORCHX__MIN_POLL_INTERVAL")  # the unit tests' own setting
    section = get_provider_info()["config"]["torchx"]["options"]
    assert list(section) == [option.name for option in OPTIONS]
    for option in OPTIONS:
        assert section[option.name]["type"] == option.type
        # the default Airflow reads is the table's, and so is what the resolver falls back to
        if option.type == "string":
            assert conf.get("torchx", option.name) == option.default == site_value(option.name)
            continue
        assert (
            float(conf.get("torchx", option.name)) == float(option.default) == float(site_value(option.name))
        )
    page = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    assert options_markdown() in page, (
        "docs/configuration.md: paste `python -m torchx_airflow.settings.options`"
    )


def test_a_bad_site_option_is_refused_naming_it(monkeypatch):
    from torchx_airflow.exceptions import TorchXConfigError
    from torchx_airflow.settings.resolve import resolve

    monkeypatch.setenv("AIRFLOW__TORCHX__TRACKER_TIMEOUT", "soon")
    with pytest.raises(
        TorchXConfigError, match=r"\[torchx\] tracker_timeout: tracker_timeout must be a positive"
    ):
        resolve("tracker_timeout")
    assert resolve("tracker_timeout", 5.0) == 5.0  # a task's own value never reads the site's
