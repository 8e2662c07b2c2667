"""
### TorchX pipeline: prepare → train (a DDP app per learning rate) → evaluate and promote, lineage for free

`prepare` writes a small synthetic dataset; `train` trains a tiny PyTorch MLP on it with
DistributedDataParallel through TorchX's `dist.ddp` component (2 processes: gloo on CPU, NCCL when
a GPU is present), one app per learning rate; `evaluate` loads every trained model and picks the best;
`promote` (`TorchXPromoteOperator`) promotes the train run with the lowest final `loss` to the asset
`model://torchx_pipeline/promoted`, on which `dags/torchx_promoted_model.py` is scheduled.
The job scripts are in `dags/jobs/`. Each calls TorchX's own `AppRun.run_from_env()` (every rank of
a train app does) to record metadata (learning rate) and artifacts (data, model, report), and the
train apps log their loss per epoch (`train_loss`) and at the end (`loss`) with
`torchx_airflow_tracker.metrics`: MLflow metrics on an MLflow tracker, metadata on an fsspec store.
Where all this lands is decided by Airflow: the `trackers` of the `torchx_default` connection
(an fsspec store and an MLflow server, for example).

No lineage code here: the operator turns every DAG edge into a tracker source, so `evaluate` lists
every `train` app as a parent, and each `train` app lists `prepare` (through `train_args`, a plain
Python task). Each app's metadata and artifacts come back as its XCom, which is how `train` finds
the data file and `evaluate` finds the models.

Trigger it from the UI to change the learning rates, the epochs, the data size or the scheduler.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, AssetAlias, Param, task

from torchx_airflow.operators.promote import TorchXPromoteOperator
from torchx_airflow.operators.torchx import TorchXOperator

JOBS = Path(__file__).resolve().parent / "jobs"
OUTPUT = os.environ.get("TORCHX_PIPELINE_OUTPUT", str(Path(tempfile.gettempdir()) / "torchx_pipeline"))
RUN_DIR = "{{ run_dir(params.output_dir, dag_run) }}"
DATA = "{{ ti.xcom_pull(task_ids='prepare')['artifacts']['data']['path'] }}"
MODELS = (
    "{{ ti.xcom_pull(task_ids=['train']) | map(attribute='artifacts') | map(attribute='model')"
    " | map(attribute='path') | join(',') }}"
)

# What the pipeline publishes to other DAGs (dags/torchx_model_evaluation.py is scheduled on BEST_MODEL):
# every trained model, at paths known only at run time, and the model evaluate picks as the best.
TRAINED_MODELS = AssetAlias("torchx_pipeline_models")
BEST_MODEL = Asset("model://torchx_pipeline/best")
# The train run with the lowest final loss (dags/torchx_promoted_model.py is scheduled on it).
PROMOTED_MODEL = Asset("model://torchx_pipeline/promoted")

# Every step: a job script run by utils.python, on the scheduler the run's params name.
STEP = {
    "component": "utils.python",
    "scheduler": "{{ params.scheduler }}",
    "deferrable": True,  # waits in the triggerer on slurm; in the worker on local_cwd
    "poll_interval": 1,
}


def run_dir(output_dir: str, dag_run) -> str:
    """This DAG run's own output directory (also the ``run_dir`` macro of the templates)."""
    return f"{output_dir}/{dag_run.dag_id}/{dag_run.run_id.replace(':', '-')}"


with DAG(
    dag_id="torchx_pipeline",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "example", "lineage"],
    user_defined_macros={"run_dir": run_dir},
    params={
        "learning_rates": Param(
            [0.05, 0.2, 0.5],
            type="array",
            items={"type": "number", "exclusiveMinimum": 0},
            minItems=1,
            description="One train app per learning rate",
        ),
        "epochs": Param(10, type="integer", minimum=1, maximum=10000, description="Training epochs"),
        "rows": Param(200, type="integer", minimum=10, maximum=1000000, description="Rows of data"),
        "scheduler": Param(
            "local_cwd",
            type="string",
            enum=["local_cwd", "slurm"],
            description="TorchX scheduler the apps run on",
        ),
        "output_dir": Param(OUTPUT, type="string", description="Where the jobs write data and models"),
    },
) as dag:
    dag.doc_md = __doc__

    prepare = TorchXOperator(
        task_id="prepare",
        component_args=[
            "--script",
            str(JOBS / "prepare.py"),
            "--",
            "--out",
            f"{RUN_DIR}/prepare",
            "--rows",
            "{{ params.rows }}",
        ],  # fmt: skip
        **STEP,
    )

    @task
    def train_args(params: dict | None = None, ti=None, dag_run=None) -> list[list[str]]:
        """dist.ddp's arguments, one list per learning rate; the data path is prepare's artifact."""
        artifacts = ti.xcom_pull(task_ids="prepare")["artifacts"]
        if "data" not in artifacts:
            raise ValueError(
                "prepare recorded no 'data' artifact: this pipeline passes files through its trackers. "
                "Give the torchx_default connection tracker connections (extra 'trackers', see the "
                "README); scripts/airflow-home.sh sets up torchx_fsspec_default and mlflow_default."
            )
        data = artifacts["data"]["path"]
        out = run_dir(params["output_dir"], dag_run)
        return [
            [
                "-j",
                "1x2",  # one node, two processes (ranks)
                "--cpu",
                "1",
                "--script",
                str(JOBS / "train.py"),
                "--",
                "--data",
                data,
                "--lr",
                str(lr),
                "--epochs",
                str(params["epochs"]),
                "--out",
                f"{out}/train-{i}",
            ]  # fmt: skip
            for i, lr in enumerate(params["learning_rates"])
        ]

    args = train_args()
    train = TorchXOperator.partial(
        task_id="train",
        outlets=[TRAINED_MODELS],
        artifact_assets={"model": TRAINED_MODELS},
        **{**STEP, "component": "dist.ddp"},
    ).expand(component_args=args)

    evaluate = TorchXOperator(
        task_id="evaluate",
        component_args=[
            "--script",
            str(JOBS / "evaluate.py"),
            "--",
            "--data",
            DATA,
            "--models",
            MODELS,
            "--out",
            f"{RUN_DIR}/evaluate",
        ],  # fmt: skip
        outlets=[BEST_MODEL],
        artifact_assets={"best_model": BEST_MODEL},
        **STEP,
    )

    # the best grid point by its final training loss; failed grid points are left out
    promote = TorchXPromoteOperator(
        task_id="promote",
        runs_of="train",
        objective="loss",
        mode="min",
        artifact="model",
        asset=PROMOTED_MODEL,
    )

    prepare >> args
    train >> [evaluate, promote]
