"""DAGs for the CeleryExecutor tests (tests/e2e/test_celery_rest.py, test_celery_kills.py): the
pipeline's ``prepare`` step, then a ``train`` step with one retry that waits for its Slurm job in the
worker (``celery_reattach``) or in the triggerer (``celery_reattach_deferred``). When the worker
running ``train`` dies or is stopped, the retry runs on another worker and reattaches to the job.

Both steps run on Slurm through ``torchx_default`` (so its trackers record them and the edge between
them); ``seconds`` in the run's conf is how long the train job runs.
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from torchx_airflow.operators.torchx import TorchXOperator

PREPARE = str(Path(__file__).resolve().parents[2] / "dags" / "jobs" / "prepare.py")
TRAIN = str(Path(__file__).resolve().parent / "jobs" / "slow_train.py")
OUTPUT = os.environ.get("TORCHX_PIPELINE_OUTPUT", str(Path(tempfile.gettempdir()) / "torchx_pipeline"))
RUN_DIR = OUTPUT + "/{{ dag.dag_id }}/{{ run_id | replace(':', '-') }}"
DATA = "{{ ti.xcom_pull(task_ids='prepare')['artifacts']['data']['path'] }}"
TRAIN_ARGS = [
    "--script", TRAIN, "--",
    "--seconds", "{{ dag_run.conf.get('seconds', 3) }}",
    "--data", DATA,
    "--out", f"{RUN_DIR}/train",
]  # fmt: skip
STEP = {"component": "utils.python", "scheduler": "slurm", "poll_interval": 1}

# ``train`` waits in the worker, or in the triggerer (its resume then runs on a worker)
for dag_id, train_deferrable, doc in (
    ("celery_reattach", False, __doc__),
    (
        "celery_reattach_deferred",
        True,
        "The same two steps, ``train`` waiting in the triggerer: its resume runs on a worker.",
    ),
):
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        tags=["torchx", "celery-tests"],
        doc_md=doc,
    ):
        prepare = TorchXOperator(
            task_id="prepare",
            component_args=["--script", PREPARE, "--", "--out", f"{RUN_DIR}/prepare", "--rows", "25"],
            deferrable=True,
            **STEP,
        )
        train = TorchXOperator(
            task_id="train",
            component_args=TRAIN_ARGS,
            deferrable=train_deferrable,
            retries=1,
            retry_delay=timedelta(seconds=1),
            **STEP,
        )
        prepare >> train
