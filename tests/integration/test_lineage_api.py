"""The lineage view's JSON endpoint and page, served by Airflow's own API server app (in process,
with the plugin loaded from its entry point) over real DAG runs: ``airflow dags test`` of
``tx_view_pipeline`` and of ``tx_view_finetune`` (a run of another DAG whose parent is the
pipeline's evaluate run), real TorchX jobs tracking to a local fsspec store whose connection holds a
secret (a ``token`` storage option).

Access: SimpleAuthManager cannot restrict one role to some DAGs, but its multi-team mode can: the
pipeline's bundle belongs to team ``research``, the finetune DAG's bundle to ``finance``; ``ana`` is a
viewer in research, ``bob`` in finance. SimpleAuthManager grants a viewer every kind of DAG
information; ``EntityAuthManager`` (below) withholds XComs from ``carol`` and task instances from
``dave``, as FAB or Keycloak roles can, so the view's checks of those are tested too.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
import urllib.parse
from typing import Any

import pytest

pytestmark = pytest.mark.integration

STORE_SECRET = "view-Store-T0ken-0077"
USERS = "admin:admin,ana:viewer:research,bob:viewer:finance,carol:viewer:research,dave:viewer:research"
PASSWORDS = {"admin": "admin-pw", "ana": "ana-pw", "bob": "bob-pw", "carol": "carol-pw", "dave": "dave-pw"}
BUNDLE = "dags-folder"
FINANCE_BUNDLE = "finance-dags"
PRICES = {"cpu_hour": 0.05, "mem_gb_hour": 0.01, "currency": "USD"}


def _conns(store_root) -> dict[str, str]:
    store = {"root": str(store_root), "storage_options": {"token": STORE_SECRET}}
    return {
        "AIRFLOW_CONN_TORCHX_DEFAULT": json.dumps(
            {
                "conn_type": "torchx",
                "extra": {"scheduler": "local_cwd", "trackers": ["view_fs"], "prices": PRICES},
            }
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


def _entity_auth_manager():
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    class EntityAuthManager(SimpleAuthManager):
        """SimpleAuthManager with per-entity rules for two viewers (FAB and Keycloak have such roles)."""

        DENIED = {"carol": DagAccessEntity.XCOM, "dave": DagAccessEntity.TASK_INSTANCE}

        def is_authorized_dag(self, *, method, user, access_entity=None, details=None):
            if access_entity is not None and self.DENIED.get(user.username) == access_entity:
                return False
            return super().is_authorized_dag(
                method=method, user=user, access_entity=access_entity, details=details
            )

    return EntityAuthManager


EntityAuthManager = None  # built on first use: importing Airflow's auth managers is slow


def _assign_bundle_teams(teams: bool) -> None:
    """The pipeline's bundle to team research, the finetune DAG's to finance (or both back)."""
    from airflow.models.dag import DagModel, clear_team_name_cache
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.team import Team
    from airflow.utils.session import create_session

    clear_team_name_cache()
    with create_session() as session:
        bundle = session.get(DagBundleModel, BUNDLE)
        finance = session.get(DagBundleModel, FINANCE_BUNDLE)
        if finance is None:
            finance = DagBundleModel(name=FINANCE_BUNDLE)
            session.add(finance)
        finetune = session.get(DagModel, "tx_view_finetune")
        if not teams:
            bundle.teams, finance.teams, finetune.bundle_name = [], [], BUNDLE
            return
        for name in ("research", "finance"):
            if session.get(Team, name) is None:
                session.add(Team(name=name))
        session.flush()
        bundle.teams = [session.get(Team, "research")]
        finance.teams = [session.get(Team, "finance")]
        finetune.bundle_name = FINANCE_BUNDLE


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
            "AIRFLOW__CORE__AUTH_MANAGER": f"{__name__}.EntityAuthManager",
        }.items():
            mp.setenv(name, value)
        global EntityAuthManager
        EntityAuthManager = _entity_auth_manager()
        _assign_bundle_teams(True)
        try:
            from airflow.api_fastapi.app import _AuthManagerState, create_app

            with TestClient(create_app()) as test_client:
                yield test_client
        finally:
            _assign_bundle_teams(False)
            _AuthManagerState.instance = None  # the next app builds the configured auth manager


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


def test_each_run_shows_its_usage_and_the_header_their_sum(runs, client):
    from torchx_airflow.plugins.usage_view import total_text

    _, pipeline, finetune = runs
    graph = _graph(client, "tx_view_pipeline", pipeline.run_id, depth=3)
    own = [run for run in graph["runs"] if run["in_dag_run"]]
    assert len(own) == 4
    for run in own:
        airflow = run["airflow"]
        result = pipeline.xcom(airflow["task_id"], map_index=airflow["map_index"])
        usage = run["usage"]
        assert usage["source"] == "process" and usage["elapsed_s"] == result["usage"]["elapsed_s"]
        assert usage["cpu_time_s"] == result["usage"]["cpu_time_s"]
        assert usage["cpu_hours"] == result["usage"]["totals"]["cpu_hours"]
        assert usage["cost"] == result["cost"]["actual"]["total"] and usage["currency"] == "USD"
    total = graph["usage_total"]
    assert total["runs"] == total["runs_with_usage"] == 4
    for key in ("elapsed_s", "cpu_time_s", "cpu_hours", "mem_gb_hours"):
        assert total[key] == pytest.approx(sum(run["usage"][key] for run in own), rel=1e-12), key
    assert total["cost"] == {"USD": pytest.approx(sum(run["usage"]["cost"] for run in own), rel=1e-12)}
    # a run of another DAG run shows its usage, from the tracker's metadata, and is not in the sum
    other = next(run for run in graph["runs"] if not run["in_dag_run"])
    assert other["usage"]["elapsed_s"] == finetune.xcom("finetune")["usage"]["elapsed_s"]
    path = f"/torchx/lineage/tx_view_pipeline/{urllib.parse.quote(pipeline.run_id, safe='')}"
    page = client.get(path, headers=_token(client, "admin")).text
    assert f'<div class="stats usage-total">{html.escape(total_text(total))}</div>' in page
    assert page.count('<text class="usage"') == 5


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


def _paths(dag_id: str, run_id: str) -> list[str]:
    run = urllib.parse.quote(run_id, safe="")
    return [f"/torchx/api/lineage/{dag_id}/{run}", f"/torchx/lineage/{dag_id}/{run}"]


def test_the_view_needs_xcom_and_task_instance_access_as_airflows_own_endpoints(runs, client):
    _, pipeline, _ = runs
    run = urllib.parse.quote(pipeline.run_id, safe="")
    dag_run = f"/api/v2/dags/tx_view_pipeline/dagRuns/{run}"
    airflow_paths = {
        "carol": f"{dag_run}/taskInstances/evaluate/xcomEntries",  # no XCom access
        "dave": f"{dag_run}/taskInstances",  # no task instance access
    }
    for user, airflow_path in airflow_paths.items():
        headers = _token(client, user)
        assert client.get(dag_run, headers=headers).status_code == 200  # may read the DAG run
        assert client.get(airflow_path, headers=headers).status_code == 403
        for path in _paths("tx_view_pipeline", pipeline.run_id):
            reply = client.get(path, headers=headers)
            assert reply.status_code == 403, (user, path)
            assert pipeline.xcom("evaluate", "torchx_run_id") not in reply.text


def _shown(client, dag_id: str, run_id: str, user: str) -> tuple[dict, str]:
    graph = _graph(client, dag_id, run_id, user=user, depth=3)
    page = client.get(_paths(dag_id, run_id)[1], headers=_token(client, user))
    assert page.status_code == 200
    return graph, page.text


def test_runs_of_a_dag_of_another_team_are_opaque_in_the_json_and_the_page(runs, client):
    _, pipeline, finetune = runs
    h = _handles(pipeline)
    tuned = finetune.xcom("finetune", "torchx_run_id")
    # ana (research) reads the pipeline: its descendant in the finance team's DAG is opaque
    graph, page = _shown(client, "tx_view_pipeline", pipeline.run_id, "ana")
    hidden = [run for run in graph["runs"] if run["hidden"]]
    assert {run["id"] for run in graph["runs"]} == {*h.values(), hidden[0]["id"]} and len(hidden) == 1
    assert hidden[0]["label"] == "run in a DAG you cannot see" and hidden[0]["airflow"] is None
    assert {"source": h["evaluate"], "target": hidden[0]["id"], "artifact_names": []} in graph["edges"]
    for text in (json.dumps(graph), page):
        assert tuned not in text and "tx_view_finetune" not in text and finetune.run_id not in text
    assert "run in a DAG you cannot see" in page
    # bob (finance) reads the finetune run: the pipeline's four runs are opaque
    graph, page = _shown(client, "tx_view_finetune", finetune.run_id, "bob")
    assert [run["id"] for run in graph["runs"] if not run["hidden"]] == [tuned]
    assert len(graph["runs"]) == 5 and len(graph["edges"]) == 5
    assert {artifact["run"] for artifact in graph["artifacts"]} <= {tuned}
    for text in (json.dumps(graph), page):
        assert "tx_view_pipeline" not in text and pipeline.run_id not in text
        assert not [handle for handle in h.values() if handle in text]
    # admin sees everything
    graph, _ = _shown(client, "tx_view_finetune", finetune.run_id, "admin")
    assert {run["id"] for run in graph["runs"]} == {tuned, *h.values()}


def test_concurrent_views_are_bounded_and_the_one_over_is_told_to_retry(runs, client, monkeypatch):
    from contextlib import ExitStack

    from torchx_airflow.plugins.app import LIMITER

    _, pipeline, _ = runs
    monkeypatch.setattr(LIMITER, "queue_seconds", 0.2)
    headers = _token(client, "admin")
    with ExitStack() as busy:
        for _ in range(LIMITER.slots):  # as many views as the server reads at once
            busy.enter_context(LIMITER.slot())
        for path in _paths("tx_view_pipeline", pipeline.run_id):
            reply = client.get(path, headers=headers)
            assert reply.status_code == 503 and reply.headers["retry-after"] == "5", path
            assert "The lineage view is busy: 4 views are being read already" in reply.text
    assert client.get(_paths("tx_view_pipeline", pipeline.run_id)[0], headers=headers).status_code == 200


def test_a_secret_in_an_artifact_path_is_masked_before_the_page_is_escaped(runs, client):
    from airflow.sdk.log import mask_secret
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    env, pipeline, _ = runs
    secret = 'Pw&<Lineage>"Q-0091'
    mask_secret(secret)  # as a connection's secret is, in the API server's process
    root = json.loads(env["AIRFLOW_CONN_VIEW_FS"])["extra"]["root"]
    evaluate = pipeline.xcom("evaluate", "torchx_run_id")
    FsspecStore(root).add_artifact(evaluate, "report", f"https://bob:hunter2@reports.example/{secret}.html")
    graph, page = _shown(client, "tx_view_pipeline", pipeline.run_id, "admin")
    path = next(a["path"] for a in graph["artifacts"] if a["name"] == "report")
    assert path == "https://reports.example/***.html"
    for text in (json.dumps(graph), page):
        assert secret not in text and html.escape(secret) not in text and "Lineage&gt;" not in text
        assert "hunter2" not in text
    assert "https://reports.example/***.html" in page


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


def test_a_cache_hit_is_drawn_as_cached_from_the_earlier_run(tmp_path):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins.airflow_runs import seed_of
    from torchx_airflow.plugins.graph import build_graph
    from torchx_airflow.plugins.render import render_page

    store = FsspecStore(str(tmp_path))
    earlier, hit, later_hit = "slurm://torchx/train-1", "airflow://d/r2/train", "airflow://d2/r3/score"
    store.add_source(hit, earlier)
    store.add_source(later_hit, hit)  # a hit of another DAG run: known from its metadata only
    store.add_metadata(later_hit, airflow_dag_id="d2", airflow_run_id="r3", airflow_task_id="score",
                       airflow_cached_from="slurm://torchx/score-0")  # fmt: skip
    result = {"state": "SUCCEEDED", "cache_hit": True, "cached_from": earlier, "app_handle": earlier}
    seed = seed_of("d", "r2", "train", -1, "success", {"torchx_run_id": hit, "return_value": result})
    graph = build_graph([(store, [seed])], depth=2)
    runs = {run["id"]: run for run in graph.to_dict()["runs"]}
    assert runs[hit]["cached_from"] == earlier and runs[later_hit]["cached_from"] == "slurm://torchx/score-0"
    assert runs[earlier]["cached_from"] is None
    page = render_page(graph, dag_id="d", run_id="r2", static_url="/s", json_url="/j")
    assert page.count('class="run st-ok seed cached"') == 1 and page.count(' cached"') == 2
    assert f"↺ cached from {earlier}" in page


def test_runs_of_a_dag_the_user_cannot_read_are_opaque_nodes(tmp_path):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins.airflow_runs import enrich_other_runs
    from torchx_airflow.plugins.graph import AirflowTask, Seed, build_graph
    from torchx_airflow.plugins.render import render_page

    store = FsspecStore(str(tmp_path))
    secret_parent, child = "slurm://torchx/hr_payroll-t-1", "slurm://torchx/2"
    python_task = "airflow://hr_payroll/r0/export"  # a tracked Python task: its id names its DAG
    store.add_source(child, secret_parent, "salaries")
    store.add_source(secret_parent, python_task, "raw")
    store.add_metadata(secret_parent, airflow_dag_id="hr_payroll", airflow_run_id="r0", airflow_task_id="t")
    store.add_artifact(secret_parent, "salaries", "/hr/salaries.parquet")
    graph = build_graph([(store, [Seed(child, AirflowTask("d", "r", "train"))])], depth=3)
    assert graph.runs[secret_parent].task.dag_id == "hr_payroll"  # what the tracker knows
    enrich_other_runs(None, graph, readable_dag_ids={"d"})  # nothing to look up in the DB
    answer = graph.to_dict()
    page = render_page(graph, dag_id="d", run_id="r", static_url="/s", json_url="/j")
    for shown in (str(answer), page):
        for word in ("hr_payroll", "salaries", "raw", "export", "r0"):
            assert word not in shown, word
    assert sorted((e["source"], e["target"]) for e in answer["edges"]) == [
        ("hidden:1", child),
        ("hidden:2", "hidden:1"),
    ]
    hidden = [run for run in answer["runs"] if run["hidden"]]
    assert [run["label"] for run in hidden] == ["run in a DAG you cannot see"] * 2
    assert all(run["airflow"] is None and not run["links"] and not run["artifacts"] for run in hidden)
    assert page.count("run in a DAG you cannot see") == 2


def test_links_open_only_http_sites_and_same_origin_paths():
    from torchx_airflow.plugins.graph import LineageGraph, RunNode
    from torchx_airflow.plugins.render import render_svg

    def drawn(url: str) -> str:
        node = RunNode("slurm://torchx/1", links={"scheduler_ui": url})
        return render_svg(LineageGraph({node.run_id: node}, [], depth=1))

    for other_site in ("//evil.example/x", "/\\evil.example/x", "/\tevil", "javascript:alert(1)"):
        assert "<a " not in drawn(other_site), other_site
    assert 'href="/dags/d/runs/r" target="_top"' in drawn("/dags/d/runs/r")
    assert 'href="https://host/ui" target="_blank"' in drawn("https://bob:hunter2@host/ui")


def test_user_info_of_every_url_is_stripped_and_secrets_masked_before_escaping(tmp_path):
    from airflow.sdk.log import mask_secret
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins.app import LineageView, masked_view
    from torchx_airflow.plugins.graph import Seed, build_graph
    from torchx_airflow.plugins.render import render_page

    secret = 'pw&<x>"y-0042'
    mask_secret(secret)
    store = FsspecStore(str(tmp_path))
    run, parent = "slurm://torchx/7", "s3://ci:hunter2@data/raw.csv"
    store.add_source(run, parent, "data")
    store.add_artifact(run, "model", "https://bob:hunter2@models.example/m.pt")
    store.add_artifact(run, "token", f"/out/{secret}/m.pt")
    seed = Seed(run, links={"mlflow": "https://bob:hunter2@mlflow.example/#/runs/1"})
    view = masked_view(LineageView(build_graph([(store, [seed])], depth=2), warnings=[f"oops {secret}"]))
    answer = json.dumps(view.graph.to_dict())
    page = render_page(
        view.graph, dag_id="d", run_id="r", static_url="/s", json_url="/j", warnings=view.warnings
    )
    for shown in (answer, page):
        assert "hunter2" not in shown and "bob" not in shown
        assert secret not in shown and html.escape(secret) not in shown and "x&gt;" not in shown
    assert "https://models.example/m.pt" in answer and "s3://data/raw.csv" in answer
    assert 'href="https://mlflow.example/#/runs/1"' in page


class UnreachableStore:
    """Stands in for a tracker store whose server is down (an outage cannot be produced here on demand)."""

    def __repr__(self) -> str:
        return "UnreachableStore()"

    def graph(self, source_id=None, max_reads=None):
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


def _counting_listings(store) -> list[str]:
    """Every directory the store lists from now on (the store's one listing primitive)."""
    listed: list[str] = []
    names = store.files.names

    def counted(directory: str, **kwargs: Any) -> list[str]:
        listed.append(directory)
        return names(directory, **kwargs)

    store.files.names = counted
    return listed


def _fill_with_junk(root, count: int) -> None:
    """What anyone with the store's credentials can put in its root: directories whose names decode
    as run ids (a long id's included, whose id file a reader would open), directories and files that
    are no run, and reverse markers named by digest (whose content a reader would open)."""
    import base64
    import os

    from torchx_airflow_tracker.store_layout import LONG_ID_PREFIX

    for i in range(count):
        os.mkdir(root / base64.b32encode(f"junk-{i}".encode()).decode())
        os.mkdir(root / base64.b32encode(f"{LONG_ID_PREFIX}{i:064d}".encode()).decode())
        os.mkdir(root / f"junk-dir-{i}")
        (root / f"junk-file-{i}").write_text("x")
        (root / f".d._{i:040d}._{i:040d}.N").write_text("{}")


def _view_reads(root) -> tuple[Any, list[str], list[str]]:
    """A view of the child run over the store at ``root``: (the graph, directories listed, files read)."""
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins.graph import Seed, build_graph

    store = FsspecStore(str(root))
    listed = _counting_listings(store)
    read: list[str] = []
    read_text = store.files.read_text

    def counted(path: str, *args: Any, **kwargs: Any) -> Any:
        read.append(path)
        return read_text(path, *args, **kwargs)

    store.files.read_text = counted
    return build_graph([(store, [Seed("slurm://torchx/child")])], depth=2), listed, read


def _store_with_one_edge(root) -> None:
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    store = FsspecStore(str(root))
    store.add_source("slurm://torchx/child", "slurm://torchx/parent", "model")
    store.ensure_indexed()


def test_junk_in_a_store_root_costs_a_view_a_bounded_read(tmp_path):
    """A writer filled the root with junk: a view still draws the run and its parent; its listings
    and reads are the same for 500 and 3,000 of each kind of junk (they were 6 per entry: 18,005
    for 3,000), and it says what it left unread and how to index the store."""
    from torchx_airflow.plugins.walk import GRAPH_READS

    costs = {}
    for junk in (0, 500, 3000):
        root = tmp_path / f"store-{junk}"
        _store_with_one_edge(root)
        _fill_with_junk(root, junk)
        graph, listed, read = _view_reads(root)
        assert set(graph.runs) == {"slurm://torchx/child", "slurm://torchx/parent"}
        assert [(e.source, e.target) for e in graph.edges] == [
            ("slurm://torchx/parent", "slurm://torchx/child")
        ]
        assert listed.count(str(root)) == 1
        costs[junk] = (len(listed), len(read))
        if junk:
            (warning,) = graph.warnings
            # each junk kind a reader would open: run-like directories (two kinds) and digest markers
            assert f"{3 * junk - GRAPH_READS} entries without an index were not read" in warning
            assert "reindex" in warning
        else:
            assert graph.warnings == []
    assert costs[500] == costs[3000], costs  # constant in the junk
    assert sum(costs[3000]) <= sum(costs[0]) + 3 * GRAPH_READS, costs


def test_a_view_lists_the_store_root_once_and_draws_at_most_max_runs(tmp_path):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins.graph import Seed, build_graph
    from torchx_airflow.plugins.render import render_page

    store = FsspecStore(str(tmp_path))
    seed = "slurm://torchx/0"
    for i in range(1, 41):  # 40 children of the seed, each with one child of its own
        store.add_source(f"slurm://torchx/{i}", seed, "model")
        store.add_source(f"slurm://torchx/{i}-eval", f"slurm://torchx/{i}")
    for i in range(200):  # unrelated runs: the store's size must not matter
        store.add_metadata(f"slurm://torchx/other-{i}", lr=0.1)
    store.ensure_indexed()
    listed = _counting_listings(store)
    graph = build_graph([(store, [Seed(seed)])], depth=2, max_runs=25)
    assert listed.count(store.root) == 1  # today: one per run walked
    # the seed and 24 children drawn; 16 children and the 24 drawn children's own children left out
    # (the left-out children are not read, so their children are not counted)
    assert len(graph.runs) == 25 and graph.runs_not_shown == 40
    assert {run.distance for run in graph.runs.values()} == {0, 1}  # the nearest first
    answer = graph.to_dict()
    assert answer["runs_not_shown"] == 40 and answer["max_runs"] == 25
    assert "At least 40 more runs within depth 2 not drawn" in answer["cut"]
    drawn = {run["id"] for run in answer["runs"]}
    assert all(e["source"] in drawn and e["target"] in drawn for e in answer["edges"])
    page = render_page(graph, dag_id="d", run_id="r", static_url="/s", json_url="/j")
    assert "At least 40 more runs within depth 2 not drawn" in page and "40 not drawn (at most 25)" in page
    whole = build_graph([(store, [Seed(seed)])], depth=2)
    assert len(whole.runs) == 81 and whole.runs_not_shown == 0 and whole.to_dict()["cut"] is None
