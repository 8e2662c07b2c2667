"""OpenLineage naming, facets and parse-time cost; artifact assets must be outlets. The asset events
and the other checks of the mapping are in tests/unit/lineage/test_assets.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from airflow.sdk import Asset

from tests.conftest import REPO
from torchx_airflow.exceptions import TorchXInputError
from torchx_airflow.lineage.openlineage import (
    artifact_dataset_name,
    consumed_artifacts,
    lineage_datasets,
    parent_run_env,
    run_dataset_name,
)
from torchx_airflow.operators.torchx import TorchXOperator

MODEL = Asset("s3://ml/models/resnet")


def _modules_after(code: str) -> list[str]:
    code = f"import json, runpy, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _openlineage(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(("openlineage", "airflow.providers.openlineage"))]


def test_importing_operators_and_parsing_the_example_dags_loads_no_openlineage_module():
    modules = _modules_after(
        # the helpers are imported where a task runs (tests/unit/test_provider.py): still light
        "import torchx_airflow.operators.torchx, torchx_airflow.lineage.assets\n"
        "import torchx_airflow.lineage.openlineage\n"
        f"runpy.run_path({str(REPO / 'dags' / 'torchx_pipeline.py')!r})\n"
        f"runpy.run_path({str(REPO / 'dags' / 'torchx_model_evaluation.py')!r})"
    )
    # `import airflow.sdk` itself has Airflow read every installed provider's metadata module
    # (airflow.providers.openlineage.get_provider_info): nothing beyond that may load
    assert _openlineage(modules) == _openlineage(_modules_after("import airflow.sdk"))
    assert not [m for m in modules if m.startswith("openlineage")]  # the client library: never


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("s3://bucket/key", ("s3://bucket", "key")),
        ("s3://ml/models/resnet/model.pt", ("s3://ml", "models/resnet/model.pt")),
        ("gs://bucket/a/b.parquet", ("gs://bucket", "a/b.parquet")),
        ("/data/run/model.json", ("file", "/data/run/model.json")),
        ("file:///data/run/model.json", ("file", "/data/run/model.json")),
        ("file://nas01/data/model.json", ("file://nas01", "/data/model.json")),
        ("hdfs://namenode:8020/warehouse/t", ("hdfs://namenode:8020", "warehouse/t")),
        ("model.json", ("file", "model.json")),
    ],
)
def test_artifact_datasets_follow_the_openlineage_naming_spec(path, expected):
    assert artifact_dataset_name(path) == expected


def test_a_torchx_run_is_a_dataset_under_its_scheduler():
    assert run_dataset_name("slurm://torchx/1234") == ("torchx://slurm", "torchx/1234")
    assert run_dataset_name("local_cwd://torchx/train-abc") == ("torchx://local_cwd", "torchx/train-abc")
    # a tracked @task is a tracker run but not a TorchX app: no dataset
    assert run_dataset_name("airflow://dag/run/feat") is None


def test_datasets_of_a_run_with_parents_and_artifacts():
    inputs, outputs = lineage_datasets(
        "slurm://torchx/9",
        ["slurm://torchx/7", "airflow://dag/run/feat", "slurm://torchx/7"],
        consumed=["s3://ml/data.csv"],
        produced=["/out/model.pt", "s3://ml/data.csv"],
    )
    assert [(d.namespace, d.name) for d in inputs] == [
        ("torchx://slurm", "torchx/7"),
        ("s3://ml", "data.csv"),
    ]
    assert [(d.namespace, d.name) for d in outputs] == [
        ("torchx://slurm", "torchx/9"),
        ("file", "/out/model.pt"),
    ]


def test_artifact_datasets_say_which_artifact_of_which_run_they_are():
    inputs, outputs = lineage_datasets(
        "slurm://torchx/9",
        ["slurm://torchx/7"],
        consumed=["/out/data.csv"],
        produced=["/out/model.pt"],
        artifacts={
            "/out/data.csv": ("data", "slurm://torchx/7"),
            "/out/model.pt": ("model", "slurm://torchx/9"),
        },
    )
    data = next(d for d in inputs if d.name == "/out/data.csv")
    model = next(d for d in outputs if d.name == "/out/model.pt")
    assert (data.facets["torchx_artifact"].artifactName, data.facets["torchx_artifact"].run) == (
        "data",
        "slurm://torchx/7",
    )
    assert model.facets["torchx_artifact"].artifactName == "model"
    assert not inputs[0].facets  # the parent run's dataset is no artifact


def _op(**kwargs) -> TorchXOperator:
    return TorchXOperator(
        task_id="train",
        component="utils.python",
        component_args=["--script", "train.py", "--", "--data", "/d/a.csv,/d/b.csv"],
        **kwargs,
    )


def test_artifacts_named_in_the_arguments_are_consumed():
    op = _op()
    app = op.build_app()
    parents = {
        "p/a": {"path": "/d/a.csv"},
        "p/b": {"path": "/d/b.csv"},
        "p/c": {"path": "/d/c.csv"},
        "p/none": {"path": ""},
    }
    assert consumed_artifacts(parents, app) == ["/d/a.csv", "/d/b.csv"]


def test_start_describes_the_app_without_values_of_its_env():
    op = _op(scheduler="slurm", env={"API_TOKEN": "tok-value-123"})
    lineage = op.get_openlineage_facets_on_start()
    facet = lineage.job_facets["torchx_app"]
    assert facet.scheduler == "slurm" and facet.appName == "train"  # the name it will be submitted with
    (role,) = facet.roles
    assert role["entrypoint"] == "python" and role["num_replicas"] == 1 and "args" not in role
    assert role["env_names"] == ["API_TOKEN"]
    assert "tok-value-123" not in json.dumps(role)
    assert lineage.inputs == [] and lineage.outputs == [] and lineage.run_facets == {}


def test_no_parent_run_env_outside_a_running_task():
    assert parent_run_env() == {}


_PARENT_ENV_IN_A_TASK = (
    "from torchx_airflow.lineage.openlineage import is_enabled, parent_run_env\n"
    "print(json.dumps([is_enabled(), parent_run_env({'ti': object()})]))"
)


def test_without_the_provider_nothing_changes():
    code = (
        "import json, sys\n"
        "import airflow.sdk\n"  # Airflow's provider discovery first, then the provider is gone
        "for name in [m for m in sys.modules if m.startswith('airflow.providers.openlineage')]:\n"
        "    del sys.modules[name]\n"
        "sys.modules['airflow.providers.openlineage'] = None\n" + _PARENT_ENV_IN_A_TASK
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [False, {}]


def test_a_disabled_provider_gives_the_job_no_parent_run():
    env = {**os.environ, "AIRFLOW__OPENLINEAGE__DISABLED": "true"}
    code = "import json\n" + _PARENT_ENV_IN_A_TASK
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [False, {}]


def test_artifact_assets_must_be_outlets():
    with pytest.raises(
        TorchXInputError, match=r"'model'.*not in the task's outlets.*outlets=\[\.\.\., Asset"
    ):
        _op(artifact_assets={"model": MODEL})
    op = _op(outlets=[MODEL], artifact_assets={"model": MODEL})
    assert op.artifact_assets == {"model": MODEL}
