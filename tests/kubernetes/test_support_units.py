"""The Kubernetes support's mapping of Volcano Job objects, on literal objects (no cluster needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from torchx_airflow.schedulers.kubernetes import (
    KubernetesSupport,
    job_reason,
    job_status,
    split_app_id,
)


def _job(phase: str, reason: str = "", message: str = "", tasks: dict | None = None) -> dict:
    state = {
        "phase": phase,
        **({"reason": reason} if reason else {}),
        **({"message": message} if message else {}),
    }
    return {"status": {"state": state, "taskStatusCount": tasks or {}}}


def test_job_status_maps_phases_replicas_and_reason():
    tasks = {"trainer-0": {"phase": {"Running": 1}}, "trainer-1": {"phase": {"Pending": 1}}}
    status = job_status(_job("Running", tasks=tasks))
    assert status.state.name == "RUNNING"
    assert [(r.id, r.state.name) for r in status.roles[0].replicas] == [(0, "RUNNING"), (1, "PENDING")]
    ended = job_status(_job("Terminated", "PodEvicted", "pod x was evicted"))
    assert (ended.state.name, ended.msg) == ("FAILED", "Terminated (PodEvicted: pod x was evicted)")
    assert job_status(_job("Aborted")).state.name == "CANCELLED"
    assert job_status({}).state.name == "UNKNOWN"  # nothing wrote its status yet
    assert job_status(_job("SomethingNew")).state.name == "UNKNOWN"


def test_infrastructure_reasons_are_the_clusters_only():
    support = KubernetesSupport("kubernetes", runner=None)  # type: ignore[arg-type]
    assert (
        support.infrastructure_reason("FAILED", "Terminated (PodEvicted: pod x was evicted)") == "PodEvicted"
    )
    assert support.infrastructure_reason("FAILED", "Failed (NodeLost: its node was lost)") == "NodeLost"
    assert support.infrastructure_reason("FAILED", "Failed (PodFailed: exit code 3)") is None
    assert support.infrastructure_reason("SUCCEEDED", "Completed (PodEvicted)") is None
    assert job_reason("Running") == ""


@pytest.mark.parametrize(
    ("app_id", "parsed"),
    [("ns:job-1", ("ns", "job-1")), ("job-1", None), (":job", None), ("ns:", None), ("a:b:c", None)],
)
def test_app_ids_are_namespace_and_name(app_id, parsed):
    assert split_app_id(app_id) == parsed


def test_resubmitting_tasks_make_volcano_end_an_evicted_job():
    spec = {"maxRetry": 0, "policies": [{"event": "PodEvicted", "action": "RestartJob"}, {"event": "X"}]}
    info = SimpleNamespace(request=SimpleNamespace(resource={"spec": spec}))
    KubernetesSupport("kubernetes", runner=None).leave_resubmission_to_task(info)  # type: ignore[arg-type]
    assert spec["policies"] == [{"event": "PodEvicted", "action": "TerminateJob"}, {"event": "X"}]
    retrying = {"maxRetry": 2}
    info = SimpleNamespace(request=SimpleNamespace(resource={"spec": retrying}))
    KubernetesSupport("kubernetes", runner=None).leave_resubmission_to_task(info)  # type: ignore[arg-type]
    assert "policies" not in retrying  # the app asked Volcano to retry: left as it is
