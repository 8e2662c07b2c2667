"""The app builder's parameter parsing (torchx_airflow/apps.py)."""

from __future__ import annotations

import pytest

from torchx_airflow.apps import mapping_param
from torchx_airflow.exceptions import TorchXConfigError


@pytest.mark.parametrize(
    ("rendered", "expected"),
    [
        ('{"partition": "gpu", "nodes": 2}', {"partition": "gpu", "nodes": 2}),
        ("{'partition': 'gpu', 'exclusive': True}", {"partition": "gpu", "exclusive": True}),
        ({"a": 1}, {"a": 1}),
        (None, {}),
        ("", {}),
    ],
)
def test_a_rendered_mapping_parameter_is_read_as_json_or_a_python_literal(rendered, expected):
    assert mapping_param("t", "cfg", rendered) == expected


@pytest.mark.parametrize("rendered", ["partition=gpu", "[1, 2]", 7])
def test_a_rendered_mapping_parameter_that_is_not_a_mapping_is_named(rendered):
    with pytest.raises(TorchXConfigError) as err:
        mapping_param("train", "cfg", rendered)
    message = str(err.value)
    assert "'train'" in message and "'cfg'" in message and repr(rendered) in message
    assert "params.cfg" in message  # the fix
