"""A sweep on Kubernetes through a real DAG run (``airflow dags test``; the shared test cluster of
tests/kubernetes/conftest.py): 9 configurations by successive halving, rungs at 1, 3 and 9 epochs
(tests/kubernetes/dags/torchx_kubernetes_sweep_dags.py), every segment a Volcano Job whose pod the
stand-in runs as a process of this host, so the tracker store and the checkpoints are this host's
files."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.kubernetes.conftest import CFG, STATE

pytestmark = [pytest.mark.usefixtures("k8s_cluster"), pytest.mark.timeout(600)]
DAGS = Path(__file__).resolve().parent / "dags"
BEST = {"lr": 0.03, "width": 16}
# after one epoch (tests/dags/jobs/sweep_trial.py at depth 2): lr=0.1 width=16 leads, then lr=0.03
# at width 16, then its widths 8 and 32 tie (the earlier trial, width 8, goes on); after three,
# lr=0.03 width=16 leads
RUNG_1 = [{"lr": 0.03, "width": 8}, {"lr": 0.03, "width": 16}, {"lr": 0.1, "width": 16}]


def _env(store_root: Path) -> dict[str, str]:
    tracked = {"scheduler": "kubernetes", "cfg": CFG, "trackers": ["k8s_fs"]}
    return {
        "AIRFLOW_CONN_TORCHX_K8S_TRACKED": json.dumps({"conn_type": "torchx", "extra": tracked}),
        "AIRFLOW_CONN_K8S_FS": json.dumps({"conn_type": "torchx_fsspec", "extra": {"root": str(store_root)}}),
    }


def _sweep_jobs(out: Path) -> list[dict]:
    """Every Volcano Job the API server holds whose container was given ``out``: this run's."""
    from kubernetes import client, config

    api = client.CustomObjectsApi(config.new_client_from_config(str(STATE / "kubeconfig")))
    jobs = api.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "default", "jobs")["items"]
    return [j for j in jobs if any(str(out) in a for a in _command(_container(j)))]


def _container(job: dict) -> dict:
    return job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]


def _command(container: dict) -> list[str]:
    return [*(container.get("command") or []), *(container.get("args") or [])]


def _job_env(job: dict) -> dict[str, str]:
    return {v["name"]: v.get("value") for v in _container(job).get("env") or []}


def _pod_phases(jobs: dict[str, dict]) -> set[str]:
    """The phases of the pods of ``jobs`` (by handle), as the API server holds them."""
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(str(STATE / "kubeconfig")))
    names = {j["metadata"]["name"] for j in jobs.values()}
    pods = core.list_namespaced_pod("default").items
    mine = [p for p in pods if (p.metadata.labels or {}).get("volcano.sh/job-name") in names]
    assert len(mine) == len(names), (len(mine), len(names))
    return {p.status.phase for p in mine}


def _asset_events(result) -> list[tuple[str, dict]]:
    with sqlite3.connect(result.db) as conn:
        rows = conn.execute(
            "SELECT a.uri, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE e.source_dag_id = ? AND e.source_run_id = ?",
            (result.dag_id, result.run_id),
        ).fetchall()
    return [(uri, json.loads(extra)) for uri, extra in rows]


def test_a_9_configuration_sweep_runs_each_segment_as_a_volcano_job_and_promotes_the_best(run_dag, tmp_path):
    out = tmp_path / "runs"
    result = run_dag(
        "k8s_sweep", conf={"out": str(out)}, env=_env(tmp_path / "store"), dags_folder=DAGS, timeout=480
    )
    assert result.states.get("sweep.promote") == "success", result.output[-6000:]
    plans = [[p["trial"] for p in result.xcom(f"sweep.plan_{k}")] for k in range(3)]
    assert [len(p) for p in plans] == [9, 3, 1]
    segments = [
        [result.xcom(f"sweep.rung_{k}", map_index=i) for i in range(len(p))] for k, p in enumerate(plans)
    ]
    handles = [
        [result.xcom(f"sweep.rung_{k}", "app_handle", i) for i in range(len(p))] for k, p in enumerate(plans)
    ]
    assert all(s["state"] == "SUCCEEDED" for rung in segments for s in rung)

    # each segment ran as a Volcano Job of its own, the one its task recorded, given its own trial
    jobs = {f"kubernetes://torchx/default:{j['metadata']['name']}": j for j in _sweep_jobs(out)}
    assert sorted(jobs) == sorted(h for rung in handles for h in rung), (handles, sorted(jobs))
    assert len(jobs) == 9 + 3 + 1
    for k in range(3):
        for trial, handle in zip(plans[k], handles[k], strict=True):
            env = _job_env(jobs[handle])
            given = json.loads(env["TORCHX_AIRFLOW_TRIAL"])
            assert (given["id"], given["rung"], given["budget"]) == (trial["id"], k, [1, 3, 9][k])
            assert env.get("TORCHX_AIRFLOW_RESUME_FROM") == trial["resume_from"]

    # a continuing segment resumed from the checkpoint its own trial's segment before recorded, and
    # has that segment alone as its lineage parent
    assert [s["metadata"]["epochs_trained"] for s in segments[0]] == [1] * 9
    for k in (1, 2):
        before = {t["index"]: i for i, t in enumerate(plans[k - 1])}
        start, budget = [1, 3, 9][k - 1 : k + 1]
        for trial, segment in zip(plans[k], segments[k], strict=True):
            i = before[trial["index"]]
            recorded = segments[k - 1][i]["artifacts"]["checkpoint"]["path"]
            assert (
                trial["resume_from"] == recorded == str(out / trial["id"] / f"r{k - 1}" / "checkpoint.json")
            )
            assert trial["source"] == handles[k - 1][i]
            assert segment["sources"] == [handles[k - 1][i]]
            metadata = segment["metadata"]
            assert (metadata["resumed_at"], metadata["epochs_trained"]) == (start, budget - start)

    # each plan kept the best third by what the rung before recorded, a tie going to the earlier trial
    for k in (1, 2):
        recorded = sorted(
            (s["metrics"]["val_loss"], t["index"]) for t, s in zip(plans[k - 1], segments[k - 1], strict=True)
        )
        assert sorted(t["index"] for t in plans[k]) == sorted(index for _, index in recorded[: len(plans[k])])
    assert sorted((t["params"] for t in plans[1]), key=lambda p: (p["lr"], p["width"])) == RUNG_1
    assert plans[2][0]["params"] == BEST

    # the best trial is promoted: one asset event, its model
    promoted = result.xcom("sweep.promote")
    assert promoted["path"] == str(out / plans[2][0]["id"] / "r2" / "model.txt")
    assert [(uri, extra["path"]) for uri, extra in _asset_events(result)] == [
        ("model://k8s_sweep/best", promoted["path"])
    ]

    # nothing left running: no pod's process, every job and pod ended
    assert subprocess.run(["pgrep", "-af", str(out)], capture_output=True, text=True).stdout == ""
    assert {j["status"]["state"]["phase"] for j in _sweep_jobs(out)} == {"Completed"}
    assert _pod_phases(jobs) == {"Succeeded"}
