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
        "import torchx_airflow.hooks.tracker, torchx_airflow.tracking, torchx_airflow.lineage.edges\n"
        "import torchx_airflow.operators.promote\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    modules = json.loads(out.strip().splitlines()[-1])
    heavy = [m for m in modules if m.startswith(HEAVY) or m in ("torchx.specs", "torchx.components")]
    assert heavy == []


# What a task needs when it runs, not when the DAG file that defines it is parsed: the hook with the
# connection settings and scheduler layer it brings, the app builder, OpenLineage's helpers.
RUN_TIME_ONLY = (
    "torchx_airflow.hooks.torchx",
    "torchx_airflow.settings.connection",
    "torchx_airflow.schedulers",
    "torchx_airflow.apps",
    "torchx_airflow.lineage.openlineage",
    "torchx_airflow.run.lifecycle",
    "torchx_airflow.tracking",
)


def test_a_dag_file_loads_none_of_the_providers_run_time_modules():
    code = (
        "import json, sys\n"
        "from airflow.sdk import task\n"
        "from torchx_airflow.operators.torchx import TorchXDryRunOperator, TorchXOperator\n"
        "from torchx_airflow.sensors.torchx import TorchXAppSensor\n"
        "import torchx_airflow.decorators.torchx\n"
        "task.torchx\n"
        "TorchXOperator(task_id='t', component='utils.echo', component_args=['--msg', 'hi'])\n"
        "TorchXAppSensor(task_id='s', app_handle='slurm://torchx/1')\n"
        "from torchx_airflow.operators.promote import TorchXPromoteOperator\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    modules = json.loads(out.strip().splitlines()[-1])
    assert [m for m in modules if m.startswith(RUN_TIME_ONLY)] == []


def test_provider_info_lists_every_class_and_they_import():
    import importlib

    info = get_provider_info()
    assert info["package-name"] == "torchx-airflow"
    conns = {c["connection-type"]: c for c in info["connection-types"]}
    assert set(conns) == {"torchx", "torchx_fsspec", "mlflow"}
    # the form has a field for every extra the connection's parser accepts (and no other)
    from dataclasses import fields

    from torchx_airflow.settings.connection import TorchXConnectionSettings

    assert set(conns["torchx"]["conn-fields"]) == {f.name for f in fields(TorchXConnectionSettings)}
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
