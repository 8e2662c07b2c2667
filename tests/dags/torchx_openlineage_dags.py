"""DAGs for the OpenLineage and asset tests: a fan-in (one edge with a shared artifact, one without)
and a failing app, each mapping artifacts to assets."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, AssetAlias, Param

from torchx_airflow.operators.torchx import TorchXOperator

JOB = str(Path(__file__).resolve().parents[1] / "jobs" / "openlineage_job.py")
A_OUT = Asset("torchx-test://tx_openlineage/a-out")
B_OUTS = AssetAlias("tx_openlineage_b_outs")
BROKEN_OUT = Asset("torchx-test://tx_openlineage_fail/broken-out")
PARAMS = {
    "out": Param(str(Path(tempfile.gettempdir()) / "tx_openlineage"), type="string"),
    "scheduler": Param("local_cwd", type="string", enum=["local_cwd", "slurm"]),
}
A_PATH = "{{ ti.xcom_pull(task_ids='a')['artifacts']['out']['path'] }}"


def job(task_id: str, *args: str, **kwargs) -> TorchXOperator:
    return TorchXOperator(
        task_id=task_id,
        component="utils.python",
        component_args=["--script", JOB, "--", task_id, "{{ params.out }}", *args],
        scheduler="{{ params.scheduler }}",
        deferrable=True,  # waits in the triggerer on slurm; in the worker on local_cwd
        poll_interval=0.5,
        **kwargs,
    )


with DAG(
    "tx_openlineage",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params=PARAMS,
):
    a = job("a", outlets=[A_OUT], artifact_assets={"out": A_OUT})
    b = job("b", outlets=[B_OUTS], artifact_assets={"out": B_OUTS})
    # join reads a's artifact (named in its arguments) and nothing of b's: fan-in of two TorchX parents
    join = job("join", "--consume", A_PATH)
    [a, b] >> join

with DAG(
    "tx_openlineage_fail",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params=PARAMS,
):
    ok = job("ok")
    broken = job("broken", "--fail", outlets=[BROKEN_OUT], artifact_assets={"out": BROKEN_OUT})
    ok >> broken
