"""Connection "Test" the ways Airflow offers it: `POST /api/v2/connections/test` on a running API server
(the request the UI's Test button sends) and `airflow connections test`, for a good and a bad
connection of each of the provider's types."""

from __future__ import annotations

import json

import pytest

from tests.services import free_port
from tests.stack import REPO, AirflowStack

pytestmark = pytest.mark.integration
SECRET = "Rest-Test-Secret-5521"


@pytest.fixture(scope="module")
def api_server(tmp_path_factory):
    home = tmp_path_factory.mktemp("rest-conn-test")
    # an MLflow server that is down must fail the test at once, not after MLflow's retries
    stack = AirflowStack(home, REPO / "dags", env_extra={"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"})
    stack.up_api_server()
    try:
        yield stack
    finally:
        stack.down()


def _test(stack: AirflowStack, conn_id: str, conn_type: str, extra: dict | None = None, **fields) -> dict:
    body = {"connection_id": conn_id, "conn_type": conn_type, **fields}
    if extra is not None:
        body["extra"] = json.dumps(extra)
    return stack.api("POST", "/connections/test", body)


def test_torchx_connections(api_server):
    good = _test(
        api_server, "rest_tx_good", "torchx", {"scheduler": "local_cwd", "cfg": {"prepend_cwd": "yes"}}
    )
    assert good["status"] is True, good
    assert "Scheduler 'local_cwd' is available and cfg is valid" in good["message"]
    assert "'prepend_cwd': True" in good["message"]
    bad = _test(api_server, "rest_tx_bad", "torchx", {"cfg": {"prepend_cwd": "maybe"}})
    assert bad["status"] is False, bad
    assert "run option 'prepend_cwd' takes true or false, got 'maybe'" in bad["message"]
    assert "Write true or false" in bad["message"]


def test_fsspec_connections(api_server, tmp_path):
    root = tmp_path / "runs"
    good = _test(api_server, "rest_fs_good", "torchx_fsspec", {"root": str(root)})
    assert good["status"] is True, good
    assert good["message"] == f"Wrote, read back and deleted a probe file under {root}"
    assert list((root / ".torchx-airflow-probe").iterdir()) == []
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    bad = _test(api_server, "rest_fs_bad", "torchx_fsspec", {"root": str(blocked / "runs")})
    assert bad["status"] is False, bad
    assert "failed" in bad["message"] and str(blocked / "runs") in bad["message"]
    named = _test(api_server, "rest_fs_bad2", "torchx_fsspec", {"root": "/data/runs"}, password=SECRET)
    assert named["status"] is False, named
    assert "uses protocol 'file', which takes no login/password. Clear them" in named["message"]
    assert SECRET not in named["message"]


def test_mlflow_connections(api_server, mlflow_uri):
    good = _test(api_server, "rest_ml_good", "mlflow", {"experiment": "rest-probe"}, host=mlflow_uri)
    assert good["status"] is True, good
    assert good["message"] == f"Wrote and read back a probe tag on experiment 'rest-probe' at {mlflow_uri}"
    down = f"http://127.0.0.1:{free_port()}"
    bad = _test(api_server, "rest_ml_bad", "mlflow", host=down, login="u", password=SECRET)
    assert bad["status"] is False, bad
    assert "opening the experiment failed" in bad["message"]
    assert SECRET not in bad["message"]


def test_cli_connections_test(tmp_path):
    """`airflow connections test`, the CLI's path to the same hooks (connections from the environment)."""
    import os
    import subprocess

    from tests.conftest import AIRFLOW

    env = {
        **os.environ,
        "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
        "AIRFLOW_CONN_CLI_FS": json.dumps({"conn_type": "torchx_fsspec", "extra": {"root": str(tmp_path)}}),
        "AIRFLOW_CONN_CLI_TX": json.dumps(
            {"conn_type": "torchx", "extra": {"cfg": {"prepend_cwd": "maybe"}}}
        ),
        "AIRFLOW_CONN_CLI_ML": json.dumps({"conn_type": "mlflow", "host": "ftp://m", "password": SECRET}),
    }

    def cli_test(conn_id: str) -> str:
        proc = subprocess.run(
            [AIRFLOW, "connections", "test", conn_id], env=env, capture_output=True, text=True, timeout=180
        )
        return " ".join((proc.stdout + proc.stderr).split())  # the console wraps long lines

    fs = cli_test("cli_fs")
    assert "Connection success!" in fs, fs
    assert list((tmp_path / ".torchx-airflow-probe").iterdir()) == []  # the probe was written and removed
    tx = cli_test("cli_tx")
    assert "Connection failed!" in tx and "got 'maybe' (str). Write true or false." in tx, tx
    ml = cli_test("cli_ml")
    assert "Connection failed!" in ml and "has scheme 'ftp', which MLflow does not take" in ml, ml
    assert SECRET not in ml
