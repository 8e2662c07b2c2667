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


def test_the_provider_imports_no_private_airflow_module():
    """Private Airflow modules (airflow.sdk._shared...) move between releases: only public paths."""
    private = []
    for path in PROVIDER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            private += [
                f"{path.relative_to(PROVIDER)}: {name}"
                for name in names
                if name.startswith("airflow") and any(part.startswith("_") for part in name.split("."))
            ]
    assert private == []
