"""Slurm jobs get their task's env and tracker credentials, never the worker's Airflow variables;
no secret is in the batch script, its ``set -x`` trace, ``scontrol``, ``sacct`` or any file under the
job's work dir (a real ``airflow dags test`` run on the cluster)."""

from __future__ import annotations

import pytest

from tests.job_env import (
    SECRETS,
    assert_job_got_only_its_env,
    files_under,
    run_env_dump,
    slurm_records,
    task_logs,
)
from tests.secret_search import secret_hits

pytestmark = pytest.mark.integration


def test_slurm_job_env_holds_no_worker_airflow_variable_and_no_secret_is_written(
    slurm_cluster, airflow_db, mlflow_uri, tmp_path
):
    run = run_env_dump("slurm", airflow_db, mlflow_uri, tmp_path)

    assert_job_got_only_its_env(run)
    job_id = run.result.xcom("run", key="app_handle").rsplit("/", 1)[1]
    records = {where.rsplit(" ", 1)[0]: text for where, text in slurm_records(job_id).items()}
    assert b"srun" in records["scontrol write batch_script"]  # the stored script was read
    assert b"PLAIN_SETTING=visible" in records["scontrol write batch_script"]  # plain env stays there
    outputs = files_under(run.workdir)
    assert f"{run.workdir}/slurm-{job_id}.out" in outputs  # the batch script's set -x trace
    assert secret_hits(SECRETS, {**outputs, **task_logs(run), **records}) == []
    assert secret_hits(SECRETS, {"xcom and rendered fields": run.result.stored_text().encode()}) == []
