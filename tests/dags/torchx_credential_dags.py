"""The credential matrix: one dry-run task and one run task per way a credential can be configured.

Connections ``cred_<way>`` (tracker connections) and ``torchx_cred`` are defined by
tests/integration/test_credential_matrix.py (local_cwd) and tests/slurm/test_slurm_credentials.py;
``CREDENTIAL_WAYS`` names the ways, ``ENV_SECRETS`` are what the ``env`` way puts in the task's env.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from torchx_airflow.operators.dryrun import TorchXDryRunOperator
from torchx_airflow.operators.torchx import TorchXOperator

JOB = str(Path(__file__).resolve().parent / "jobs" / "credential_job.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
# the password field; URI user info; storage options; the task's env
CREDENTIAL_WAYS = (
    "password",
    "uri_http",
    "uri_https",
    "uri_postgresql",
    "uri_mysql",
    "uri_sftp",
    "options_s3",
    "options_gcs",
    "options_abfs",
    "options_sftp",
    "env",
)
ENV_SECRETS = {
    "API_TOKEN": "env-Api-Token-Secret-5521",
    "DATABASE_URL": "postgresql://app:env-Db-Uri-Secret-5522@db:5432/app",
    "NCCL_SOCKET_IFNAME": "eth0,LD_PRELOAD=/tmp/not-loaded.so",  # a value Slurm's --export would split
}
# what the job (jobs/credential_job.py) writes as an artifact path: user info a job controls
ARTIFACT_PATH = "https://bob:artifact-Url-Secret-5523@models.example/resnet.pt"
ARRIVING = ("API_TOKEN", "DATABASE_URL", "NCCL_SOCKET_IFNAME", "LD_PRELOAD")

for scheduler in ("local", "slurm"):
    with DAG(dag_id=f"credential_matrix_{scheduler}", schedule=None, start_date=START, catchup=False):
        for way in CREDENTIAL_WAYS:
            trackers = ["cred_local"] if way == "env" else [f"cred_{way}"]
            env = ENV_SECRETS if way == "env" else {}
            app = {
                "component": "utils.python",
                "component_args": ["--script", JOB, "--", *ARRIVING],
                "torchx_conn_id": f"torchx_cred_{scheduler}",
                "tracker_conn_ids": trackers,
                "env": env,
            }
            TorchXDryRunOperator(task_id=f"dryrun_{way}", **app)
            TorchXOperator(
                task_id=f"run_{way}",
                **app,
                poll_interval=1,
                tracker_timeout=20,
                retries=0,
            )
