"""The job-environment check shared by the local_cwd and Slurm tests.

A real ``airflow dags test`` run of ``env_dump_<scheduler>`` (tests/dags/torchx_env_dags.py) from a
worker whose environment holds canary ``AIRFLOW_CONN_*``, ``AIRFLOW_VAR_*`` and ``AIRFLOW__*``
values, in a fresh work directory. The job prints its variable names and digests of the values that
must arrive; the test then searches every file the run left for every secret.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import AIRFLOW, TEST_DAGS, DagRunResult, collect_run
from tests.dags.torchx_env_dags import JOB_SECRET
from tests.services import die_with_parent

MLFLOW_SECRET = "mlflow-Passw0rd-for-env-test"
CANARIES = {
    "AIRFLOW_CONN_CANARY_DB": json.dumps(
        {"conn_type": "postgres", "host": "db", "login": "u", "password": "canary-conn-Secret-1"}
    ),
    "AIRFLOW_VAR_CANARY_TOKEN": "canary-var-Secret-2",
    "AIRFLOW__API_AUTH__JWT_SECRET": "canary-jwt-Secret-3",
}
CANARY_SECRETS = ("canary-conn-Secret-1", "canary-var-Secret-2", "canary-jwt-Secret-3")
SECRETS = (MLFLOW_SECRET, JOB_SECRET, *CANARY_SECRETS)
EXPECTED_NAMES = {
    "API_TOKEN",
    "PLAIN_SETTING",
    "TORCHX_TRACKERS",
    "TORCHX_TRACKER_AIRFLOW_MLFLOW_CONFIG",
    "MLFLOW_TRACKING_URI",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "PATH",
    "HOME",
    # MLflow's telemetry off in the job as in the worker (tests/conftest.py turns it off for the suite)
    "MLFLOW_DISABLE_TELEMETRY",
}


@dataclass
class EnvRun:
    result: DagRunResult
    workdir: Path
    names: set[str]
    digests: dict[str, str]


def _conn(conn_type: str, **fields) -> str:
    return json.dumps({"conn_type": conn_type, **fields})


def run_env_dump(scheduler: str, airflow_db: Path, mlflow_uri: str, tmp_path: Path) -> EnvRun:
    """Run ``env_dump_<scheduler>`` from ``tmp_path/work`` (the job's work dir)."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    local_cfg = {"log_dir": str(workdir / "torchx-logs")}  # keep local_cwd's log files to search them
    env = {
        **os.environ,
        **CANARIES,
        "AIRFLOW__CORE__DAGS_FOLDER": str(TEST_DAGS),
        "AIRFLOW_CONN_TORCHX_ENV_LOCAL": _conn("torchx", extra={"scheduler": "local_cwd", "cfg": local_cfg}),
        "AIRFLOW_CONN_TORCHX_ENV_SLURM": _conn("torchx", extra={"scheduler": "slurm"}),
        "AIRFLOW_CONN_ENV_MLFLOW": _conn(
            "mlflow", host=mlflow_uri, login="airflow", password=MLFLOW_SECRET, extra={"experiment": "env"}
        ),
    }
    dag_id = f"env_dump_{scheduler}"
    proc = subprocess.run(
        [AIRFLOW, "dags", "test", dag_id],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=workdir,
        env=env,
        preexec_fn=die_with_parent,
    )
    result = collect_run(airflow_db, dag_id, proc.returncode, proc.stdout + proc.stderr)
    names: set[str] = set()
    digests: dict[str, str] = {}
    for line in result.output.splitlines():
        if "ENV-NAME " in line:
            names.add(line.split("ENV-NAME ", 1)[1].split()[0])
        elif "ENV-SHA256 " in line:
            name, digest = line.split("ENV-SHA256 ", 1)[1].split()[:2]
            digests[name] = digest
    return EnvRun(result, workdir, names, digests)


def sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def assert_job_got_only_its_env(run: EnvRun) -> None:
    """The job got its task's env and tracker credentials, and nothing of the worker's Airflow."""
    assert run.result.states == {"run": "success"}, run.result.output[-4000:]
    assert run.names, run.result.output[-4000:]
    assert not [n for n in run.names if n.upper().startswith("AIRFLOW")], sorted(run.names)
    assert EXPECTED_NAMES <= run.names, sorted(EXPECTED_NAMES - run.names)
    assert run.digests == {"MLFLOW_TRACKING_PASSWORD": sha256(MLFLOW_SECRET), "API_TOKEN": sha256(JOB_SECRET)}


def files_under(*roots: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for root in roots if root.exists() for p in root.rglob("*") if p.is_file()}


def task_logs(run: EnvRun) -> dict[str, bytes]:
    """The run's output and the task's log files in the Airflow home."""
    home = Path(os.environ["AIRFLOW_HOME"])
    logs = home / "logs" / f"dag_id={run.result.dag_id}" / f"run_id={run.result.run_id}"
    return {"airflow dags test output": run.result.output.encode(), **files_under(logs)}


def slurm_records(job_id: str) -> dict[str, bytes]:
    """What Slurm keeps of a job: ``scontrol show job``, the stored batch script, ``sacct`` (its submit
    line too), each named ``"<command> <job_id>"``."""
    commands = {
        "scontrol show job": ["scontrol", "show", "job", "-d", job_id],
        "scontrol write batch_script": ["scontrol", "write", "batch_script", job_id, "-"],
        "sacct": ["sacct", "-j", job_id, "-P", "-l"],
        "sacct submit line": ["sacct", "-j", job_id, "-P", "-o", "JobID,SubmitLine%-2000,WorkDir,Comment"],
    }
    records = {}
    for where, cmd in commands.items():
        proc = subprocess.run(cmd, capture_output=True, timeout=60)
        assert proc.returncode == 0, (where, proc.stderr)
        records[f"{where} {job_id}"] = proc.stdout
    return records
