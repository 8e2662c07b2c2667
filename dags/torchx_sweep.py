"""### TorchX sweep: successive halving over the pipeline's PyTorch training job

`prepare` writes the synthetic dataset; `sweep` trains the MLP of `jobs/model.py` with
DistributedDataParallel (`dist.ddp`, 2 processes) for every combination of learning rate and batch
size: each for 1 epoch, the best third on to 3 epochs, the best of those to 9, each continuing from
its own checkpoint (`TORCHX_AIRFLOW_RESUME_FROM`). The trial with the lowest final `loss` is
published to `model://torchx_sweep/best`. Every segment is an ordinary TorchX run: its lineage
(each trial's chain of segments), usage and cost, logs and links; `cache=True` makes an unchanged
rerun train nothing (set `output_roots` to the output directory so continuing segments are cached
too: docs, Sweeps).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, Param

from torchx_airflow.operators.torchx import TorchXOperator
from torchx_airflow.sweeps import torchx_sweep

JOBS = Path(__file__).resolve().parent / "jobs"
OUTPUT = os.environ.get("TORCHX_SWEEP_OUTPUT", str(Path(tempfile.gettempdir()) / "torchx_sweep"))
DATA = "{{ ti.xcom_pull(task_ids='prepare')['artifacts']['data']['path'] }}"

with DAG(
    dag_id="torchx_sweep",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "example", "sweep"],
    params={"output_dir": Param(OUTPUT, type="string", description="Where the jobs write data and models")},
) as dag:
    dag.doc_md = __doc__

    prepare = TorchXOperator(
        task_id="prepare",
        component="utils.python",
        component_args=[
            "--script",
            str(JOBS / "prepare.py"),
            "--",
            "--out",
            "{{ params.output_dir }}/prepare",
        ],
    )

    sweep = torchx_sweep(
        sweep_id="sweep",
        component="dist.ddp",
        component_args=[
            "-j",
            "1x2",
            "--script",
            str(JOBS / "train.py"),
            "--",
            "--data",
            DATA,
            "--lr",
            "{{ trial.lr }}",
            "--batch-size",
            "{{ trial.batch_size }}",
            "--epochs",
            "{{ trial.budget }}",
            "--out",
            "{{ params.output_dir }}/sweep/{{ trial.id }}/r{{ trial.rung }}",
        ],  # fmt: skip
        search_space={"lr": [0.02, 0.05, 0.1, 0.2, 0.5, 1.0], "batch_size": [5, 10, 20]},
        objective="loss",
        mode="min",
        min_budget=1,
        max_budget=9,
        reduction_factor=3,
        promote_to=Asset("model://torchx_sweep/best"),
        artifact="model",
        cache=True,
    )

    prepare >> sweep
