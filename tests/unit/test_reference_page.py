"""docs/reference.md is what the code's own tables say: options, connection fields, operator
parameters and environment variables (rendered by scripts/reference_page.py)."""

from __future__ import annotations

import importlib.util
import re

from tests.conftest import REPO

FIX = "docs/reference.md is stale: run `python scripts/reference_page.py > docs/reference.md`"


def reference_page():
    spec = importlib.util.spec_from_file_location("reference_page", REPO / "scripts" / "reference_page.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_page_is_the_one_the_code_renders():
    assert (REPO / "docs" / "reference.md").read_text() == reference_page().reference_markdown(), FIX


def test_the_page_names_every_option_connection_field_and_operator_parameter():
    from torchx_airflow.get_provider_info import get_provider_info
    from torchx_airflow.settings.options import OPTIONS

    page = (REPO / "docs" / "reference.md").read_text()
    for option in OPTIONS:
        assert f"| `{option.name}` |" in page
    for connection in get_provider_info()["connection-types"]:
        assert f"### `{connection['connection-type']}`" in page
        for field in connection["conn-fields"]:
            assert f"| `extra.{field}` |" in page
    module = reference_page()
    for path in module.OPERATORS:
        name = path.rpartition(".")[2]
        cls = getattr(__import__(path.rpartition(".")[0], fromlist=[name]), name)
        for param, _default, text in module.operator_parameters(cls):
            # a parameter added without a `:param:` line would show an empty description
            assert text.strip(), f"{name}.{param} has no ':param {param}:' in its docstring"
            assert f"| `{param}` |" in page


def test_every_environment_variable_the_code_spells_is_on_the_page():
    """A variable name written in the provider's or the tracker's code (a string literal) is listed."""
    page = (REPO / "docs" / "reference.md").read_text()
    listed = {name for row in reference_page().ENVIRONMENT for name in row[0].split(", ")}
    # a template (TORCHX_TRACKER_<NAME>_CONFIG) covers the prefixes the code builds names from
    prefixes = [name.split("<", 1)[0] for name in listed if "<" in name]
    spelled = set()
    for source in [*(REPO / "torchx_airflow").rglob("*.py"), *(REPO / "tracker").rglob("*.py")]:
        spelled |= set(
            re.findall(r"[\"']((?:TORCHX|MLFLOW|OPENLINEAGE)_[A-Z0-9_]*)[\"']", source.read_text())
        )
    assert spelled, "the scan found no variable names: the pattern no longer matches the code"
    missing = {
        name for name in spelled if name not in listed and not any(p.startswith(name) for p in prefixes)
    }
    assert not missing, f"environment variables the reference page does not list: {sorted(missing)}"
    assert "| `TORCHX_AIRFLOW_RESUME_FROM` |" in page
