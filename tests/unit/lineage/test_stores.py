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
