"""
### Deploy the model `torchx_pipeline` promotes: a DAG scheduled on the promotion's asset

`torchx_pipeline`'s `promote` task (`TorchXPromoteOperator`) picks the train run with the lowest
final `loss` and emits one event on `model://torchx_pipeline/promoted`; a person can promote another
run by hand from the comparison view. This DAG runs once per promotion: `deploy` copies the promoted
model next to the pipeline's output, under `served/`, with a `promotion.json` saying which run it
came from (`app_handle`), by what (`objective`, `value`) and who promoted it (`promoted_by`).

Triggered by hand, with no asset event, `deploy` fails and says to run `torchx_pipeline`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, task

OUTPUT = os.environ.get("TORCHX_PIPELINE_OUTPUT", str(Path(tempfile.gettempdir()) / "torchx_pipeline"))
# The asset of torchx_pipeline's promote task (assets are matched by URI across DAG files).
PROMOTED_MODEL = Asset("model://torchx_pipeline/promoted")

with DAG(
    dag_id="torchx_promoted_model",
    schedule=[PROMOTED_MODEL],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "example", "assets"],
) as dag:
    dag.doc_md = __doc__

    @task
    def deploy(triggering_asset_events=None, dag_run=None) -> dict:
        """Copy the promoted model to ``served/`` with a note of the promotion."""
        events = triggering_asset_events.get(PROMOTED_MODEL) if triggering_asset_events else None
        if not events:
            raise ValueError(
                f"No event of {PROMOTED_MODEL.uri!r} triggered this run: this DAG deploys the model that "
                "torchx_pipeline promotes. Trigger torchx_pipeline instead; this DAG runs on its promotion."
            )
        promotion = dict(events[-1].extra)
        served = Path(OUTPUT) / "served"
        served.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(promotion["path"], served / "model.pt")
        (served / "promotion.json").write_text(json.dumps(promotion, indent=2))
        print(
            f"deployed {promotion['app_handle']} ({promotion['objective']}={promotion['value']}, "
            f"{promotion['promoted_by']}) to {served / 'model.pt'}",
            flush=True,
        )
        return promotion

    deploy()
