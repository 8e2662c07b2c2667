"""The tracker domain (lineage/stores.py): which job variables carry a tracker's credentials."""

from __future__ import annotations


def test_tracker_set_names_the_env_variables_that_carry_credentials():
    from torchx_airflow.lineage.stores import TrackerBackend, TrackerSet

    mlflow = TrackerBackend(
        "ml",
        "mlflow",
        {"tracking_uri": "http://mlflow:5000", "experiment": "x"},
        job_env={"MLFLOW_TRACKING_USERNAME": "u", "MLFLOW_TRACKING_PASSWORD": "pw-secret-1"},
        secrets=("pw-secret-1",),
    )
    store = TrackerBackend("fs", "fsspec", {"root": "/tmp/runs"})
    names = TrackerSet([mlflow, store]).secret_env_names()
    assert names == {
        "MLFLOW_TRACKING_USERNAME",
        "MLFLOW_TRACKING_PASSWORD",
        "TORCHX_TRACKER_AIRFLOW_STORES_CONFIG",
    }
    assert TrackerSet([store]).secret_env_names() == set()


def test_the_launchers_store_reads_a_run_within_the_bounds_of_a_reader(tmp_path):
    """The store the worker reads a run's results from when it ends (and the views theirs) is bounded
    in total: a run of eight 3 MiB entries, each under the entry bound, gives at most RUN_BYTES of
    them to the result, and the run's own small entries are read first."""
    from torchx_airflow_tracker.fsspec_store import FsspecStore
    from torchx_airflow_tracker.read_limits import RUN_BYTES, ReadLimits

    from torchx_airflow.lineage.recorded import run_results
    from torchx_airflow.lineage.stores import TrackerBackend

    run = "local_cwd://torchx/big"
    writer = FsspecStore(str(tmp_path))
    writer.add_metadata(run, loss=0.5)
    for i in range(8):
        writer.add_metadata(run, **{f"junk{i}": "x" * (3 << 20)})
    store = TrackerBackend("fs", "fsspec", {"root": str(tmp_path)}).open_store()
    assert store.limits == ReadLimits.for_readers()
    results = run_results(store, run)
    assert results["metadata"]["loss"] == 0.5 and results["metrics"] == {"loss": 0.5}
    assert sum(len(str(v)) for v in results["metadata"].values()) <= RUN_BYTES
    assert store.oversized[run]
