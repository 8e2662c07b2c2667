"""The credential matrix on the Slurm cluster: every way a credential can be configured
(tests/credential_matrix.py), one real ``airflow dags test`` of ``credential_matrix_slurm``, then every
place searched for every secret in clear, URL-encoded and inside base64 (tests/secret_search.py),
with the places Slurm adds: the stored batch script, ``scontrol show job``, ``sacct`` (its submit
line too) and the ``slurm-<job>.out`` files under the work dir. Target: 0 found."""

from __future__ import annotations

import pytest

from tests.credential_matrix import (
    RUNS,
    assert_env_arrived_intact,
    assert_nothing_found,
    connections,
    expected_states,
    places,
    run_matrix,
)
from tests.job_env import slurm_records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def matrix(slurm_cluster, airflow_db, mlflow_uri, s3_endpoint, tmp_path_factory):
    work = tmp_path_factory.mktemp("credential-matrix-slurm")
    store = tmp_path_factory.mktemp("credential-store-slurm")
    env = connections(mlflow_uri, s3_endpoint, store, work / "work")
    return run_matrix("slurm", airflow_db, env, work)


def test_every_task_ends_as_its_store_allows_on_slurm(matrix):
    assert matrix.result.states == expected_states(), matrix.result.output[-6000:]


def test_no_secret_in_any_log_xcom_job_output_event_or_slurm_record(matrix):
    job_ids = [matrix.result.xcom(f"run_{way}", key="app_handle").rsplit("/", 1)[1] for way in sorted(RUNS)]
    extra: dict[str, bytes] = {}
    for job_id in job_ids:
        extra |= slurm_records(job_id)
    scripts = [text for where, text in extra.items() if where.startswith("scontrol write batch_script")]
    assert len(scripts) == len(RUNS) and all(b"srun" in script for script in scripts)  # really read
    assert_nothing_found(places(matrix, extra))


def test_the_slurm_job_gets_its_credentials_intact(matrix):
    """A ',' value (which srun --export would cut into more variables) arrives whole on Slurm too."""
    assert_env_arrived_intact(matrix)
