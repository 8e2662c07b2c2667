"""Secret masking through the Task SDK's public API only."""

from __future__ import annotations

import ast
from pathlib import Path

from torchx_airflow.secrets import mask_sensitive_env, redact_text, should_hide_value_for_key

PROVIDER = Path(__file__).resolve().parents[2] / "torchx_airflow"


def test_sensitive_names_follow_airflows_list():
    assert should_hide_value_for_key("MLFLOW_TRACKING_PASSWORD")
    assert should_hide_value_for_key("api_key")
    assert should_hide_value_for_key("token")
    assert not should_hide_value_for_key("LEARNING_RATE")
    assert not should_hide_value_for_key("endpoint_url")


def test_only_sensitive_env_values_are_masked():
    mask_sensitive_env({"SERVICE_API_KEY": "key-value-81234", "DATA_DIR": "/data/plain-dir-81234"})
    assert redact_text("a key-value-81234 b /data/plain-dir-81234") == "a *** b /data/plain-dir-81234"


# Airflow modules a provider's code must not import: they are Airflow's internals, not its public
# interface, and change between releases. airflow.sdk.execution_time is the task runner and its
# supervisor; airflow.models, airflow.utils, airflow.settings and airflow.configuration are the core's
# metadata-DB models and helpers, which a task (Task SDK) never reaches; airflow.api_fastapi is the API
# server's code.
INTERNAL_AIRFLOW = (
    "airflow.sdk.execution_time",
    "airflow.models",
    "airflow.utils",
    "airflow.settings",
    "airflow.configuration",
    "airflow.api_fastapi",
)
# (file under torchx_airflow/, module prefix) -> why that file may import it; nothing else may.
ALLOWED_INTERNAL = {
    # The lineage view is an API-server plugin: it reads runs, task instances, XComs and rendered
    # fields of the metadata DB with the API server's own session and models, as Airflow's UI does.
    ("plugins/airflow_runs.py", "airflow.models"): "lineage view: reads the metadata DB in the API server",
    # The plugin's FastAPI app: the API server's session dependency and its DAG access checks.
    ("plugins/app.py", "airflow.api_fastapi"): "lineage view: FastAPI app served by the API server",
    # The view checks a run of another DAG against that DAG's team (DagModel), as Airflow's own
    # endpoints do before answering for a DAG.
    ("plugins/app.py", "airflow.models"): "lineage view: the team of another DAG, in the API server",
    # The comparison view (the same plugin) reads a task's instances across DAG runs, their rendered
    # fields and XComs, and serves its pages with the lineage view's session dependency.
    ("plugins/compare.py", "airflow.models"): "comparison view: reads the metadata DB in the API server",
    ("plugins/compare_routes.py", "airflow.api_fastapi"): "comparison view: routes of the plugin's app",
    # Its sweep layout reads a DAG run's sweep (the plans', segments' and promotion's task instances,
    # XComs and rendered fields) the same way.
    ("plugins/sweep_view.py", "airflow.models"): "comparison view of a sweep: reads the metadata DB",
    # Manual promotion (the same plugin) finds the DAG's promote task in its serialized DAG, the run's
    # result in XCom and the asset's latest event, checks that the caller may edit the DAG, and
    # registers the event through the machinery of Airflow's POST /api/v2/assets/events.
    ("plugins/promotion.py", "airflow.models"): "manual promotion: reads the metadata DB in the API server",
    ("plugins/promotion.py", "airflow.api_fastapi"): "manual promotion: a route of the plugin's app",
    # Operator links run in the API server and read the URL their task pushed to XCom. The Task SDK
    # exports no XCom reader for them; apache-airflow-providers-common-compat's ``sdk.XCom`` is this
    # same class on Airflow 3.
    ("links/torchx.py", "airflow.sdk.execution_time.xcom"): "extra links read XCom in the API server",
    # on_kill asks the API server for its task instance's state, as the standard provider's
    # WorkflowTrigger and ExternalTaskSensor do: RuntimeTaskInstance.get_task_states in the worker,
    # the supervisor channel's GetTaskStates in the triggerer. The SDK exports neither.
    ("run/kills.py", "airflow.sdk.execution_time"): "on_kill reads its task instance's state",
    # The cost approval writes its human-in-the-loop request as the standard provider's HITLOperator
    # does (upsert_hitl_detail, through the supervisor); the SDK exports no other way to ask.
    ("policies/cost/approval.py", "airflow.sdk.execution_time.hitl"): "cost approval asks an approver",
}


def _airflow_imports(path: Path) -> list[str]:
    """Every ``airflow...`` module ``path`` imports, at any depth (imports inside functions included)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module or "")
        elif isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
    return [name for name in names if name == "airflow" or name.startswith("airflow.")]


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_the_provider_imports_no_private_or_internal_airflow_module():
    """Private Airflow modules (airflow.sdk._shared...) and Airflow's internals move between
    releases: only public paths, apart from the API-server code listed in ALLOWED_INTERNAL."""
    found = []
    for path in sorted(PROVIDER.rglob("*.py")):
        where = path.relative_to(PROVIDER).as_posix()
        for name in _airflow_imports(path):
            if any(part.startswith("_") for part in name.split(".")):
                found.append(f"{where}: {name} (private)")
            elif any(_within(name, prefix) for prefix in INTERNAL_AIRFLOW) and not any(
                file == where and _within(name, prefix) for file, prefix in ALLOWED_INTERNAL
            ):
                found.append(f"{where}: {name} (Airflow internals)")
    assert found == []


def test_every_allowed_internal_import_is_still_made():
    """An exception nobody needs any more is removed from the list, so the list stays the truth."""
    unused = [
        (file, prefix)
        for file, prefix in ALLOWED_INTERNAL
        if not any(_within(name, prefix) for name in _airflow_imports(PROVIDER / file))
    ]
    assert unused == []
