"""A segment's own policy: what a failed segment spent reaches the sweep (its task pushes no result)."""

from __future__ import annotations

from types import SimpleNamespace

from torchx_airflow.sweeps.segment import SweepTrial
from torchx_airflow.sweeps.tasks import XCOM_SEGMENT_SPENT

COST = {"currency": "EUR", "actual": {"total": 0.25}, "estimate": None}


class PushTI:
    def __init__(self) -> None:
        self.pushed: dict = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


def _closed(result=None, error=None, cost=COST) -> dict:
    ti = PushTI()
    run = SimpleNamespace(result_fields={"cost": cost} if cost else {}, context={"ti": ti})
    SweepTrial({"id": "t0", "index": 0}).closed(run, result=result, error=error)
    return ti.pushed


def test_a_failed_segment_pushes_what_its_job_cost():
    assert _closed(error=RuntimeError("app FAILED")) == {XCOM_SEGMENT_SPENT: {"cost": COST}}


def test_a_segment_with_a_result_or_without_a_cost_pushes_nothing_more():
    assert _closed(result={"state": "SUCCEEDED", "cost": COST}) == {}
    assert _closed(error=RuntimeError("refused before submitting"), cost=None) == {}
