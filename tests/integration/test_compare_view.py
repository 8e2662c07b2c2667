"""The comparison view over a real sweep: ``airflow dags test`` of ``tx_compare_sweep`` runs eight
mapped TorchX jobs on local_cwd, each logging a loss curve and final metrics to a local fsspec
store; Airflow's own API server app (in process, the plugin loaded from its entry point) answers the
view's JSON and page. The metrics in the JSON are compared with what the jobs wrote.

Access: an auth manager that withholds XComs from ``carol`` (as FAB or Keycloak roles can) checks
that a user who may not read the DAG's XComs gets 403, from the page and the JSON alike.
Headless Chromium draws the page (curves and diff); its screenshot goes to the
test artifacts' ui/ directory (tests/artifacts.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from tests.artifacts import SHOTS
from tests.dags.torchx_compare_dags import EPOCHS, LEARNING_RATES, SECRET

# two sweeps of eight real jobs start in the first test's set-up: minutes on a loaded machine
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

USERS = "admin:admin,carol:viewer"
PASSWORDS = {"admin": "admin-pw", "carol": "carol-pw"}
PRICES = {"cpu_hour": 0.05, "mem_gb_hour": 0.01, "currency": "USD"}
REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def sweeps(run_dag, mlflow_uri, tmp_path_factory):
    """The sweep on the fsspec store, then on MLflow: (connections env, fsspec root, {kind: result})."""
    root = tmp_path_factory.mktemp("compare-store")
    env = {
        "AIRFLOW_CONN_TORCHX_DEFAULT": json.dumps(
            {"conn_type": "torchx", "extra": {"scheduler": "local_cwd", "prices": PRICES}}
        ),
        "AIRFLOW_CONN_CMP_FS": json.dumps({"conn_type": "torchx_fsspec", "extra": {"root": str(root)}}),
        "AIRFLOW_CONN_CMP_MLFLOW": json.dumps(
            {"conn_type": "mlflow", "host": mlflow_uri, "extra": {"experiment": "compare-sweep"}}
        ),
    }
    results = {}
    for kind, trackers in (("mlflow", "cmp_mlflow"), ("fsspec", "cmp_fs")):  # the fsspec run is the latest
        result = run_dag("tx_compare_sweep", conf={"trackers": trackers}, env=env, timeout=600)
        assert result.returncode == 0, result.output[-4000:]
        assert all(state == "success" for state in result.states.values()), result.states
        results[kind] = result
    return env, root, results


@pytest.fixture(scope="module")
def sweep(sweeps):
    """The fsspec sweep: (connections env, store root, result)."""
    env, root, results = sweeps
    return env, root, results["fsspec"]


def _xcom_denier():
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    class XComDenier(SimpleAuthManager):
        """SimpleAuthManager that withholds every DAG's XComs from carol."""

        def is_authorized_dag(self, *, method, user, access_entity=None, details=None):
            if user.username == "carol" and access_entity == DagAccessEntity.XCOM:
                return False
            return super().is_authorized_dag(
                method=method, user=user, access_entity=access_entity, details=details
            )

    return XComDenier


XComDenier = None  # built on first use: importing Airflow's auth managers is slow


@pytest.fixture(scope="module")
def client(sweep, tmp_path_factory):
    from fastapi.testclient import TestClient

    env, _, _ = sweep
    passwords = tmp_path_factory.mktemp("auth") / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {
            **env,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": USERS,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__API_AUTH__JWT_SECRET": "compare-view-test-secret-" + "x" * 48,
            "AIRFLOW__CORE__AUTH_MANAGER": f"{__name__}.XComDenier",
        }.items():
            mp.setenv(name, value)
        global XComDenier
        XComDenier = _xcom_denier()
        try:
            from airflow.api_fastapi.app import _AuthManagerState, create_app

            with TestClient(create_app()) as test_client:
                yield test_client
        finally:
            _AuthManagerState.instance = None  # the next app builds the configured auth manager


def _token(client, user: str) -> dict[str, str]:
    reply = client.post("/auth/token", json={"username": user, "password": PASSWORDS[user]})
    assert reply.status_code in (200, 201), reply.text
    return {"Authorization": f"Bearer {reply.json()['access_token']}"}


def _path(result, api: bool = True) -> str:
    run = urllib.parse.quote(result.run_id, safe="")
    return f"/torchx/{'api/' if api else ''}compare/tx_compare_sweep/{run}"


def _compare(client, result, user: str = "admin", **query) -> dict:
    reply = client.get(_path(result), params={"task_id": "train", **query}, headers=_token(client, user))
    assert reply.status_code == 200, reply.text
    assert SECRET not in reply.text
    return reply.json()


def _keys(result) -> list[str]:
    return [f"{result.run_id}/{i}" for i in range(len(LEARNING_RATES))]


@pytest.mark.parametrize("kind", ["fsspec", "mlflow"])
def test_json_shows_exactly_the_metrics_the_jobs_logged(sweeps, client, mlflow_uri, kind):
    from torchx_airflow_tracker.fsspec_store import FsspecStore
    from torchx_airflow_tracker.mlflow_store import MlflowStore

    _, root, results = sweeps
    result = results[kind]
    data = _compare(client, result, show=_keys(result))
    assert [run["map_index"] for run in data["runs"]] == list(range(8))
    store = FsspecStore(str(root)) if kind == "fsspec" else MlflowStore(mlflow_uri, "compare-sweep")
    for run, lr in zip(data["runs"], LEARNING_RATES, strict=True):
        handle = result.xcom("train", "torchx_run_id", map_index=run["map_index"])
        assert run["torchx_run_id"] == handle and run["state"] == "SUCCEEDED"
        # what the job logged: the formula it used, and what its store holds
        curve = [[epoch, lr / epoch] for epoch in range(1, EPOCHS + 1)]
        assert run["metrics"] == {"train_loss": lr / EPOCHS, "val_loss": lr / (EPOCHS + 1), "epochs": EPOCHS}
        assert data["series"][run["key"]] == {"train_loss": curve}
        written = store.metadata(handle)
        assert (written["val_loss"], written["epochs"]) == (run["metrics"]["val_loss"], EPOCHS)
        if kind == "fsspec":
            assert written["torchx_metrics"]["series"]["train_loss"] == curve
        else:
            mlflow_id = store.mlflow_run_id(handle)
            history = store.client.get_metric_history(mlflow_id, "train_loss")
            assert sorted([m.step, m.value] for m in history) == curve
        # what it cost, and how it ran
        task_result = result.xcom("train", map_index=run["map_index"])
        assert run["elapsed_s"] == task_result["usage"]["elapsed_s"] > 0
        assert run["cost"] == task_result["cost"]["actual"]["total"] and run["currency"] == "USD"
        assert (run["attempts"], run["cache_hit"], run["task_state"]) == (1, False, "success")
        assert run["links"]["lineage"] == (
            f"/torchx/lineage/tx_compare_sweep/{urllib.parse.quote(result.run_id, safe='')}"
            f"?task_id=train&map_index={run['map_index']}"
        )
    # only what differs: the job's arguments and the seed; the hidden key is the same everywhere
    assert "env.SEED" in data["params"] and "args" in data["params"]
    assert "env.SWEEP_API_KEY" not in data["params"]
    assert data["runs"][3]["params"]["env.SEED"] == "3"
    assert data["metric"] == "train_loss"
    assert data["trackers"] == ["cmp_fs" if kind == "fsspec" else "cmp_mlflow"]


def test_sorted_by_a_metric(sweep, client):
    _, _, result = sweep
    data = _compare(client, result, sort="metric:val_loss", order="desc")
    values = [run["metrics"]["val_loss"] for run in data["runs"]]
    assert values == sorted(values, reverse=True) and len(values) == 8
    data = _compare(client, result, sort="param:env.SEED")
    assert [run["params"]["env.SEED"] for run in data["runs"]] == [str(i) for i in range(8)]
    reply = client.get(
        _path(result), params={"task_id": "train", "sort": "nope"}, headers=_token(client, "admin")
    )
    assert reply.status_code == 400 and "metric:<name>" in reply.text


def test_diff_of_two_submitted_apps(sweep, client):
    _, _, result = sweep
    a, b = _keys(result)[0], _keys(result)[4]
    diff = _compare(client, result, a=a, b=b)["diff"]
    lines = {line["name"]: line for line in diff["lines"]}
    assert (lines["env.SEED"]["a"], lines["env.SEED"]["b"], lines["env.SEED"]["same"]) == ("0", "4", False)
    assert lines["env.SWEEP_API_KEY"]["a"] == lines["env.SWEEP_API_KEY"]["b"] == "***"
    assert lines["scheduler"] == {"name": "scheduler", "a": "local_cwd", "b": "local_cwd", "same": True}
    assert "0.5 3" in lines["args"]["a"] and "1.0 3" in lines["args"]["b"]
    assert lines["resource.cpu"]["same"]


def _last(client, last: int) -> dict:
    reply = client.get(
        "/torchx/api/compare/tx_compare_sweep",
        params={"task_id": "train", "last": last},
        headers=_token(client, "admin"),
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_last_runs_of_the_task_across_dag_runs(sweeps, client):
    """``last`` counts DAG runs: each brings every map index of the task."""
    _, _, results = sweeps
    newest, older = results["fsspec"].run_id, results["mlflow"].run_id
    data = _last(client, 1)
    assert data["dag_run_id"] is None and data["rows_not_shown"] == 8  # the older sweep's eight
    assert [(r["dag_run_id"], r["map_index"]) for r in data["runs"]] == [(newest, i) for i in range(8)]
    data = _last(client, 2)
    # the newest DAG run first, then the MLflow sweep's; metrics from both stores
    assert data["rows_not_shown"] == 0
    assert [(r["dag_run_id"], r["map_index"]) for r in data["runs"]] == [
        *[(newest, i) for i in range(8)],
        *[(older, i) for i in range(8)],
    ]
    assert data["runs"][8]["metrics"]["val_loss"] == LEARNING_RATES[0] / (EPOCHS + 1)
    assert sorted(data["trackers"]) == ["cmp_fs", "cmp_mlflow"]


def test_a_user_without_xcom_access_gets_403(sweep, client):
    _, _, result = sweep
    headers = _token(client, "carol")
    for path in (_path(result), _path(result, api=False), "/torchx/api/compare/tx_compare_sweep"):
        reply = client.get(path, params={"task_id": "train"}, headers=headers)
        assert reply.status_code == 403, (path, reply.text)
        assert "val_loss" not in reply.text
    assert client.get(_path(result), params={"task_id": "train"}).status_code == 401


def test_page_draws_table_curves_and_diff(sweep, client):
    _, _, result = sweep
    keys = _keys(result)
    query = [("task_id", "train"), ("a", keys[0]), ("b", keys[7]), *[("show", k) for k in keys[:4]]]
    reply = client.get(_path(result, api=False), params=query, headers=_token(client, "admin"))
    assert reply.status_code == 200, reply.text
    page = reply.text
    assert SECRET not in page
    assert page.count("<tr data-key=") == 8
    assert page.count('<polyline class="curve"') == 4
    assert '<table class="diff">' in page and page.count('<tr class="differs">') >= 2
    assert "https://" not in page.split("</head>")[0]  # no CDN: every asset is the plugin's own


@pytest.mark.timeout(600)
def test_curves_and_diff_render_in_chromium(sweep, client):
    """Chromium loads the page and its stylesheets from the app (through the test client) and draws
    the curves and the diff; a screenshot goes to ui/comparison-view.png of the test artifacts."""
    if not os.path.exists(CHROMIUM):
        if os.geteuid() != 0:
            pytest.skip("Debian's chromium is not installed and installing it needs root")
        subprocess.run(["bash", str(REPO / "scripts" / "install-chromium.sh")], check=True, timeout=900)
    from playwright.sync_api import sync_playwright

    from tests.e2e.conftest import FLAGS

    _, _, result = sweep
    keys = _keys(result)
    headers = _token(client, "admin")
    query = urllib.parse.urlencode(
        [("task_id", "train"), ("sort", "metric:val_loss"), ("a", keys[0]), ("b", keys[4])]
        + [("show", k) for k in keys]
    )
    base = "http://airflow.test"

    def serve(route) -> None:
        url = urllib.parse.urlsplit(route.request.url)
        reply = client.get(url.path + (f"?{url.query}" if url.query else ""), headers=headers)
        route.fulfill(status=reply.status_code, headers=dict(reply.headers), body=reply.content)

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 800})  # the docs' width
            page.route(f"{base}/**", serve)
            page.goto(f"{base}{_path(result, api=False)}?{query}")
            curves = page.locator("svg.curves polyline.curve")
            assert curves.count() == 8
            box = curves.first.bounding_box()
            assert box is not None and box["width"] > 300  # drawn across the plot, not collapsed
            assert page.locator("table.diff tr.differs").count() >= 2
            header = page.locator("table.runs th").first.evaluate("e => getComputedStyle(e).position")
            assert header == "sticky"  # compare.css was served and applied
            # the documentation's copy names the checkout <repo> (the page shows the job's own path)
            page.evaluate(
                """repo => { const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
                   while (walk.nextNode()) walk.currentNode.nodeValue =
                       walk.currentNode.nodeValue.split(repo).join("<repo>"); }""",
                str(REPO),
            )
            page.screenshot(path=SHOTS / "comparison-view.png", full_page=True)
        finally:
            browser.close()
