"""
### TorchX multi-node: DDP across Slurm nodes, resubmitted and resumed when a node fails or a job is preempted

`prepare` writes the dataset; `train` trains the example MLP with PyTorch DDP on **several Slurm
nodes** (`dist.ddp -j {nodes}x1`: one rank per node, gloo over the nodes' network), waiting in the
triggerer. Every rank prints its node and records itself in the tracker under the one run of the app.

The cluster may take `train`'s job away: a node fails (`NODE_FAIL`), a higher-priority job preempts
it (`PREEMPTED`). That is not the training's failure, so the task does not fail nor use one of its
`retries` (it has none): it submits the job again, up to `infrastructure_retries` times, and the new
job resumes from the last checkpoint the ended one recorded (`TORCHX_AIRFLOW_RESUME_FROM`; the script
saves one every epoch). A job that fails on its own (an exit code, memory, its time limit) fails the
task as usual. The task's result lists every attempt: its job, how it ended, the time it ran.

Runs on the test cluster of `make slurm-up` (partition `multi`: two nodes in network namespaces);
set `partition` for yours. Trackers must be reachable from the nodes: the default is the fsspec store
of `torchx_fsspec_default` on the shared filesystem.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param

from torchx_airflow.operators.torchx import TorchXOperator

JOBS = Path(__file__).resolve().parent / "jobs"
OUTPUT = os.environ.get("TORCHX_PIPELINE_OUTPUT", str(Path(tempfile.gettempdir()) / "torchx_pipeline"))
RUN_DIR = "{{ params.output_dir }}/{{ dag_run.dag_id }}/{{ dag_run.run_id | replace(':', '-') }}"
ON_SLURM = {
    "scheduler": "slurm",
    "cfg": {"partition": "{{ params.partition }}"},
    "torchx_conn_id": "{{ params.torchx_conn_id }}",
    "tracker_conn_ids": ["{{ params.tracker_conn_id }}"],
    "deferrable": True,
    "poll_interval": 2,
}

with DAG(
    dag_id="torchx_multinode",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "example", "slurm", "multi-node"],
    params={
        "nodes": Param(2, type="integer", minimum=1, maximum=64, description="Nodes, one rank each"),
        "epochs": Param(20, type="integer", minimum=1, maximum=10000, description="Training epochs"),
        "epoch_seconds": Param(1.0, type="number", minimum=0, description="Extra seconds per epoch"),
        "partition": Param("multi", type="string", description="Slurm partition of the training"),
        "torchx_conn_id": Param("torchx_default", type="string", description="torchx connection"),
        "tracker_conn_id": Param("torchx_fsspec_default", type="string", description="Tracker store"),
        "output_dir": Param(OUTPUT, type="string", description="Where the jobs write data and models"),
    },
) as dag:
    dag.doc_md = __doc__

    prepare = TorchXOperator(
        task_id="prepare",
        component="utils.python",
        component_args=["--script", str(JOBS / "prepare.py"), "--", "--out", f"{RUN_DIR}/prepare"],
        **ON_SLURM,
    )
    # --8<-- [start:train]
    train = TorchXOperator(
        task_id="train",
        component="dist.ddp",
        component_args=[
            "-j",
            "{{ params.nodes }}x1",
            "--cpu",
            "2",
            "--script",
            str(JOBS / "train.py"),
            "--",
            "--data",
            "{{ ti.xcom_pull(task_ids='prepare')['artifacts']['data']['path'] }}",
            "--lr",
            "0.2",
            "--epochs",
            "{{ params.epochs }}",
            "--epoch-seconds",
            "{{ params.epoch_seconds }}",
            "--out",
            f"{RUN_DIR}/train",
        ],  # fmt: skip
        retries=0,  # a node failure or a preemption is not a retry: see infrastructure_retries
        infrastructure_retries=3,
        checkpoint_artifact="checkpoint",  # what train.py records every epoch (the default name)
        **ON_SLURM,
    )
    # --8<-- [end:train]
    prepare >> train
