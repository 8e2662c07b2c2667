"""The lineage view's JSON endpoint and page, served by Airflow's own API server app (in process,
with the plugin loaded from its entry point) over real DAG runs: ``airflow dags test`` of
``tx_view_pipeline`` and of ``tx_view_finetune`` (a run of another DAG whose parent is the
pipeline's evaluate run), real TorchX jobs tracking to a local fsspec store whose connection holds a
secret (a ``token`` storage option).

Access: SimpleAuthManager cannot restrict one role to some DAGs, but its multi-team mode can: the
DAGs' bundle belongs to team ``research``; ``ana`` is a viewer in it, ``bob`` a viewer in ``finance``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse

import pytest

pytestmark = pytest.mark.integration

STORE_SECRET = "view-Store-T0ken-0077"
USERS = "admin:admin,ana:viewer:research,bob:viewer:finance"
PASSWORDS = {"admin": "admin-pw", "ana": "ana-pw", "bob": "bob-pw"}
BUNDLE = "dags-folder"


def _conns(store_root) -> dict[str, str]:
    store = {"root": str(store_root), "storage_options": {"token": STORE_SECRET}}
    return {
        "AIRFLOW_CONN_TORCHX_DEFAULT": json.dumps(
            {"conn_type": "torchx", "extra": {"scheduler": "local_cwd", "trackers": ["view_fs"]}}
        ),
        "AIRFLOW_CONN_VIEW_FS": json.dumps({"conn_type": "torchx_fsspec", "extra": store}),
    }


@pytest.fixture(scope="module")
def runs(run_dag, tmp_path_factory):
    """Two real DAG runs; returns (connections env, pipeline result, finetune result)."""
    env = _conns(tmp_path_factory.mktemp("view-store"))
    pipeline = run_dag("tx_view_pipeline", env=env)
    assert pipeline.returncode == 0, pipeline.output[-4000:]
    parent = pipeline.xcom("evaluate", "torchx_run_id")
    finetune = run_dag("tx_view_finetune", conf={"parent": parent}, env=env)
    assert finetune.returncode == 0, finetune.output[-4000:]
    return env, pipeline, finetune


def _assign_bundle_team(team: str | None) -> None:
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.team import Team
    from airflow.utils.session import create_session

    with create_session() as session:
        bundle = session.get(DagBundleModel, BUNDLE)
        if team is None:
            bundle.teams = []
            return
        for name in ("research", "finance"):
            if session.get(Team, name) is None:
                session.add(Team(name=name))
        session.flush()
        bundle.teams = [session.get(Team, team)]


@pytest.fixture(scope="module")
def client(runs, tmp_path_factory):
    """Airflow's API server app, in process, with users of two teams and the runs' connections."""
    from fastapi.testclient import TestClient

    env, _, _ = runs
    passwords = tmp_path_factory.mktemp("auth") / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {
            **env,
            "AIRFLOW__CORE__MULTI_TEAM": "True",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": USERS,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__API_AUTH__JWT_SECRET": "lineage-view-test-secret-" + "x" * 48,
        }.items():
            mp.setenv(name, value)
        _assign_bundle_team("research")
        try:
            from airflow.api_fastapi.app import create_app

            with TestClient(create_app()) as test_client:
                yield test_client
        finally:
            _assign_bundle_team(None)


def _token(client, user: str) -> dict[str, str]:
    reply = client.post("/auth/token", json={"username": user, "password": PASSWORDS[user]})
    assert reply.status_code in (200, 201), reply.text
    return {"Authorization": f"Bearer {reply.json()['access_token']}"}


def _graph(client, dag_id: str, run_id: str, user: str = "admin", **query) -> dict:
    path = f"/torchx/api/lineage/{dag_id}/{urllib.parse.quote(run_id, safe='')}"
    reply = client.get(path, params=query, headers=_token(client, user))
    assert reply.status_code == 200, reply.text
    return reply.json()


def _handles(result) -> dict[str, str]:
    return {
        "prepare": result.xcom("prepare", "torchx_run_id"),
        "train0": result.xcom("train", "torchx_run_id", map_index=0),
        "train1": result.xcom("train", "torchx_run_id", map_index=1),
        "evaluate": result.xcom("evaluate", "torchx_run_id"),
    }


def test_json_graph_of_a_dag_run(runs, client):
    _, pipeline, finetune = runs
    h = _handles(pipeline)
    tuned = finetune.xcom("finetune", "torchx_run_id")
    graph = _graph(client, "tx_view_pipeline", pipeline.run_id, depth=3)
    runs_by_id = {run["id"]: run for run in graph["runs"]}
    assert set(runs_by_id) == {*h.values(), tuned}
    assert {(e["source"], e["target"]) for e in graph["edges"]} == {
        (h["prepare"], h["train0"]),
        (h["prepare"], h["train1"]),
        (h["train0"], h["evaluate"]),
        (h["train1"], h["evaluate"]),
        (h["evaluate"], tuned),
    }
    train1 = runs_by_id[h["train1"]]
    assert train1["in_dag_run"] and train1["label"] == "train [1]"
    assert train1["scheduler"] == "local_cwd" and train1["handle"] == h["train1"]
    assert train1["state"] == "SUCCEEDED" and train1["airflow"]["state"] == "success"
    assert train1["links"]["airflow"] == (
        f"/dags/tx_view_pipeline/runs/{urllib.parse.quote(pipeline.run_id, safe='')}/tasks/train/mapped/1"
    )
    # local_cwd's "UI" is its log directory
    assert train1["links"]["scheduler_ui"] == pipeline.xcom("train", "ui_url", map_index=1)
    assert train1["links"]["scheduler_ui"].startswith("file://")
    artifacts = {a["id"]: a for a in graph["artifacts"]}
    assert artifacts[f"{h['train1']}#model"]["path"] == f"/models/{pipeline.run_id}/lr-0.4.pt"
    assert artifacts[f"{h['prepare']}#data"]["path"] == f"/data/{pipeline.run_id}/data.csv"
    # the descendant in another DAG, with what Airflow knows about its task
    other = runs_by_id[tuned]
    assert not other["in_dag_run"] and other["distance"] == 1
    assert other["airflow"]["dag_id"] == "tx_view_finetune"
    assert other["airflow"]["run_id"] == finetune.run_id and other["airflow"]["state"] == "success"
    assert graph["trackers"] == ["view_fs"]


def test_parents_from_another_dag_to_the_chosen_depth(runs, client):
    _, pipeline, finetune = runs
    h = _handles(pipeline)
    tuned = finetune.xcom("finetune", "torchx_run_id")
    near = _graph(client, "tx_view_finetune", finetune.run_id, depth=1)
    assert {run["id"] for run in near["runs"]} == {tuned, h["evaluate"]}
    assert near["truncated"] is True  # the trains are beyond depth 1
    parent = next(run for run in near["runs"] if run["id"] == h["evaluate"])
    assert parent["distance"] == -1 and parent["airflow"]["dag_id"] == "tx_view_pipeline"
    far = _graph(client, "tx_view_finetune", finetune.run_id, depth=3)
    assert {run["id"] for run in far["runs"]} == {tuned, *h.values()}
    assert far["truncated"] is False


def test_task_instance_selects_its_run(runs, client):
    _, pipeline, _ = runs
    graph = _graph(client, "tx_view_pipeline", pipeline.run_id, task_id="train", map_index=1)
    assert graph["selected"] == [_handles(pipeline)["train1"]]


def test_page_draws_the_graph_and_serves_its_assets(runs, client):
    _, pipeline, _ = runs
    h = _handles(pipeline)
    path = f"/torchx/lineage/tx_view_pipeline/{urllib.parse.quote(pipeline.run_id, safe='')}"
    reply = client.get(path, headers=_token(client, "admin"))
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/html")
    page = reply.text
    assert page.count('<g class="run ') == 5 and page.count('class="edge"') == 5
    for label in ("prepare", "train [0]", "train [1]", "evaluate", "finetune"):
        assert f">{label}<" in page
    assert f"/models/{pipeline.run_id}/lr-0.1.pt" in page and h["evaluate"] in page
    assert '<link rel="stylesheet" href="/torchx/static/lineage.css">' in page
    for asset, kind in (("lineage.css", "text/css"), ("lineage.js", "javascript"), ("lineage.svg", "svg")):
        served = client.get(f"/torchx/static/{asset}")
        assert served.status_code == 200 and kind in served.headers["content-type"], asset


def test_no_connection_secret_in_the_json_or_the_page(runs, client):
    _, pipeline, _ = runs
    graph = _graph(client, "tx_view_pipeline", pipeline.run_id)
    path = f"/torchx/lineage/tx_view_pipeline/{urllib.parse.quote(pipeline.run_id, safe='')}"
    page = client.get(path, headers=_token(client, "admin")).text
    assert graph["runs"] and "<svg" in page
    for text in (json.dumps(graph), page):
        assert STORE_SECRET not in text


def test_a_user_who_cannot_read_the_dag_cannot_read_its_lineage(runs, client):
    _, pipeline, _ = runs
    run = urllib.parse.quote(pipeline.run_id, safe="")
    paths = [f"/torchx/api/lineage/tx_view_pipeline/{run}", f"/torchx/lineage/tx_view_pipeline/{run}"]
    for path in paths:
        assert client.get(path).status_code == 401  # no token, no cookie
        assert client.get(path, headers=_token(client, "bob")).status_code == 403, path
        assert client.get(path, headers=_token(client, "ana")).status_code == 200, path
    # the tab is an iframe: it says why in a page, and shows nothing of the graph
    denied = client.get(paths[1], headers=_token(client, "bob")).text
    assert "not allowed to read this DAG" in denied and "<svg" not in denied
    assert pipeline.xcom("prepare", "torchx_run_id") not in denied
    # the same answer Airflow's own API gives those users for the DAG run
    airflow_path = f"/api/v2/dags/tx_view_pipeline/dagRuns/{run}"
    assert client.get(airflow_path, headers=_token(client, "bob")).status_code == 403
    assert client.get(airflow_path, headers=_token(client, "ana")).status_code == 200


def test_unknown_dag_run_is_a_404_that_says_what_to_check(client):
    reply = client.get("/torchx/api/lineage/tx_view_pipeline/no-such-run", headers=_token(client, "admin"))
    assert reply.status_code == 404
    assert "'no-such-run'" in reply.json()["detail"] and "does not exist" in reply.json()["detail"]


def test_loading_the_plugin_imports_nothing_heavy():
    """Airflow loads plugins in the DAG processor and in every task: only the API server builds the app."""
    code = (
        "import sys; from airflow import plugins_manager; "
        "plugins = {p.name: p for p in plugins_manager._get_plugins()[0]}; "
        "assert 'torchx_lineage' in plugins, sorted(plugins); "
        "heavy = ('torchx_airflow.plugins.app', 'fastapi', 'torchx.schedulers', 'mlflow', 's3fs', 'docker'); "
        "print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr


def test_the_drawing_escapes_text_and_links_only_what_a_browser_opens(tmp_path):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins.graph import AirflowTask, Seed, build_graph
    from torchx_airflow.plugins.render import render_page

    store = FsspecStore(str(tmp_path))
    parent, child = "local_cwd://torchx/a-<b>", "slurm://torchx/7"
    store.add_source(child, parent, "model")
    store.add_artifact(parent, "model", "/m/<script>alert(1)</script>.pt")
    seed = Seed(
        child,
        AirflowTask("d", "r", "train", -1, "success"),
        "SUCCEEDED",
        {"scheduler_ui": "file:///tmp/logs", "mlflow": "http://mlflow:5000/#/experiments/1/runs/2"},
    )
    graph = build_graph([(store, [seed])], depth=2)
    page = render_page(graph, dag_id="d", run_id="r", static_url="/s", json_url="/j")
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'href="http://mlflow:5000/#/experiments/1/runs/2" target="_blank"' in page
    assert "file:///tmp/logs" not in page  # a page cannot open a local directory
    assert 'class="elabel"' in page and ">model<" in page  # the edge is labelled with its artifact


def test_runs_of_a_dag_the_user_cannot_read_keep_only_their_id_and_edges(tmp_path):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins.airflow_runs import enrich_other_runs
    from torchx_airflow.plugins.graph import AirflowTask, Seed, build_graph

    store = FsspecStore(str(tmp_path))
    secret_parent, child = "slurm://torchx/1", "slurm://torchx/2"
    store.add_source(child, secret_parent)
    store.add_metadata(secret_parent, airflow_dag_id="hr_payroll", airflow_run_id="r0", airflow_task_id="t")
    store.add_artifact(secret_parent, "salaries", "/hr/salaries.parquet")
    graph = build_graph([(store, [Seed(child, AirflowTask("d", "r", "train"))])], depth=2)
    assert graph.runs[secret_parent].task.dag_id == "hr_payroll"  # what the tracker knows
    enrich_other_runs(None, graph, readable_dag_ids={"d"})  # nothing to look up in the DB
    hidden = graph.to_dict()
    assert {e["source"] for e in hidden["edges"]} == {secret_parent}
    assert "hr_payroll" not in str(hidden) and "salaries" not in str(hidden)


class UnreachableStore:
    """Stands in for a tracker store whose server is down (an outage cannot be produced here on demand)."""

    def __repr__(self) -> str:
        return "UnreachableStore()"

    def sources(self, run_id):
        raise ConnectionError("store is down")


def test_a_broken_tracker_or_connection_is_a_warning_not_a_failed_view(tmp_path):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins.airflow_runs import TrackedTask, tracker_groups
    from torchx_airflow.plugins.graph import Seed, build_graph

    store = FsspecStore(str(tmp_path))
    store.add_source("slurm://torchx/2", "slurm://torchx/1")
    graph = build_graph(
        [(UnreachableStore(), [Seed("slurm://torchx/9")]), (store, [Seed("slurm://torchx/2")])], depth=2
    )
    assert set(graph.runs) == {"slurm://torchx/1", "slurm://torchx/2"}
    assert graph.warnings == [
        "Tracker store UnreachableStore() could not be read: ConnectionError: store is down"
    ]
    tasks = [
        TrackedTask(Seed("slurm://torchx/3"), tracker_conn_ids=None, torchx_conn_id="no_such_torchx_conn"),
        TrackedTask(Seed("slurm://torchx/4"), tracker_conn_ids=("view_fs",)),
    ]
    groups, warnings = tracker_groups(tasks)
    assert [g.conn_ids for g in groups] == [("view_fs",)]
    (warning,) = warnings
    assert "'no_such_torchx_conn'" in warning and "not shown" in warning
