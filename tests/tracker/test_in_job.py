"""A real TorchX job on local_cwd calls AppRun.run_from_env(); both stores hold what it wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torchx.components.utils import python
from torchx.runner import get_runner
from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.mlflow_store import MlflowStore

JOB = str(Path(__file__).resolve().parents[1] / "jobs" / "tracked_job.py")


@pytest.mark.integration
def test_job_writes_metadata_and_artifacts_to_both_stores(tmp_path, mlflow_uri):
    fs_root, model = str(tmp_path / "store"), str(tmp_path / "model.txt")
    app = python(model, "0.5", script=JOB)
    app.roles[0].env.update(
        {
            "TORCHX_TRACKERS": "airflow_fsspec,airflow_mlflow",
            "TORCHX_TRACKER_AIRFLOW_FSSPEC_CONFIG": json.dumps({"root": fs_root}),
            "TORCHX_TRACKER_AIRFLOW_MLFLOW_CONFIG": json.dumps(
                {"tracking_uri": mlflow_uri, "experiment": "in-job"}
            ),
            "TORCHX_PARENT_RUN_ID": "airflow://pipeline/run-1/prepare",
        }
    )
    with get_runner() as runner:
        handle = runner.run(app, "local_cwd")
        status = runner.wait(handle, wait_interval=0.2)
        assert status.state.name == "SUCCEEDED", status
        output = "".join(runner.log_lines(handle, "python", 0))
        runner.close()
    assert f"tracked {handle} with 2 backends" in output

    for store in (FsspecStore(fs_root), MlflowStore(mlflow_uri, "in-job")):
        assert store.metadata(handle) == {"lr": 0.5, "loss": 0.125, "rank": 0}
        artifact = store.artifacts(handle)["model"]
        assert (artifact.path, artifact.metadata) == (model, {"format": "txt"})
        assert store.lineage(handle).parent_ids == ["airflow://pipeline/run-1/prepare"]
        assert list(store.run_ids(parent_run_id="airflow://pipeline/run-1/prepare")) == [handle]
