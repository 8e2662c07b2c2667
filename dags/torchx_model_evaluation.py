"""
### Evaluate every model `torchx_pipeline` publishes: a DAG scheduled on an asset

`torchx_pipeline`'s `evaluate` task maps its `best_model` tracker artifact to the asset
`model://torchx_pipeline/best` (`artifact_assets={"best_model": BEST_MODEL}`). When that TorchX app
SUCCEEDS, the asset event carries the producing run: `app_handle`, `artifact`, `path`, `metadata`
and `try_number`. This DAG runs on that event: `produced_model` reads the newest triggering event,
`holdout` writes fresh data, and `evaluate` scores the published model on it with a TorchX app on
the scheduler that trained it (the scheduler of the producing handle).

Triggered by hand, with no asset event, `produced_model` fails and says to run `torchx_pipeline`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, task

from torchx_airflow.operators.torchx import TorchXOperator

JOBS = Path(__file__).resolve().parent / "jobs"
OUTPUT = os.environ.get("TORCHX_PIPELINE_OUTPUT", str(Path(tempfile.gettempdir()) / "torchx_pipeline"))
RUN_DIR = f"{OUTPUT}/{{{{ dag_run.dag_id }}}}/{{{{ dag_run.run_id | replace(':', '-') }}}}"
# The outlet of torchx_pipeline's evaluate task (assets are matched by URI across DAG files).
BEST_MODEL = Asset("model://torchx_pipeline/best")
MODEL_PATH = "{{ ti.xcom_pull(task_ids='produced_model')['path'] }}"
STEP = {
    "component": "utils.python",
    "scheduler": "{{ ti.xcom_pull(task_ids='produced_model')['scheduler'] }}",
    "deferrable": True,  # waits in the triggerer on slurm; in the worker on local_cwd
    "poll_interval": 1,
}

with DAG(
    dag_id="torchx_model_evaluation",
    schedule=[BEST_MODEL],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "example", "assets"],
) as dag:
    dag.doc_md = __doc__

    @task
    def produced_model(triggering_asset_events=None) -> dict[str, str]:
        """The run that published the model, from the newest event of the asset."""
        events = triggering_asset_events.get(BEST_MODEL) if triggering_asset_events else None
        if not events:
            raise ValueError(
                f"No event of {BEST_MODEL.uri!r} triggered this run: this DAG evaluates the model that "
                "torchx_pipeline publishes. Trigger torchx_pipeline instead; this DAG runs when it succeeds."
            )
        extra = events[-1].extra
        return {
            "app_handle": extra["app_handle"],
            "path": extra["path"],
            "scheduler": extra["app_handle"].split("://", 1)[0],
        }

    model = produced_model()
    holdout = TorchXOperator(
        task_id="holdout",
        component_args=[
            "--script",
            str(JOBS / "prepare.py"),
            "--",
            "--out",
            f"{RUN_DIR}/holdout",
            "--seed",
            "7",
        ],
        **STEP,
    )
    evaluate = TorchXOperator(
        task_id="evaluate",
        component_args=[
            "--script",
            str(JOBS / "evaluate.py"),
            "--",
            "--data",
            "{{ ti.xcom_pull(task_ids='holdout')['artifacts']['data']['path'] }}",
            "--models",
            MODEL_PATH,
            "--out",
            f"{RUN_DIR}/evaluate",
        ],  # fmt: skip
        **STEP,
    )
    model >> holdout >> evaluate
