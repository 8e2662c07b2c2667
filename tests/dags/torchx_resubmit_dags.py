"""DAGs for tests/slurm/test_slurm_resubmission.py: the example training (dags/jobs/train.py, which
checkpoints every epoch and resumes from ``TORCHX_AIRFLOW_RESUME_FROM``) on the multi-node cluster's
preemptible partition ``multi``, with ``retries=0``: a job the cluster ends is resubmitted by the task
itself, within its ``infrastructure_retries``, never by an Airflow retry.

Connections (the test defines them): ``torchx_multi`` (slurm, partition ``multi``; ``torchx_multi_priced``
the same with a price table) and ``resub_fs``
(an fsspec tracker store, where the checkpoints are recorded). ``data``, ``out``, ``epochs`` and
``epoch_seconds`` come from the run's conf.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from torchx_airflow.operators.torchx import TorchXOperator

REPO = Path(__file__).resolve().parents[2]
TRAIN = str(REPO / "dags" / "jobs" / "train.py")
COUNTER = str(Path(__file__).resolve().parent / "jobs" / "counter.py")
CHECKPOINT_WHERE = str(REPO / "tests" / "jobs" / "checkpoint_where_job.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
TRAIN_ARGS = [
    "-j", "1x1", "--cpu", "2", "--script", TRAIN, "--",
    "--data", "{{ dag_run.conf['data'] }}",
    "--lr", "0.2",
    "--epochs", "{{ dag_run.conf.get('epochs', 8) }}",
    "--epoch-seconds", "{{ dag_run.conf.get('epoch_seconds', 4) }}",
    "--out", "{{ dag_run.conf['out'] }}",
]  # fmt: skip


def _dag(dag_id: str) -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["torchx", "slurm-tests"])


for deferrable in (False, True):
    with _dag(f"resubmit_train_{'deferred' if deferrable else 'sync'}"):
        TorchXOperator(
            task_id="train",
            component="dist.ddp",
            component_args=TRAIN_ARGS,
            torchx_conn_id="torchx_multi",
            tracker_conn_ids=["resub_fs"],
            deferrable=deferrable,
            poll_interval=1,
            retries=0,
        )

# max_cost bounds the attempts of a try together: each job is estimated at 20 (2 CPUs x 10 s at 1 per
# CPU-second on ``torchx_multi_priced``), under max_cost 30; a first attempt that ran 10 s or more
# before the cluster ended it leaves no room for a second.
with _dag("resubmit_train_capped"):
    TorchXOperator(
        task_id="train",
        component="dist.ddp",
        component_args=TRAIN_ARGS,
        torchx_conn_id="torchx_multi_priced",
        tracker_conn_ids=["resub_fs"],
        max_cost=30.0,
        expected_duration=10.0,
        poll_interval=1,
        retries=0,
    )

# A job that fails for its own reasons: exit code 1, or its time limit (the cfg's `time`, minutes).
with _dag("resubmit_user_failure"):
    TorchXOperator(
        task_id="run",
        component="utils.python",
        component_args=[
            "--script",
            COUNTER,
            "--",
            "--seconds",
            "{{ dag_run.conf.get('seconds', 3) }}",
            "--exit-code",
            "{{ dag_run.conf.get('exit_code', 0) }}",
        ],  # fmt: skip
        torchx_conn_id="torchx_multi",
        cfg={"time": "{{ dag_run.conf.get('time', '10') }}"},
        tracker_conn_ids=[],
        poll_interval=1,
        retries=0,
    )

# A resubmitted job resumes only from a checkpoint under the task's output roots (here the directory
# its ``out`` argument names): the job records its checkpoint there (``where: inside``) or in a directory
# no argument names (``where: outside``), and reports what its next attempt was given.
with _dag("resubmit_checkpoint_where"):
    TorchXOperator(
        task_id="run",
        component="utils.python",
        component_args=[
            "--script",
            CHECKPOINT_WHERE,
            "--",
            "--out",
            "{{ dag_run.conf['out'] }}",
            "--where",
            "{{ dag_run.conf['where'] }}",
        ],  # fmt: skip
        torchx_conn_id="torchx_multi",
        tracker_conn_ids=["resub_fs"],
        deferrable=False,
        poll_interval=1,
        retries=0,
    )
