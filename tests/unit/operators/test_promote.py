"""Which trackers ``TorchXPromoteOperator`` records the promotion in: the upstream's as its runs
resolved them (templates rendered), not its declared template text. Real tracker connections (from
``AIRFLOW_CONN_*``) on local fsspec stores."""

from __future__ import annotations

import json

import pytest
from airflow.sdk import DAG, Asset

from torchx_airflow.operators.promote import TorchXPromoteOperator
from torchx_airflow.operators.torchx import TorchXOperator

TEMPLATED = "{{ params.trackers }}"


@pytest.fixture
def stores(monkeypatch, tmp_path) -> None:
    """Two fsspec tracker connections, ``fs1`` and ``fs2``."""
    for conn_id in ("fs1", "fs2"):
        extra = {"root": str(tmp_path / conn_id)}
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "torchx_fsspec", "extra": extra})
        )


def _promote(task_id: str, **kwargs: object) -> TorchXPromoteOperator:
    """The promotion of ``train``'s best run by ``loss``."""
    asset = Asset("model://promote_trackers/best")
    return TorchXPromoteOperator(
        task_id=task_id,
        runs_of="train",
        objective="loss",
        mode="min",
        artifact="model",
        asset=asset,
        **kwargs,
    )


def _dag(mapped: bool) -> tuple[TorchXOperator, TorchXPromoteOperator]:
    with DAG("promote_trackers", schedule=None, params={"trackers": "fs2"}):
        common = {"task_id": "train", "component": "utils.echo", "tracker_conn_ids": TEMPLATED}
        if mapped:
            train = TorchXOperator.partial(**common).expand(component_args=[["--msg", "a"], ["--msg", "b"]])
        else:
            train = TorchXOperator(**common)
        promote = _promote("promote")
        train >> promote
    return train, promote


@pytest.mark.parametrize("mapped", [True, False])
def test_the_upstreams_trackers_are_those_its_runs_used(stores, mapped):
    train, promote = _dag(mapped)
    submitted = {0: None, 1: {"roles": [], "tracker_conn_ids": ["fs1"]}}  # map index 0: a cache hit
    trackers = promote._trackers({"params": {"trackers": "fs2"}}, train, submitted, "Task 'promote'")
    assert trackers.conn_ids == ["fs1"]


@pytest.mark.parametrize("mapped", [True, False])
def test_without_a_record_the_upstreams_template_is_rendered_in_this_dag_run(stores, mapped):
    train, promote = _dag(mapped)
    trackers = promote._trackers({"params": {"trackers": "fs2"}}, train, {0: None}, "Task 'promote'")
    assert trackers.conn_ids == ["fs2"]


def test_the_tasks_own_trackers_win(stores):
    train, _ = _dag(False)
    promote = _promote("promote2", tracker_conn_ids=["fs2"])
    submitted = {-1: {"tracker_conn_ids": ["fs1"]}}
    assert promote._trackers({}, train, submitted, "Task 'promote2'").conn_ids == ["fs2"]
