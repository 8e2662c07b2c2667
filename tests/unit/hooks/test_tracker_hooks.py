"""Tracker connections: fields to job env and stores, bad connections refused with the fix, real probes."""

from __future__ import annotations

import json
import os

import pytest
from airflow.sdk import Connection
from torchx.tracker.api import build_trackers
from torchx_airflow_tracker.config import parse_config
from torchx_airflow_tracker.fsspec_store import FsspecStore

from torchx_airflow.apps import app_name_for
from torchx_airflow.exceptions import TorchXConfigError, TorchXConnectionError
from torchx_airflow.hooks.torchx import _tracker_environ
from torchx_airflow.hooks.tracker import MlflowTrackerHook, TorchXFsspecHook, tracker_hook, trackers_for
from torchx_airflow.lineage.stores import TrackerSet
from torchx_airflow.operators.torchx import TorchXDryRunOperator

SECRET = "s3-Secret-Key-0042"


def _conn(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def test_fsspec_s3_login_and_password_become_key_and_secret(monkeypatch):
    _conn(
        monkeypatch,
        "store",
        conn_type="torchx_fsspec",
        login="AKIAEXAMPLE",
        password=SECRET,
        extra={"root": "s3://bucket/runs", "storage_options": {"endpoint_url": "http://minio:9000"}},
    )
    backend = tracker_hook("store").backend()
    assert backend.kind == "fsspec"
    assert backend.config == {
        "root": "s3://bucket/runs",
        "storage_options": {"endpoint_url": "http://minio:9000", "key": "AKIAEXAMPLE", "secret": SECRET},
    }
    assert backend.secrets == ("AKIAEXAMPLE", SECRET)  # s3fs's key is on secrets.SECRET_OPTION_KEYS
    assert SECRET not in repr(backend)


def test_fsspec_storage_option_secrets_are_secrets_too(monkeypatch):
    _conn(
        monkeypatch,
        "store",
        conn_type="torchx_fsspec",
        extra={"root": "gs://b/p", "storage_options": '{"token": "tok-123456789", "project": "p"}'},
    )
    assert TorchXFsspecHook("store").backend().secrets == ("tok-123456789",)


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"extra": {}}, "extra 'root' must name where runs are stored"),
        ({"extra": {"root": "/data/runs", "storage_options": "{bad"}}, "'storage_options' is not valid JSON"),
        (
            {"extra": {"root": "/data/runs", "storage_options": [1]}},
            "extra 'storage_options': the value does not match type ['object', 'null']",
        ),
        ({"extra": {"root": "/data/runs"}, "password": SECRET}, "protocol 'file', which takes no login"),
    ],
)
def test_bad_fsspec_connections_name_the_field_and_the_fix(monkeypatch, fields, fragment):
    _conn(monkeypatch, "store", conn_type="torchx_fsspec", **fields)
    with pytest.raises(TorchXConnectionError, match="Connection 'store'") as e:
        TorchXFsspecHook("store").backend()
    assert fragment in str(e.value)
    assert SECRET not in str(e.value)


def test_mlflow_host_is_the_tracking_uri_and_credentials_go_to_mlflows_variables(monkeypatch):
    _conn(
        monkeypatch, "ml", conn_type="mlflow", host="mlflow.internal", port=5000, login="u", password=SECRET
    )
    backend = MlflowTrackerHook("ml").backend()
    assert backend.config == {"tracking_uri": "http://mlflow.internal:5000", "experiment": "torchx"}
    assert backend.job_env == {"MLFLOW_TRACKING_USERNAME": "u", "MLFLOW_TRACKING_PASSWORD": SECRET}
    _conn(monkeypatch, "ml2", conn_type="mlflow", host="sqlite:////d/m.db", extra={"experiment": "exp"})
    assert MlflowTrackerHook("ml2").backend().config == {
        "tracking_uri": "sqlite:////d/m.db",
        "experiment": "exp",
    }
    _conn(monkeypatch, "ml3", conn_type="mlflow")
    with pytest.raises(TorchXConnectionError, match="host must be the MLflow tracking URI"):
        MlflowTrackerHook("ml3").backend()


def test_tracker_of_the_wrong_type_or_missing_is_refused(monkeypatch):
    _conn(monkeypatch, "http_conn", conn_type="http", host="x")
    with pytest.raises(TorchXConnectionError, match="type 'http', which is not a tracker"):
        tracker_hook("http_conn")
    with pytest.raises(TorchXConnectionError, match="'nope' is not defined.*AIRFLOW_CONN_"):
        tracker_hook("nope")


def test_tracker_set_job_env_one_store_and_several(monkeypatch, tmp_path):
    _conn(monkeypatch, "fs1", conn_type="torchx_fsspec", extra={"root": str(tmp_path / "a")})
    _conn(monkeypatch, "fs2", conn_type="torchx_fsspec", extra={"root": "memory://b"})
    _conn(monkeypatch, "ml", conn_type="mlflow", host="http://m:5000", login="u", password=SECRET)
    single = trackers_for(["fs1"]).job_env()
    assert single == {
        "TORCHX_TRACKERS": "airflow_fsspec",
        "TORCHX_TRACKER_AIRFLOW_FSSPEC_CONFIG": json.dumps(
            {"root": str(tmp_path / "a")}, separators=(",", ":")
        ),
    }
    mlflow_only = trackers_for(["ml"]).job_env()
    assert mlflow_only["TORCHX_TRACKER_AIRFLOW_MLFLOW_CONFIG"].startswith("base64:")  # its JSON has a comma
    assert parse_config(
        "mlflow", mlflow_only["TORCHX_TRACKER_AIRFLOW_MLFLOW_CONFIG"], ("tracking_uri",), ("experiment",)
    ) == {"tracking_uri": "http://m:5000", "experiment": "torchx"}

    env = trackers_for(["fs1", "ml", "fs2"]).job_env()
    # no value may hold a comma: TorchX's Slurm scheduler passes env as `srun --export=ALL,K=V,...`
    assert not [k for k, v in env.items() if "," in v]
    assert env["TORCHX_TRACKERS"] == "airflow_stores"
    store = build_trackers({"airflow_stores": env["TORCHX_TRACKER_AIRFLOW_STORES_CONFIG"]})[0]
    assert [type(s).__name__ for s in store.stores] == ["FsspecStore", "MlflowStore", "FsspecStore"]
    assert store.stores[1].tracking_uri == "http://m:5000"
    assert env["MLFLOW_TRACKING_URI"] == "http://m:5000"
    assert env["MLFLOW_TRACKING_PASSWORD"] == SECRET
    assert TrackerSet([]).job_env() == {}


def test_several_stores_in_a_job_write_to_all_and_read_from_the_first(tmp_path):
    config = json.dumps([{"kind": "fsspec", "config": {"root": str(tmp_path / d)}} for d in ("a", "b")])
    (store,) = build_trackers({"airflow_stores": config})
    store.add_metadata("x://s/1", lr=0.5)
    store.add_artifact("x://s/1", "model", "/m.pt")
    store.add_source("x://s/1", "x://s/0")
    for root in ("a", "b"):
        other = FsspecStore(str(tmp_path / root))
        assert other.metadata("x://s/1") == {"lr": 0.5}
        assert [s.source_run_id for s in other.sources("x://s/1")] == ["x://s/0"]
    assert store.artifacts("x://s/1")["model"].path == "/m.pt"
    with pytest.raises(ValueError, match="Unknown store kind 'nope'"):
        build_trackers({"airflow_stores": '[{"kind": "nope", "config": {}}]'})


def test_tracker_set_limits(monkeypatch):
    for i in range(5):
        _conn(monkeypatch, f"fs{i}", conn_type="torchx_fsspec", extra={"root": f"memory://{i}"})
    with pytest.raises(TorchXConnectionError, match="at most 4 of each kind"):
        trackers_for([f"fs{i}" for i in range(5)])
    _conn(monkeypatch, "ml1", conn_type="mlflow", host="http://a", login="u", password="p1-password")
    _conn(monkeypatch, "ml2", conn_type="mlflow", host="http://b", login="v", password="p2-password")
    with pytest.raises(TorchXConnectionError, match="different credentials"):
        trackers_for(["ml1", "ml2"])


def test_task_trackers_default_to_the_torchx_connection_and_operator_overrides(monkeypatch, tmp_path):
    _conn(monkeypatch, "fs1", conn_type="torchx_fsspec", extra={"root": str(tmp_path)})
    _conn(monkeypatch, "fs2", conn_type="torchx_fsspec", extra={"root": "memory://x"})
    _conn(monkeypatch, "tx", conn_type="torchx", extra={"trackers": ["fs1"]})
    op = TorchXDryRunOperator(task_id="t", component="utils.echo", torchx_conn_id="tx")
    assert op.trackers.conn_ids == ["fs1"]
    op = TorchXDryRunOperator(
        task_id="t", component="utils.echo", torchx_conn_id="tx", tracker_conn_ids="fs2"
    )
    assert op.trackers.conn_ids == ["fs2"]
    op = TorchXDryRunOperator(task_id="t", component="utils.echo", torchx_conn_id="tx", tracker_conn_ids=[])
    assert not op.trackers


def test_every_role_gets_the_tracker_env_and_the_app_its_task_name(monkeypatch, tmp_path):
    _conn(monkeypatch, "fs1", conn_type="torchx_fsspec", extra={"root": str(tmp_path)})
    op = TorchXDryRunOperator(
        task_id="Group.Train_1", component="utils.echo", tracker_conn_ids=["fs1"], env={"A": "1"}
    )
    app = op.build_app()
    assert app.name == "group-train-1"
    (role,) = app.roles
    assert role.env["TORCHX_TRACKERS"] == "airflow_fsspec"
    assert role.env["A"] == "1"
    clash = TorchXDryRunOperator(
        task_id="t", component="utils.echo", tracker_conn_ids=["fs1"], env={"TORCHX_TRACKERS": "mine"}
    )
    with pytest.raises(TorchXConfigError, match="Configure trackers one way"):
        clash.build_app()
    assert app_name_for("___") == "app"


def test_the_workers_own_tracker_variables_never_reach_the_job(monkeypatch, tmp_path):
    """TorchX's dryrun copies TORCHX_TRACKERS/TORCHX_PARENT_RUN_ID from the launching process."""
    monkeypatch.setenv("TORCHX_TRACKERS", "worker_tracker")
    monkeypatch.setenv("TORCHX_TRACKER_WORKER_TRACKER_CONFIG", "worker-config")
    monkeypatch.setenv("TORCHX_PARENT_RUN_ID", "worker://parent")
    _conn(monkeypatch, "fs1", conn_type="torchx_fsspec", extra={"root": str(tmp_path)})
    for conn_ids, trackers in ((["fs1"], "airflow_fsspec"), ([], None)):
        op = TorchXDryRunOperator(task_id="t", component="utils.echo", tracker_conn_ids=conn_ids)
        app = op.build_app()
        op.hook.dryrun(app)
        (role,) = app.roles
        assert role.env.get("TORCHX_TRACKERS") == trackers
        assert "TORCHX_PARENT_RUN_ID" not in role.env
        assert "TORCHX_TRACKER_WORKER_TRACKER_CONFIG" not in role.env
    assert os.environ["TORCHX_PARENT_RUN_ID"] == "worker://parent"  # restored afterwards
    with _tracker_environ():
        assert "TORCHX_TRACKERS" not in os.environ


def test_fsspec_test_connection_writes_and_reads_a_probe(monkeypatch, tmp_path):
    _conn(monkeypatch, "ok", conn_type="torchx_fsspec", extra={"root": str(tmp_path / "runs")})
    ok, message = TorchXFsspecHook("ok").test_connection()
    assert ok, message
    assert list((tmp_path / "runs" / ".torchx-airflow-probe").iterdir()) == []  # probe removed
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    _conn(monkeypatch, "bad", conn_type="torchx_fsspec", extra={"root": str(blocked / "runs")})
    ok, message = TorchXFsspecHook("bad").test_connection()
    assert not ok
    assert "Connection 'bad'" in message and "failed" in message


@pytest.mark.integration
def test_mlflow_test_connection_against_a_real_server(monkeypatch, mlflow_uri):
    _conn(monkeypatch, "ml", conn_type="mlflow", host=mlflow_uri, extra={"experiment": "probe"})
    ok, message = MlflowTrackerHook("ml").test_connection()
    assert ok, message
    from tests.services import free_port

    _conn(monkeypatch, "down", conn_type="mlflow", host=f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    ok, message = MlflowTrackerHook("down").test_connection()
    assert not ok
    assert "Connection 'down': opening the experiment failed" in message


def test_unreachable_tracker_fails_before_submission(monkeypatch):
    from tests.services import free_port

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    _conn(monkeypatch, "down", conn_type="mlflow", host=f"http://127.0.0.1:{free_port()}")
    trackers = trackers_for(["down"])
    with pytest.raises(
        TorchXConnectionError, match="'down' \\(mlflow\\) cannot be opened.*Nothing was submitted"
    ):
        trackers.check()


def test_connection_get_hook_builds_each_tracker_hook(tmp_path):
    """The UI, REST API and CLI "Test": Connection.get_hook() passes the id as conn_name_attr."""
    fsspec_conn = Connection(
        conn_id="fs_via_get_hook", conn_type="torchx_fsspec", extra=json.dumps({"root": str(tmp_path)})
    )
    hook = fsspec_conn.get_hook()
    assert type(hook) is TorchXFsspecHook and hook.conn_id == "fs_via_get_hook"
    ok, message = fsspec_conn.test_connection()
    assert ok, message
    assert f"probe file under {tmp_path}" in message
    mlflow_conn = Connection(conn_id="ml_via_get_hook", conn_type="mlflow", host="http://mlflow:5000")
    hook = mlflow_conn.get_hook()
    assert type(hook) is MlflowTrackerHook and hook.conn_id == "ml_via_get_hook"


@pytest.mark.integration
def test_mlflow_connection_test_through_get_hook(mlflow_uri, monkeypatch):
    good = Connection(conn_id="ml_ok", conn_type="mlflow", host=mlflow_uri, extra='{"experiment": "gh"}')
    ok, message = good.test_connection()
    assert ok, message
    assert f"experiment 'gh' at {mlflow_uri}" in message
    from tests.services import free_port

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    down = Connection(conn_id="ml_down", conn_type="mlflow", host=f"http://127.0.0.1:{free_port()}")
    ok, message = down.test_connection()
    assert not ok
    assert "Connection 'ml_down': opening the experiment failed" in message


def test_chained_and_windows_free_fsspec_roots(monkeypatch):
    _conn(monkeypatch, "chained", conn_type="torchx_fsspec", extra={"root": "simplecache::s3://b/runs"})
    assert TorchXFsspecHook("chained").backend().config["root"] == "simplecache::s3://b/runs"
    _conn(monkeypatch, "mem", conn_type="torchx_fsspec", extra={"root": " memory://runs "})
    assert TorchXFsspecHook("mem").backend().config == {"root": "memory://runs"}


def test_a_tracker_secret_is_masked_in_the_encoded_forms_a_log_line_may_hold(monkeypatch):
    """The task's trackers register each secret with Airflow's masker in every form it can take in
    text: URL-encoded, and inside longer base64 text (a basic-auth header, a config blob)."""
    import base64
    from urllib.parse import quote

    from torchx_airflow.secrets import redact_text

    password = "enc0ded+Pass/word=42"
    host = "http://127.0.0.1:1"
    _conn(monkeypatch, "enc_ml", conn_type="mlflow", host=host, login="bob", password=password)
    trackers_for(["enc_ml"])
    header = base64.b64encode(f"bob:{password}".encode()).decode()
    blob = base64.urlsafe_b64encode(f'{{"x": 1, "password": "{password}"}}'.encode()).decode()
    for line in (f"url ?p={quote(password, safe='')}", f"Authorization: Basic {header}", f"config {blob}"):
        shown = redact_text(line)
        assert "***" in shown, line
        for token in shown.replace("***", " ").split():
            for decode in (base64.b64decode, base64.urlsafe_b64decode):
                try:
                    decoded = decode(token + "=" * (-len(token) % 4)).decode("utf-8", "replace")
                except ValueError:
                    continue
                assert password not in decoded and password[:8] not in decoded, (line, shown)
