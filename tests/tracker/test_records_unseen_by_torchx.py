"""Cache records are not runs for TorchX's own readers either: a store written by the provider lists
to TorchX 0.7's FsspecTracker and MLflowTracker exactly the runs it holds, no record among them.

(TorchX's MLflowTracker also lists the store's internal claims run: that is a known disagreement of
the readers, tracked on its own; this test is about the cache records.)"""

from __future__ import annotations

import uuid

from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.mlflow_store import MlflowStore

from tests.tracker.torchx_readers import torchx_reads

RUN = "slurm://torchx/train-1"


def _record(store, key: str) -> None:
    store.add_metadata(RUN, lr=0.1)
    store.cache_records.put(key, {"app_handle": RUN, "result": {"state": "SUCCEEDED"}, "big": "x" * 20_000})
    assert store.cache_records.get(key) is not None


def test_torchxs_fsspec_reader_sees_the_runs_and_no_cache_record(tmp_path):
    key = uuid.uuid4().hex * 2
    store = FsspecStore(str(tmp_path / "store"))
    _record(store, key)
    read = torchx_reads(tmp_path / "store", [], [RUN], None)
    assert read["run_ids"] == [RUN]
    assert read["metadata"][RUN] == {"lr": 0.1}


def test_torchxs_mlflow_reader_lists_no_cache_record(mlflow_uri):
    from torchx.tracker.mlflow import MLflowTracker

    key, experiment = uuid.uuid4().hex * 2, f"records-{uuid.uuid4().hex[:8]}"
    store = MlflowStore(mlflow_uri, experiment=experiment)
    _record(store, key)
    reader = MLflowTracker(experiment_name=experiment, tracking_uri=mlflow_uri)
    listed = [str(run_id) for run_id in reader.run_ids()]
    assert RUN in listed
    assert not [run_id for run_id in listed if key in run_id or run_id.startswith(".torchx-cache")], listed
