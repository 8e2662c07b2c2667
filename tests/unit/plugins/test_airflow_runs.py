"""What the view takes from Airflow's records of a DAG run, the parts that need no database: task
pages, the trackers a task used, the seeds built from a task's XComs, the DAGs of other runs."""

from __future__ import annotations

import json

import pytest

from torchx_airflow.plugins.airflow_runs import (
    TrackedTask,
    conn_ids_of,
    other_dag_ids,
    seed_of,
    task_url,
    tracker_groups,
)
from torchx_airflow.plugins.graph import AirflowTask, LineageGraph, RunNode, Seed


def test_a_task_page_quotes_every_part_so_none_can_leave_the_path():
    assert task_url("d", "manual__2026", "train") == "/dags/d/runs/manual__2026/tasks/train"
    assert task_url("d/../x", "r?x=1#y", "t", map_index=3) == (
        "/dags/d%2F..%2Fx/runs/r%3Fx%3D1%23y/tasks/t/mapped/3"
    )


@pytest.mark.parametrize(
    ("rendered", "conn_ids"),
    [
        (None, None),
        ("fs, mlflow,,fs", ("fs", "mlflow")),
        (["fs", " ", "mlflow", "fs"], ("fs", "mlflow")),
        ([], ()),
        (7, None),
    ],
)
def test_rendered_tracker_conn_ids_are_read_in_every_form_a_dag_writes(rendered, conn_ids):
    assert conn_ids_of(rendered) == conn_ids


def test_a_seed_takes_state_links_usage_and_cache_hit_from_the_task_xcoms():
    result = {
        "state": "SUCCEEDED",
        "usage": {"source": "sacct", "elapsed_s": 5},
        "cache_hit": True,
        "cached_from": "slurm://torchx/1",
    }
    xcoms = {
        "torchx_run_id": "airflow://d/r/t",
        "return_value": result,
        "ui_url": "http://slurm/ui",
        "tracker_url": "",
    }
    seed = seed_of("d", "r", "t", 1, "success", xcoms)
    assert seed.run_id == "airflow://d/r/t" and seed.app_state == "SUCCEEDED"
    assert seed.task == AirflowTask("d", "r", "t", 1, "success")
    assert seed.links == {"airflow": "/dags/d/runs/r/tasks/t/mapped/1", "scheduler_ui": "http://slurm/ui"}
    assert seed.usage is not None and seed.usage.elapsed_s == 5
    assert seed.cached_from == "slurm://torchx/1"
    assert (
        seed_of(
            "d", "r", "t", -1, None, {**xcoms, "return_value": {**result, "cache_hit": False}}
        ).cached_from
        is None
    )


def test_the_dag_of_another_runs_run_is_its_recorded_identity_or_its_airflow_id():
    runs = [
        RunNode("slurm://torchx/1", in_dag_run=True, task=AirflowTask("mine", "r", "t")),
        RunNode("slurm://torchx/2", task=AirflowTask("theirs", "r0", "t")),
        RunNode("airflow://ingest/r0/download"),
        RunNode("slurm://torchx/3"),  # no identity recorded: no DAG to check
    ]
    graph = LineageGraph({run.run_id: run for run in runs}, [], depth=1)
    assert other_dag_ids(graph) == {"slurm://torchx/2": "theirs", "airflow://ingest/r0/download": "ingest"}


def test_tasks_are_grouped_by_their_trackers_and_a_broken_torchx_connection_is_a_warning(monkeypatch):
    conn = {"conn_type": "torchx", "extra": {"scheduler": "local_cwd", "trackers": ["fs", "mlflow"]}}
    monkeypatch.setenv("AIRFLOW_CONN_TORCHX_DEFAULT", json.dumps(conn))
    tasks = [
        TrackedTask(Seed("slurm://torchx/1"), tracker_conn_ids=None),  # torchx_default's trackers
        TrackedTask(Seed("slurm://torchx/2"), tracker_conn_ids=("fs", "mlflow")),
        TrackedTask(Seed("slurm://torchx/3"), tracker_conn_ids=("other",)),
        TrackedTask(Seed("slurm://torchx/4"), tracker_conn_ids=()),  # tracking switched off
        TrackedTask(Seed("slurm://torchx/5"), tracker_conn_ids=None, torchx_conn_id="missing_conn"),
    ]
    groups, warnings = tracker_groups(tasks)
    assert [(g.conn_ids, [t.seed.run_id for t in g.tasks]) for g in groups] == [
        (("fs", "mlflow"), ["slurm://torchx/1", "slurm://torchx/2"]),
        (("other",), ["slurm://torchx/3"]),
    ]
    (warning,) = warnings
    assert "'missing_conn'" in warning and "are not shown" in warning


def test_the_views_and_promotion_read_each_store_entry_up_to_a_bound(tmp_path, monkeypatch):
    """The lineage view and manual promotion open stores through the same bound as the comparison
    view: an entry a job wrote bigger than it is skipped, not read into the API server."""
    from torchx_airflow_tracker.fsspec_store import FsspecStore
    from torchx_airflow_tracker.read_limits import ENTRY_BYTES as MAX_METADATA_ENTRY_BYTES
    from torchx_airflow_tracker.read_limits import ReadLimits

    from torchx_airflow.plugins.airflow_runs import open_first_store

    root = tmp_path / "store"
    writer = FsspecStore(str(root))
    writer.add_metadata("local_cwd://torchx/big", loss=0.25)
    writer.add_metadata("local_cwd://torchx/big", junk="x" * (MAX_METADATA_ENTRY_BYTES + 1))
    conn = {"conn_type": "torchx_fsspec", "extra": {"root": str(root)}}
    monkeypatch.setenv("AIRFLOW_CONN_BOUNDED_FS", json.dumps(conn))
    store = open_first_store(["bounded_fs"])
    assert store.limits == ReadLimits.for_readers()
    assert store.metadata("local_cwd://torchx/big") == {"loss": 0.25}
    assert list(store.oversized) == ["local_cwd://torchx/big"]
