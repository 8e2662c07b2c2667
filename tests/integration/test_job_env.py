"""local_cwd jobs get their task's env and tracker credentials, never the worker's Airflow variables,
and no secret lands in a file the job or TorchX writes (a real ``airflow dags test`` run)."""

from __future__ import annotations

import pytest

from tests.job_env import SECRETS, assert_job_got_only_its_env, files_under, run_env_dump, task_logs
from tests.secret_search import secret_hits

pytestmark = pytest.mark.integration


def test_local_cwd_job_env_holds_no_worker_airflow_variable_and_no_secret_is_written(
    airflow_db, mlflow_uri, tmp_path
):
    run = run_env_dump("local", airflow_db, mlflow_uri, tmp_path)

    assert_job_got_only_its_env(run)
    assert list((run.workdir / "torchx-logs").rglob("stdout.log")), "local_cwd wrote no log files"
    assert secret_hits(SECRETS, {**files_under(run.workdir), **task_logs(run)}) == []
    assert secret_hits(SECRETS, {"xcom and rendered fields": run.result.stored_text().encode()}) == []
