"""The credential matrix shared by the local_cwd and Slurm tests: every way a credential can be
configured (``tests/dags/torchx_credential_dags.py``: the password field, URI user info for
http/https/postgresql/mysql/sftp, storage options of s3/gcs/abfs/sftp, the task's env, and an artifact
URL a job writes), one real ``airflow dags test`` run, and every place a secret could surface.

Stores that cannot run here (https, postgresql, mysql, sftp, gcs, abfs) point at 127.0.0.1:9, where
nothing listens: their dry-run tasks go as far as building the job env and the scheduler request,
their run tasks fail where the store is opened (before anything is submitted), so the exception text
is one of the places searched. MLflow over http (password field and URI user info) and s3 (moto's
server) are real and run the job.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import AIRFLOW, TEST_DAGS, DagRunResult, collect_run
from tests.dags.torchx_credential_dags import ARTIFACT_PATH, CREDENTIAL_WAYS, ENV_SECRETS
from tests.job_env import files_under
from tests.openlineage_events import file_transport
from tests.secret_search import secret_hits

NOWHERE = "127.0.0.1:9"  # nothing listens: the store is never opened
SECRETS = {
    "password": "mlflow-Password-Field-5520",
    "uri_http": "mlflow-Http-Uri-Secret-5524",
    "uri_https": "mlflow-Https-Uri-Secret-5525",
    "uri_postgresql": "mlflow-Pg-Uri-Secret-5526",
    "uri_mysql": "mlflow-My-Uri-Secret-5527",
    "uri_sftp": "sftp-Root-Uri-Secret-5528",
    "s3_key": "s3-Access-Key-Id-5530",
    "s3_secret": "s3-Secret-Access-5531",
    "gcs": "gcs-Private-Key-Secret-5532",
    "abfs_key": "abfs-Account-Key-5533",
    "abfs_conn_string": "abfs-Conn-String-Key-5534",
    "abfs_sas": "abfs-Sas-Signature-5535",
    "abfs_credential": "abfs-Credential-5536",
    "abfs_client_secret": "abfs-Client-Secret-5537",
    "sftp_password": "sftp-Opt-Password-5538",
    "sftp_passphrase": "sftp-Passphrase-5539",
    "sftp_pkey": "sftp-Pkey-Inline-5540",
    "env_token": ENV_SECRETS["API_TOKEN"],
    "env_uri": "env-Db-Uri-Secret-5522",
    "artifact": "artifact-Url-Secret-5523",
}
RUNS = {"password", "uri_http", "options_s3", "env"}  # stores that open here: their jobs run
# a base64 value cut by a mask: what is left of it may still decode (it must not be there at all)
HALF_MASKED = re.compile(r"[A-Za-z0-9+/_-]{8,}\*\*\*")


def _conn(conn_type: str, **fields) -> str:
    return json.dumps({"conn_type": conn_type, **fields})


def _fsspec(root: str, options: dict | None = None) -> str:
    return _conn("torchx_fsspec", extra={"root": root, **({"storage_options": options} if options else {})})


def connections(mlflow_uri: str, s3_endpoint: str, store: Path, workdir: Path) -> dict[str, str]:
    """``AIRFLOW_CONN_*`` of every way, and the torchx connections of both schedulers."""
    http = mlflow_uri.split("://", 1)[1]
    s = SECRETS
    ways = {
        "password": _conn("mlflow", host=mlflow_uri, login="airflow", password=s["password"]),
        "uri_http": _conn("mlflow", host=f"http://airflow:{s['uri_http']}@{http}"),
        "uri_https": _conn("mlflow", host=f"https://airflow:{s['uri_https']}@{NOWHERE}"),
        "uri_postgresql": _conn("mlflow", host=f"postgresql://mlflow:{s['uri_postgresql']}@{NOWHERE}/mlflow"),
        "uri_mysql": _conn("mlflow", host=f"mysql://mlflow:{s['uri_mysql']}@{NOWHERE}/mlflow"),
        "uri_sftp": _fsspec(f"sftp://runs:{s['uri_sftp']}@{NOWHERE}/runs"),
        "options_s3": _fsspec(
            "s3://credential-matrix/runs",
            {"endpoint_url": s3_endpoint, "key": s["s3_key"], "secret": s["s3_secret"]},
        ),
        "options_gcs": _fsspec(
            "gs://credential-matrix/runs",
            {"token": {"type": "service_account", "private_key": s["gcs"], "client_email": "a@b.c"}},
        ),
        "options_abfs": _fsspec(
            "abfs://matrix/runs",
            {
                "account_name": "matrix",
                "account_key": s["abfs_key"],
                "connection_string": f"AccountName=matrix;AccountKey={s['abfs_conn_string']}",
                "sas_token": f"sv=2024&sig={s['abfs_sas']}",
                "credential": s["abfs_credential"],
                "client_secret": s["abfs_client_secret"],
            },
        ),
        "options_sftp": _fsspec(
            f"sftp://{NOWHERE}/runs",
            {
                "username": "runs",
                "password": s["sftp_password"],
                "passphrase": s["sftp_passphrase"],
                "pkey": s["sftp_pkey"],
            },
        ),
    }
    assert set(ways) | {"env"} == set(CREDENTIAL_WAYS)
    env = {f"AIRFLOW_CONN_CRED_{way.upper()}": conn for way, conn in ways.items()}
    env["AIRFLOW_CONN_CRED_LOCAL"] = _fsspec(str(store))
    local_cfg = {"log_dir": str(workdir / "torchx-logs")}  # keep local_cwd's job output to search it
    env["AIRFLOW_CONN_TORCHX_CRED_LOCAL"] = _conn(
        "torchx", extra={"scheduler": "local_cwd", "cfg": local_cfg}
    )
    env["AIRFLOW_CONN_TORCHX_CRED_SLURM"] = _conn("torchx", extra={"scheduler": "slurm"})
    return env


@dataclass
class MatrixRun:
    result: DagRunResult
    workdir: Path
    events: Path


def run_matrix(scheduler: str, airflow_db: Path, conns: dict[str, str], tmp_path: Path) -> MatrixRun:
    """One ``airflow dags test`` of ``credential_matrix_<scheduler>`` from ``tmp_path/work``."""
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    events = tmp_path / "openlineage.jsonl"
    env = {**os.environ, **conns, **file_transport(events), "AIRFLOW__CORE__DAGS_FOLDER": str(TEST_DAGS)}
    dag_id = f"credential_matrix_{scheduler}"
    proc = subprocess.run(
        [AIRFLOW, "dags", "test", dag_id], capture_output=True, text=True, timeout=1200, cwd=workdir, env=env
    )
    (tmp_path / "dags-test-output.txt").write_text(proc.stdout + proc.stderr)  # to read when a test fails
    return MatrixRun(
        collect_run(airflow_db, dag_id, proc.returncode, proc.stdout + proc.stderr), workdir, events
    )


def expected_states() -> dict[str, str]:
    states = {f"dryrun_{way}": "success" for way in CREDENTIAL_WAYS}
    states |= {f"run_{way}": "success" if way in RUNS else "failed" for way in CREDENTIAL_WAYS}
    return states


def places(run: MatrixRun, extra: dict[str, bytes] | None = None) -> dict[str, bytes]:
    """Task logs (the command's output and the log files), every XCom and rendered field, the job's
    output files, the OpenLineage events, and ``extra``."""
    home = Path(os.environ["AIRFLOW_HOME"])
    logs = home / "logs" / f"dag_id={run.result.dag_id}" / f"run_id={run.result.run_id}"
    found = {
        "airflow dags test output": run.result.output.encode(),
        "xcom and rendered fields": run.result.stored_text().encode(),
        **files_under(logs, run.workdir),
        "openlineage events": run.events.read_bytes(),
        **(extra or {}),
    }
    assert len(found) > 5, sorted(found)
    return found


def all_secrets() -> list[str]:
    return list(SECRETS.values())


def assert_nothing_found(where: dict[str, bytes]) -> None:
    assert secret_hits(all_secrets(), where) == []
    half = {
        place: m for place, text in where.items() if (m := HALF_MASKED.findall(text.decode(errors="replace")))
    }
    assert half == {}


def assert_artifact_path_kept_without_user_info(run: MatrixRun) -> None:
    """The job's artifact arrives in the task's result, its path without the URL's user info."""
    artifacts = run.result.xcom("run_env")["artifacts"]
    assert artifacts["model"]["path"] == ARTIFACT_PATH.replace("bob:artifact-Url-Secret-5523@", "")


def assert_env_arrived_intact(run: MatrixRun) -> None:
    """The ``env`` way's values reached the job as they were (the job prints their digests): a ','
    value is not cut into more variables (``LD_PRELOAD`` stays empty)."""
    output = run.result.output
    task = output[output.index("starting task_id=run_env ") : output.index("end task task_id=run_env ")]
    lines = [line for line in task.splitlines() if "ENV-SHA256 " in line]
    digests = dict(line.split("ENV-SHA256 ", 1)[1].split()[:2] for line in lines)
    expected = {name: hashlib.sha256(value.encode()).hexdigest() for name, value in ENV_SECRETS.items()}
    assert {name: digests.get(name) for name in expected} == expected
    assert digests.get("LD_PRELOAD") == hashlib.sha256(b"").hexdigest()
