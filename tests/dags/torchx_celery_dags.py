"""DAGs for the CeleryExecutor tests (tests/e2e/test_celery_rest.py, test_celery_kills.py): the
pipeline's ``prepare`` step, then a ``train`` step with one retry that waits for its Slurm job in the
worker (``celery_reattach``) or in the triggerer (``celery_reattach_deferred``). When the worker
running ``train`` dies or is stopped, the retry runs on another worker and reattaches to the job.

Both steps run on Slurm through ``torchx_default`` (so its trackers record them and the edge between
them); ``seconds`` in the run's conf is how long the train job runs.

``celery_sweep``: a sweep of 9 configurations (``lr`` x ``width``) by successive halving, rungs at 1, 3
and 9 epochs (9, 3 and 1 segments), each segment one Slurm job of 2 CPUs in the partition ``multi``,
whose two nodes hold one such job each (scripts/slurm/nodes.sh), waiting in the worker, with one
retry. The jobs track to the fsspec store only (the stack's MLflow server listens on this host's
loopback, which a node's network namespace does not reach). ``out`` (the run's conf) is where the
trials write; a segment's job waits while ``<out>/hold/<trial id>-r<rung>`` exists
(tests/dags/jobs/sweep_trial.py).
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, Param

from torchx_airflow.operators.torchx import TorchXOperator
from torchx_airflow.sweeps import torchx_sweep

PREPARE = str(Path(__file__).resolve().parents[2] / "dags" / "jobs" / "prepare.py")
TRAIN = str(Path(__file__).resolve().parent / "jobs" / "slow_train.py")
TRIAL = str(Path(__file__).resolve().parent / "jobs" / "sweep_trial.py")
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


with DAG(
    dag_id="celery_sweep",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "celery-tests"],
    params={"out": Param(f"{OUTPUT}/celery_sweep", type="string")},
    doc_md="A sweep of 9 configurations on Slurm's two nodes (this module's docstring).",
):
    torchx_sweep(
        sweep_id="sweep",
        component="utils.python",
        component_args=[
            "--cpu", "2", "--script", TRIAL, "--",
            "--lr", "{{ trial.lr }}", "--width", "{{ trial.width }}", "--depth", "2",
            "--out", "{{ params.out }}/{{ trial.id }}/r{{ trial.rung }}", "--hold", "{{ params.out }}/hold",
        ],
        search_space={"lr": [0.01, 0.03, 0.1], "width": [8, 16, 32]},
        objective="val_loss",
        mode="min",
        min_budget=1,
        max_budget=9,
        reduction_factor=3,
        promote_to=Asset("model://celery_sweep/best"),
        artifact="model",
        scheduler="slurm",
        # each segment's job says which it is in its Slurm comment (the provider adds its submission mark)
        cfg={"partition": "multi", "comment": "celery-sweep:{{ trial.id }}-r{{ trial.rung }}"},
        tracker_conn_ids=["torchx_fsspec_default"],
        deferrable=False,
        poll_interval=1,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )  # fmt: skip
