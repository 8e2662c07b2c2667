"""A hostile store writer against the cache, through the real operator (scheduler: the named fake of
tests/fakes.py; tracker: a real fsspec store in a temporary directory, written as a job with the
store's credentials could write it): a forged, unsigned, foreign-keyed, malformed or copied record
is a miss and the task runs; an untouched record still hits; bad cache settings are refused with
their fix before anything is submitted."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from torchx.specs import AppState
from torchx_airflow_tracker.fsspec_store import FsspecStore

from tests.fakes import HANDLE, TaskStateStore
from tests.unit.policies.cache.test_cache_policy import CacheTI, CachingHook, _context, _task
from torchx_airflow.exceptions import TorchXConfigError, TorchXConnectionError
from torchx_airflow.lineage.keys import XCOM_UI_URL
from torchx_airflow.policies.cache.policy import hit_result, is_web_url
from torchx_airflow.policies.cache.signing import SIGNATURE_FIELD, CacheKeys, parse_keys
from torchx_airflow.settings.connection import TorchXConnectionSettings

#: the unit tests' deployment key (tests/conftest.py) and another deployment's
OURS = "test-deployment-cache-key-0123456789abcdef"
THEIRS = "another-deployment-cache-key-fedcba9876543210"
FORGED_PATH = "s3://attacker-bucket/backdoored.pt"


@pytest.fixture
def store(tmp_path) -> FsspecStore:
    return FsspecStore(str(tmp_path / "tracker"))


class OtherDagTI(CacheTI):
    dag_id = "other_team"


def _run(store: FsspecStore, ti: Any = None, stores: list[FsspecStore] | None = None, **kwargs: Any):
    """One execution of the cached task; returns (result, submissions, the task instance)."""
    hook = CachingHook([AppState.SUCCEEDED])
    op = _task(hook, store, **kwargs)
    if stores is not None:
        op.__dict__["trackers"].stores = stores
    context = _context(op, TaskStateStore())
    if ti is not None:
        context["ti"] = ti
    result = op.execute(context)
    return result, len(getattr(hook, "tokens", [])), context["ti"]


def _record_file(store: FsspecStore, key: str) -> Path:
    return Path(store.root) / f".c.{key}"


def _read(store: FsspecStore, key: str) -> dict[str, Any]:
    return json.loads(_record_file(store, key).read_text())


def _write(store: FsspecStore, key: str, record: Any) -> None:
    Path(store.root).mkdir(parents=True, exist_ok=True)
    text = record if isinstance(record, str) else json.dumps(record, sort_keys=True)
    _record_file(store, key).write_bytes(text.encode("utf-8", "surrogateescape"))  # any bytes a job writes


def _resign(record: dict[str, Any], key: str) -> dict[str, Any]:
    fields = {k: v for k, v in record.items() if k != SIGNATURE_FIELD}
    return {**fields, SIGNATURE_FIELD: CacheKeys((key.encode(),)).sign(fields)}


def _warnings(text: str) -> list[str]:
    """The task log's warnings about cache records (the task logger writes to stdout here)."""
    return [line for line in text.splitlines() if "[warning" in line and "Cache record" in line]


def test_an_untouched_record_still_hits(store):
    first, submitted, _ = _run(store)
    assert submitted == 1 and first["cache_hit"] is False
    again, submitted, _ = _run(store)
    assert submitted == 0 and again["cache_hit"] is True and again["cached_from"] == HANDLE


def test_a_hit_records_the_app_it_stands_for_so_its_output_roots_are_known_downstream(store):
    """A promotion or a sweep downstream checks a cached result's artifacts against its task's output
    roots (XCom ``torchx_app``): a hit records them, marked ``short_cut``."""
    from torchx_airflow.lineage.keys import XCOM_SUBMITTED_APP

    _, _, ti = _run(store)
    submitted = ti.pushed[XCOM_SUBMITTED_APP]
    assert "short_cut" not in submitted
    again, _, hit_ti = _run(store)
    assert again["cache_hit"] is True
    recorded = hit_ti.pushed[XCOM_SUBMITTED_APP]
    assert recorded["short_cut"] is True
    assert recorded["output_roots"] == submitted["output_roots"] and recorded["roles"] == submitted["roles"]


def test_a_forged_result_is_a_miss_with_one_warning_and_the_task_runs(store, capsys):
    first, _, _ = _run(store)
    key = first["cache_key"]
    record = _read(store, key)
    record["result"]["artifacts"] = {"model": {"name": "model", "path": FORGED_PATH, "metadata": {}}}
    _write(store, key, record)  # the signature is the launcher's, the result the attacker's
    capsys.readouterr()
    result, submitted, _ = _run(store)
    assert submitted == 1 and result["cache_hit"] is False
    assert FORGED_PATH not in json.dumps(result)
    warned = _warnings(capsys.readouterr().out)
    assert len(warned) == 1 and "signature does not verify" in warned[0]


def test_an_unsigned_record_is_a_miss(store, capsys):
    first, _, _ = _run(store)
    key = first["cache_key"]
    record = _read(store, key)
    del record[SIGNATURE_FIELD]
    _write(store, key, record)
    capsys.readouterr()
    result, submitted, _ = _run(store)
    assert submitted == 1 and result["cache_hit"] is False
    assert ["unsigned" in w for w in _warnings(capsys.readouterr().out)] == [True]


def test_a_record_signed_with_another_deployments_key_is_a_miss(store, monkeypatch, capsys):
    monkeypatch.setenv("AIRFLOW_VAR_TORCHX_CACHE_KEY", THEIRS)
    theirs, _, _ = _run(store)  # the other deployment records its run in the shared store
    monkeypatch.setenv("AIRFLOW_VAR_TORCHX_CACHE_KEY", OURS)
    capsys.readouterr()
    result, submitted, _ = _run(store)
    assert result["cache_key"] == theirs["cache_key"]  # no secret in the app: the same key ...
    assert submitted == 1 and result["cache_hit"] is False  # ... but not the same signer
    assert len(_warnings(capsys.readouterr().out)) == 1


def test_rotation_the_old_key_verifies_the_new_one_signs(store, monkeypatch):
    _run(store)  # signed with OURS
    monkeypatch.setenv("AIRFLOW_VAR_TORCHX_CACHE_KEY", json.dumps([THEIRS, OURS]))
    hit, submitted, _ = _run(store)
    assert submitted == 0 and hit["cache_hit"] is True
    monkeypatch.setenv("AIRFLOW_VAR_TORCHX_CACHE_KEY", json.dumps([THEIRS]))  # OURS retired
    _, submitted, _ = _run(store)
    assert submitted == 1


def test_a_record_copied_from_another_dag_is_a_miss(store, capsys):
    ours, _, _ = _run(store)
    theirs, submitted, _ = _run(store, OtherDagTI())
    assert submitted == 1 and theirs["cache_key"] != ours["cache_key"]  # a hit never crosses DAGs
    _write(store, ours["cache_key"], _read(store, theirs["cache_key"]))  # signed, but not ours
    capsys.readouterr()
    result, submitted, _ = _run(store)
    assert submitted == 1 and result["cache_hit"] is False
    warned = _warnings(capsys.readouterr().out)
    assert len(warned) == 1 and "another key" in warned[0]


def test_a_deployment_scope_shares_hits_across_dags(store):
    _run(store, cache_scope="deployment")
    result, submitted, _ = _run(store, OtherDagTI(), cache_scope="deployment")
    assert submitted == 0 and result["cache_hit"] is True


def test_secret_digests_differ_between_deployment_keys(store, monkeypatch, capsys):
    secret = "Summer2024"
    capsys.readouterr()
    keys = []
    for deployment_key in (OURS, THEIRS):
        monkeypatch.setenv("AIRFLOW_VAR_TORCHX_CACHE_KEY", deployment_key)
        result, submitted, _ = _run(store, env={"DB_PASSWORD": secret})
        keys.append(result["cache_key"])
        assert submitted == 1
    assert keys[0] != keys[1]
    logged = capsys.readouterr().out
    assert secret not in logged and "secret_hmac" in logged and "secret_pbkdf2" not in logged


def test_a_javascript_ui_url_never_becomes_a_link(store):
    first, _, _ = _run(store)
    key = first["cache_key"]
    record = _read(store, key)
    record["result"]["ui_url"] = "javascript:alert(document.domain)"
    _write(store, key, _resign(record, OURS))  # even one the launcher signed
    result, submitted, ti = _run(store)
    assert submitted == 0 and result["cache_hit"] is True
    assert "ui_url" not in result and XCOM_UI_URL not in ti.pushed
    assert not is_web_url("javascript:alert(1)") and not is_web_url("https:") and is_web_url("https://x.y/a")


def test_the_readers_ttl_applies_when_shorter_than_the_records(store):
    first, _, _ = _run(store)
    key = first["cache_key"]
    record = _read(store, key)
    record["created"] -= 100  # recorded 100 s ago, expires in 30 days
    _write(store, key, _resign(record, OURS))
    _, submitted, _ = _run(store, cache_ttl=50)
    assert submitted == 1
    _, submitted, _ = _run(store, cache_ttl=500)
    assert submitted == 0


@pytest.mark.parametrize(
    ("text", "warned"),
    [
        ("{not json", None),
        ("[1, 2]", None),
        (json.dumps({"expires": "never"}), "unsigned"),
        ("\udcff", None),  # skipped by the store's reader, as any file that is not UTF-8 text
    ],
)
def test_a_malformed_record_is_skipped_and_the_next_store_answers(tmp_path, text, warned, capsys):
    bad, good = FsspecStore(str(tmp_path / "bad")), FsspecStore(str(tmp_path / "good"))
    first, _, _ = _run(good)
    _write(bad, first["cache_key"], text)
    capsys.readouterr()
    result, submitted, _ = _run(bad, stores=[bad, good])
    assert submitted == 0 and result["cache_hit"] is True
    # what is no JSON object reads as no record in the store (nothing to trust); a record is warned of once
    out = capsys.readouterr().out
    warnings = _warnings(out)
    assert [warned in w for w in warnings] == ([True] if warned else [])
    assert bool(bad.files.refused) == (text == "\udcff")


def test_a_signed_record_with_an_expires_that_is_no_number_is_a_miss(store, capsys):
    first, _, _ = _run(store)
    key = first["cache_key"]
    record = _read(store, key)
    record["expires"] = "1e308"
    _write(store, key, _resign(record, OURS))
    capsys.readouterr()
    _, submitted, _ = _run(store)
    assert submitted == 1 and "not a finite number" in _warnings(capsys.readouterr().out)[0]


def test_prune_skips_a_malformed_record_and_goes_on(store, capsys):
    from torchx_airflow_tracker.cli import main

    first, _, _ = _run(store)
    record = _read(store, first["cache_key"])
    _write(store, "b" * 64, {**record, "expires": "soon"})
    _write(store, "c" * 64, {**record, "expires": time.time() - 1})
    assert main(["--fsspec", store.root, "cache", "prune"]) == 0
    out = capsys.readouterr()
    assert f"deleted {'c' * 64} (expired)" in out.out and "skipped, malformed" in out.err
    assert _record_file(store, first["cache_key"]).exists() and _record_file(store, "b" * 64).exists()


def test_a_hit_reports_nothing_spent_and_references_the_earlier_usage():
    record = {
        "app_handle": HANDLE,
        "result": {"app_handle": HANDLE, "usage": {"cpu_hours": 2.0}, "cost": 3.5},
    }
    result = hit_result(record, "a" * 64)
    assert result["cost"] == 0.0 and "usage" not in result
    assert result["cached_usage"] == {"usage": {"cpu_hours": 2.0}, "cost": 3.5, "app_handle": HANDLE}


# bad input, refused before anything is submitted


def test_without_a_deployment_key_a_cached_task_refuses_naming_the_option(store, monkeypatch):
    monkeypatch.delenv("AIRFLOW__TORCHX__CACHE_KEY_SECRET")
    hook = CachingHook([AppState.SUCCEEDED])
    op = _task(hook, store)
    with pytest.raises(TorchXConfigError, match=r"no cache key: \[torchx\] cache_key_secret is not set"):
        op.execute(_context(op, TaskStateStore()))
    assert getattr(hook, "tokens", []) == []


def test_a_key_secret_naming_nothing_or_a_short_key_is_refused(store, monkeypatch):
    monkeypatch.setenv("AIRFLOW__TORCHX__CACHE_KEY_SECRET", "no_such_variable")
    with pytest.raises(TorchXConfigError, match=r"names 'no_such_variable', and no Airflow Variable"):
        _run(store)
    monkeypatch.setenv("AIRFLOW__TORCHX__CACHE_KEY_SECRET", "torchx_cache_key")
    monkeypatch.setenv("AIRFLOW_VAR_TORCHX_CACHE_KEY", "short")
    with pytest.raises(TorchXConfigError, match=r"at least 32 characters") as raised:
        _run(store)
    assert "short" not in str(raised.value)  # the message never shows the secret
    with pytest.raises(TorchXConfigError, match=r"JSON list of such keys"):
        parse_keys("[]", "x")


def test_a_string_cache_and_a_bad_scope_are_refused_with_their_fix(store):
    from torchx_airflow.operators.torchx import TorchXOperator

    with pytest.raises(TorchXConfigError, match=r"cache must be True or False.*got 'false'.*cache=True"):
        TorchXOperator(task_id="t", component="utils.echo", cache="false")
    with pytest.raises(
        TorchXConfigError, match=r"cache_scope must be one of \['dag', 'deployment'\], got 'team'"
    ):
        _task(CachingHook([AppState.SUCCEEDED]), store, cache_scope="team")
    with pytest.raises(TorchXConnectionError, match=r"extra 'cache': 'yes' is not of type 'boolean'"):
        TorchXConnectionSettings.from_extra("c", {"cache": "yes"})
    with pytest.raises(TorchXConnectionError, match=r"extra 'cache_scope': 1 is not of type 'string'"):
        TorchXConnectionSettings.from_extra("c", {"cache_scope": 1})
    assert TorchXConnectionSettings.from_extra("c", {"cache": "false"}).cache is False


def test_a_signed_record_of_another_scope_under_this_key_is_a_miss(store, capsys):
    """The scope is checked on its own, not only through the key it enters."""
    first, _, _ = _run(store)
    key = first["cache_key"]
    _write(store, key, _resign({**_read(store, key), "scope": "dag:other_team"}, OURS))
    capsys.readouterr()
    _, submitted, _ = _run(store)
    warned = _warnings(capsys.readouterr().out)
    assert submitted == 1 and len(warned) == 1 and "scope 'dag:other_team'" in warned[0]


@pytest.mark.integration
def test_on_a_real_mlflow_server_a_forged_or_copied_record_never_hides_the_honest_one(mlflow_uri, capsys):
    """The same writer with the MLflow store's credentials adds records through the store's own
    client, as any job tracking to the server could: a forged one, then another DAG's genuine one under
    our key, each newer than ours. Each is ignored with a warning, and our record, which verifies,
    still hits: nothing is submitted, nothing of theirs reaches the result."""
    import uuid

    from torchx_airflow_tracker.mlflow_store import MlflowStore

    store = MlflowStore(mlflow_uri, f"hostile-{uuid.uuid4().hex[:8]}")
    ours, submitted, _ = _run(store)
    assert submitted == 1
    hit, submitted, _ = _run(store)
    assert submitted == 0 and hit["cache_hit"] is True  # untouched: caching keeps working
    records = store.cache_records
    key = ours["cache_key"]
    forged = records.get(key)
    forged["result"]["artifacts"] = {"model": {"name": "model", "path": FORGED_PATH, "metadata": {}}}
    records.put(key, forged)
    capsys.readouterr()
    result, submitted, _ = _run(store)
    warned = _warnings(capsys.readouterr().out)
    assert submitted == 0 and result["cache_hit"] is True and FORGED_PATH not in json.dumps(result)
    assert len(warned) == 1 and "signature does not verify" in warned[0]
    theirs, submitted, _ = _run(store, OtherDagTI())
    assert submitted == 1 and theirs["cache_key"] != key
    records.put(key, records.get(theirs["cache_key"]))  # another DAG's genuine record, under our key
    capsys.readouterr()
    result, submitted, _ = _run(store)
    assert submitted == 0 and result["app_handle"] == ours["app_handle"]
    assert any("another key" in w for w in _warnings(capsys.readouterr().out))


def test_the_key_may_be_a_connections_password(store, monkeypatch):
    _run(store)  # signed with OURS, from the Variable
    monkeypatch.setenv("AIRFLOW__TORCHX__CACHE_KEY_SECRET", "cache_key_conn")
    monkeypatch.setenv("AIRFLOW_CONN_CACHE_KEY_CONN", json.dumps({"conn_type": "generic", "password": OURS}))
    hit, submitted, _ = _run(store)
    assert submitted == 0 and hit["cache_hit"] is True


def test_outputs_are_read_only_where_the_task_may_read_and_still_checked_in_another_runs_dir(store, tmp_path):
    """The job's artifact paths are the job's choice: one outside what the task's arguments and
    stores name (a file of the worker's) is not fingerprinted into the record; one in the run's own
    output directory is, with that directory signed as the record's read root, so a later run whose
    arguments name another directory (a per-run output path the key ignores) still checks it: an
    untouched output hits, a changed one is a miss."""
    secret = tmp_path / "worker" / "id_rsa"
    secret.parent.mkdir()
    secret.write_text("not for jobs")

    def run_in(out_dir: Path):
        out_dir.mkdir(parents=True, exist_ok=True)
        return _run(store, component_args=["--msg", f"out {out_dir}"], cache_ignore_args=["--msg=*"])

    model = tmp_path / "runs" / "1" / "model.bin"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"weights")
    store.add_artifact(HANDLE, "model", str(model))  # as the job records them
    store.add_artifact(HANDLE, "stolen", str(secret))
    first, submitted, _ = run_in(model.parent)
    assert submitted == 1 and first["cache_hit"] is False
    record = _read(store, first["cache_key"])
    assert record["outputs"][str(secret)] is None  # not read: outside the task's scope
    assert record["outputs"][str(model)]["sha256"]
    assert str(model.parent) in record["read_roots"]

    again, submitted, _ = run_in(tmp_path / "runs" / "2")
    assert submitted == 0 and again["cache_hit"] is True
    model.write_bytes(b"weightz")
    third, submitted, _ = run_in(tmp_path / "runs" / "3")
    assert submitted == 1 and third["cache_hit"] is False


def test_a_signed_output_outside_the_task_and_its_read_roots_is_never_read(tmp_path):
    """At a lookup, an output outside both the task's scope and the record's signed read roots is
    gone (a miss), without being read; read roots that are not absolute paths are a forgery."""
    from torchx_airflow.policies.cache.fingerprints import ReadScope
    from torchx_airflow.policies.cache.records import new_record, usable

    keys = CacheKeys((OURS.encode(),))
    elsewhere = tmp_path / "elsewhere.bin"
    elsewhere.write_bytes(b"x")
    result = {"app_handle": HANDLE, "state": "SUCCEEDED", "artifacts": {}}
    record = new_record("k", "dag:d", HANDLE, result, 60, {}, keys, ReadScope(local_roots=(str(tmp_path),)))
    fields = {k: v for k, v in record.items() if k != SIGNATURE_FIELD}
    fields.update(outputs={str(elsewhere): {"size": 1}}, read_roots=[str(tmp_path / "run-1")])
    task = ReadScope(local_roots=(str(tmp_path / "run-2"),))
    reason = usable(_resign(fields, OURS), "k", "dag:d", 60, keys, read_within=task)
    assert (
        reason is not None and "is gone" in reason[0] and "lies outside the task's output roots" in reason[0]
    ), reason
    fields["read_roots"] = ["relative/dir"]
    reason = usable(_resign(fields, OURS), "k", "dag:d", 60, keys, read_within=task)
    assert reason == ("its read roots are not a list of absolute paths", True)
