"""One schema per connection type: the form Airflow shows and the check every extra passes."""

from __future__ import annotations

import pytest

from torchx_airflow.exceptions import TorchXConnectionError
from torchx_airflow.get_provider_info import get_provider_info
from torchx_airflow.settings.conn_fields import CONN_FIELDS, validate_extra

# A value of each JSON type, to find one a field's schema refuses
_BY_TYPE = {"object": {"k": 1}, "array": ["x"], "number": 2.5, "boolean": True, "string": "text"}


def _fields() -> list[tuple[str, str, dict]]:
    return [(ct, key, field) for ct, fields in CONN_FIELDS.items() for key, field in fields.items()]


def _accepted(schema: dict) -> object:
    if "enum" in schema:
        return schema["enum"][0]
    kinds = [k for k in schema["type"] if k != "null"]
    return {"integer": 3, "number": 1.5}.get(kinds[0], _BY_TYPE.get(kinds[0]))


def _refused(schema: dict) -> object:
    kinds = set(schema["type"]) | ({"number"} if "integer" in schema["type"] else set())
    kind = next(k for k in _BY_TYPE if k not in kinds and not (k == "string" and kinds & {"array"}))
    return _BY_TYPE[kind]


def test_the_form_shows_the_schemas_the_extras_are_checked_against():
    conns = {c["connection-type"]: c for c in get_provider_info()["connection-types"]}
    assert {ct: conns[ct]["conn-fields"] for ct in CONN_FIELDS} == CONN_FIELDS
    assert set(conns) == set(CONN_FIELDS)


@pytest.mark.parametrize(
    ("conn_type", "key", "field"), _fields(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_form_field_is_checked_by_its_own_schema(conn_type, key, field):
    """A value the field's form schema takes passes; one it refuses is an error naming the field."""
    good = _accepted(field["schema"])
    assert validate_extra("c", conn_type, {key: good}) == {key: good}
    bad = _refused(field["schema"])
    with pytest.raises(TorchXConnectionError, match=f"extra '{key}': ") as err:
        validate_extra("c", conn_type, {key: bad})
    assert field["description"] in str(err.value)  # the fix: what the form says the field holds
    # the schema itself decides: a field whose schema takes anything takes the refused value
    loosened = {**CONN_FIELDS[conn_type], key: {**field, "schema": {}}}
    mp = pytest.MonkeyPatch()
    with mp.context() as m:
        m.setitem(CONN_FIELDS, conn_type, loosened)
        assert validate_extra("c", conn_type, {key: bad}) == {key: bad}


def test_one_error_names_every_bad_field_and_its_fix():
    extra = {
        "outage_timeout": -5,
        "cache_scope": "everywhere",
        "cfg": "{oops",
        "schedular": "slurm",
        "cache": True,
    }
    with pytest.raises(TorchXConnectionError) as err:
        validate_extra("gpu_cluster", "torchx", extra)
    message = str(err.value)
    assert message.startswith("Connection 'gpu_cluster' has 4 bad extra field(s)")
    lines = [line for line in message.splitlines() if line.startswith("- ")]
    assert [line.split()[2] for line in lines] == [
        "'outage_timeout':",
        "'cache_scope':",
        "'cfg'",
        "'schedular'",
    ]
    assert "-5 is less than or equal to the minimum of 0" in lines[0]
    assert "'everywhere' is not one of ['dag', 'deployment', None]" in lines[1]
    assert "did you mean 'scheduler'?" in lines[3]


def test_what_the_form_and_variables_store_is_read_as_the_schema_type():
    """Each passes its schema once read as the form or a variable stores it; the parsers get it as stored."""
    extra = {
        "extra__torchx__cfg": '{"partition": "gpu"}',
        "trackers": "fs, ml",
        "cache": "true",
        "infrastructure_retries": "2",
        "outage_timeout": "90.5",
        "checkpoint_root": "",
    }
    values = validate_extra("c", "torchx", extra)
    assert values == {
        **{k.removeprefix("extra__torchx__"): v for k, v in extra.items()},
        "checkpoint_root": None,
    }
    for key, bad in (("cfg", '["a"]'), ("trackers", "[1]"), ("cache", "yes"), ("outage_timeout", "-1")):
        with pytest.raises(TorchXConnectionError, match=f"extra '{key}'"):
            validate_extra("c", "torchx", {key: bad})


def test_a_credential_field_is_named_but_its_value_never_shown():
    secret = "s3cr3t-key-0123456789"
    for value in (secret, f'{{"key": "{secret}"'):
        with pytest.raises(TorchXConnectionError, match="extra 'storage_options'") as err:
            validate_extra("store", "torchx_fsspec", {"root": "/r", "storage_options": value})
        assert secret not in str(err.value)


def test_every_numeric_field_stored_as_text_reaches_its_setting_as_a_number():
    """The form stores numbers as text: each numeric field of the torchx connection, given as text,
    comes out of the connection's settings as the number (no field is left as the string it was)."""
    from torchx_airflow.settings.connection import TorchXConnectionSettings

    numeric = {
        key: field
        for key, field in CONN_FIELDS["torchx"].items()
        if {"number", "integer"} & set(field["schema"]["type"])
    }
    assert {"cost_approval_timeout", "outage_timeout", "cache_ttl"} <= set(numeric)
    settings = TorchXConnectionSettings.from_extra("c", {key: "3600" for key in numeric})
    for key in numeric:
        value = getattr(settings, key)
        assert isinstance(value, int | float) and value == 3600, (key, value)
