"""The lineage view in a running Airflow (scheduler, DAG processor, triggerer, API server and UI,
started by scripts/airflow-stack.sh with an MLflow server, as `make up` does), in headless Chromium.

Two real DAG runs: ``tx_view_pipeline`` (prepare -> train x2 -> evaluate) and ``tx_view_finetune``,
whose job names the pipeline's evaluate run as its parent. The "TorchX lineage" tab of the DAG run
page and of a task instance page show the graph; the JSON endpoint answers the same graph over REST.

Access: the stack runs SimpleAuthManager in multi-team mode (the only way it restricts a role to
some DAGs): the DAG bundle belongs to team ``research``; ``ana`` is a viewer in ``research``, ``bob`` a viewer
in ``finance``, so bob cannot read the DAG and gets 403 from the view, as from Airflow's own API.
Screenshots go to the test artifacts' ui/ directory (tests/artifacts.py) for a person to look at;
those of its docs/ are the UI walkthrough's (docs/ui-walkthrough.md): a window the width of the docs'
column at twice the pixels, so the text stays readable there. After a change to the view, copy them to
docs/images/.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.artifacts import SHOTS
from tests.polling import wait_until
from tests.services import free_port
from tests.stack import AirflowStack

# a whole Airflow stack starts in the first test's set-up: minutes on a loaded machine
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]
REPO = Path(__file__).resolve().parents[2]
DOCS_SHOTS = SHOTS / "docs"
# the docs' column is about 760 CSS pixels wide: pictures cut to about that, drawn at twice the pixels
DOCS_WINDOW = {"viewport": {"width": 1280, "height": 860}, "device_scale_factor": 2}
BUNDLE = {
    "name": "dags-folder",
    "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
    "kwargs": {},
    "team_name": "research",
}


def _wait_http(url: str, timeout: float = 300) -> None:
    def answers() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return True
        except OSError:
            return False

    wait_until(answers, f"{url} answering", timeout, interval=1)


@pytest.fixture(scope="module")
def view_stack(tmp_path_factory):
    home = tmp_path_factory.mktemp("view-airflow")
    dags = tmp_path_factory.mktemp("view-dags")
    (dags / "torchx_lineage_view_dags.py").symlink_to(REPO / "tests" / "dags" / "torchx_lineage_view_dags.py")
    mlflow_port = free_port()
    stack = AirflowStack(
        home=home,
        dags_folder=dags,
        env_extra={
            "MLFLOW_PORT": str(mlflow_port),
            "AIRFLOW__CORE__MULTI_TEAM": "True",
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps([BUNDLE]),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,ana:viewer:research,bob:viewer:finance",
        },
    )
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=stack.env, check=True, capture_output=True, cwd=home)
    for team in ("research", "finance"):
        subprocess.run([airflow, "teams", "create", team], env=stack.env, check=True, capture_output=True)
    with stack.running():
        _wait_http(f"http://127.0.0.1:{mlflow_port}/health")  # the tasks' MLflow tracker
        yield stack


@pytest.fixture(scope="module")
def view_runs(view_stack):
    """The pipeline's run and the finetune run that descends from it, both succeeded."""
    stack = view_stack
    pipeline = stack.trigger("tx_view_pipeline")
    assert stack.wait_run("tx_view_pipeline", pipeline, timeout=420) == "success"
    parent = stack.xcom("tx_view_pipeline", pipeline, "evaluate", "torchx_run_id")
    finetune = stack.trigger("tx_view_finetune", {"parent": parent})
    assert stack.wait_run("tx_view_finetune", finetune, timeout=300) == "success"
    return pipeline, finetune


def _handles(stack, run: str) -> dict[str, str]:
    xcom = stack.xcom
    return {
        "prepare": xcom("tx_view_pipeline", run, "prepare", "torchx_run_id"),
        "train0": xcom("tx_view_pipeline", run, "train", "torchx_run_id", map_index=0),
        "train1": xcom("tx_view_pipeline", run, "train", "torchx_run_id", map_index=1),
        "evaluate": xcom("tx_view_pipeline", run, "evaluate", "torchx_run_id"),
    }


def _password(stack, user: str) -> str:
    return json.loads((stack.home / "stack" / "passwords.json").read_text())[user]


def _get(stack, path: str, user: str) -> tuple[int, str]:
    body = json.dumps({"username": user, "password": _password(stack, user)}).encode()
    login = urllib.request.Request(
        f"{stack.url}/auth/token", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(login, timeout=30) as reply:
        token = json.loads(reply.read())["access_token"]
    request = urllib.request.Request(f"{stack.url}{path}", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _login(browser, stack, user: str, window: dict | None = None):
    page = browser.new_page(**(window or {"viewport": {"width": 1500, "height": 950}}))
    page.goto(stack.url)
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(_password(stack, user))
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(rf":{stack.port}/(?!auth)"))
    return page


def test_json_endpoint_answers_the_graph(view_stack, view_runs):
    stack = view_stack
    pipeline, finetune = view_runs
    h = _handles(stack, pipeline)
    tuned = stack.xcom("tx_view_finetune", finetune, "finetune", "torchx_run_id")
    status, text = _get(
        stack, f"/torchx/api/lineage/tx_view_finetune/{urllib.parse.quote(finetune)}", "admin"
    )
    assert status == 200, text
    graph = json.loads(text)
    assert {run["id"] for run in graph["runs"]} == {tuned, *h.values()}
    assert {(e["source"], e["target"]) for e in graph["edges"]} == {
        (h["prepare"], h["train0"]),
        (h["prepare"], h["train1"]),
        (h["train0"], h["evaluate"]),
        (h["train1"], h["evaluate"]),
        (h["evaluate"], tuned),
    }
    evaluate = next(run for run in graph["runs"] if run["id"] == h["evaluate"])
    assert evaluate["airflow"] == {
        "dag_id": "tx_view_pipeline",
        "run_id": pipeline,
        "task_id": "evaluate",
        "map_index": -1,
        "state": "success",
    }
    assert evaluate["links"]["mlflow"] == stack.xcom("tx_view_pipeline", pipeline, "evaluate", "tracker_url")
    assert graph["trackers"] == ["torchx_fsspec_default"]


def test_lineage_tab_of_the_dag_run_page(view_stack, view_runs, browser):
    stack = view_stack
    pipeline, finetune = view_runs
    h = _handles(stack, pipeline)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = _login(browser, stack, "admin")
    page.goto(f"{stack.url}/dags/tx_view_pipeline/runs/{pipeline}")
    page.get_by_role("link", name="TorchX lineage").first.click()  # the tab the plugin adds
    page.wait_for_url(re.compile(r"/plugin/torchx-lineage$"))
    frame = page.frame_locator("iframe").first
    frame.locator("svg.lineage").wait_for(timeout=60000)
    cards = frame.locator("g.run")
    assert cards.count() == 5
    assert sorted(cards.evaluate_all("gs => gs.map(g => g.dataset.run)")) == sorted(
        [*h.values(), _tuned(stack, finetune)]
    )
    assert frame.locator("g.run.other").count() == 1  # the finetune run of the other DAG
    assert frame.locator("g.artifact").count() == 5
    assert frame.locator("g.edge").count() == 5
    mlflow = frame.locator(f'g.run[data-run="{h["evaluate"]}"] a', has_text="MLflow run")
    assert mlflow.get_attribute("href") == stack.xcom("tx_view_pipeline", pipeline, "evaluate", "tracker_url")
    page.screenshot(path=SHOTS / "lineage-1-dag-run-tab.png")
    # the view on its own, as the README shows it
    view = _login(browser, stack, "admin")
    view.set_viewport_size({"width": 1600, "height": 760})
    view.goto(f"{stack.url}/torchx/lineage/tx_view_pipeline/{urllib.parse.quote(pipeline, safe='')}")
    view.locator("svg.lineage").wait_for()
    view.screenshot(path=SHOTS / "lineage-view.png", full_page=True)
    # the depth control: from the finetune run, depth 1 reaches only its parent in the other DAG
    view.goto(f"{stack.url}/torchx/lineage/tx_view_finetune/{urllib.parse.quote(finetune, safe='')}")
    assert view.locator("g.run").count() == 5
    view.locator("select[name=depth]").select_option("1")
    view.wait_for_url(re.compile(r"depth=1"))
    assert (
        view.locator("g.run").count() == 2
        and "more beyond this depth" in view.locator(".stats").first.inner_text()
    )
    view.screenshot(path=SHOTS / "lineage-4-depth-1.png", full_page=True)
    _docs_screenshots(browser, stack, pipeline, finetune)


def _docs_screenshots(browser, stack, pipeline: str, finetune: str) -> None:
    """The walkthrough's pictures: the DAG run page with the tab open, cut to the tab; then the view
    in two halves narrow enough for the docs' column (this DAG run's runs; evaluate and the finetune
    run of the other DAG), and the first half with a run hovered."""
    DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
    h = _handles(stack, pipeline)
    page = _login(browser, stack, "admin", DOCS_WINDOW)
    page.goto(f"{stack.url}/dags/tx_view_pipeline/runs/{pipeline}")
    tab = page.get_by_role("link", name="TorchX lineage").first
    tab.click()
    page.wait_for_url(re.compile(r"/plugin/torchx-lineage$"))
    page.frame_locator("iframe").first.locator("g.run").first.wait_for(state="visible", timeout=60000)
    _tab_screenshot(page, DOCS_SHOTS / "ui-dag-run-tab.png")

    # wide enough for the whole graph (its frame scrolls, a picture would cut it); each picture is cut
    view = _login(browser, stack, "admin", {**DOCS_WINDOW, "viewport": {"width": 1700, "height": 860}})
    view.goto(f"{stack.url}/torchx/lineage/tx_view_pipeline/{urllib.parse.quote(pipeline, safe='')}")
    view.locator("svg.lineage").wait_for()

    def cards(*handles: str) -> dict[str, float]:
        boxes = [view.locator(f'g.run[data-run="{handle}"]').bounding_box() for handle in handles]
        assert all(boxes)
        return {
            "left": min(b["x"] for b in boxes) - 16,
            "top": min(b["y"] for b in boxes) - 24,
            "right": max(b["x"] + b["width"] for b in boxes) + 16,
            "bottom": max(b["y"] + b["height"] for b in boxes) + 64,  # the artifacts under them
        }

    first = cards(h["prepare"], h["train0"], h["train1"])
    header = view.get_by_role("link", name="JSON").first.bounding_box()  # the header's last item
    assert header
    # with the header: title, depth, totals, legend
    clip = _clip(0, 0, max(first["right"], header["x"] + header["width"] + 24), first["bottom"])
    view.screenshot(path=DOCS_SHOTS / "ui-lineage-graph.png", full_page=True, clip=clip)
    second = cards(h["evaluate"], _tuned(stack, finetune))
    view.screenshot(
        path=DOCS_SHOTS / "ui-lineage-other-dag.png",
        full_page=True,
        clip=_clip(
            second["left"], second["top"], second["right"] - second["left"], second["bottom"] - second["top"]
        ),
    )
    view.locator(f'g.run[data-run="{h["train0"]}"]').hover()
    view.screenshot(path=DOCS_SHOTS / "ui-lineage-hover.png", full_page=True, clip=clip)


def _tab_screenshot(page, path: Path) -> None:
    """The page cut to the tab: its row of tabs and the frame the plugin's view is drawn in."""
    frame = page.locator("iframe").first.bounding_box()
    tab = page.get_by_role("link", name="TorchX lineage").last.bounding_box()
    assert frame and tab
    left, top = frame["x"] - 12, tab["y"] - 12  # from the row of tabs (it wraps in a narrow window)
    bottom = min(frame["y"] + frame["height"], DOCS_WINDOW["viewport"]["height"])
    page.screenshot(path=path, clip=_clip(left, top, DOCS_WINDOW["viewport"]["width"] - left, bottom - top))


def _clip(x: float, y: float, width: float, height: float) -> dict[str, float]:
    return {"x": max(x, 0), "y": max(y, 0), "width": width, "height": height}


def _tuned(stack, finetune: str) -> str:
    return stack.xcom("tx_view_finetune", finetune, "finetune", "torchx_run_id")


def test_lineage_tab_of_a_task_instance_selects_its_run(view_stack, view_runs, browser):
    stack = view_stack
    pipeline, _ = view_runs
    h = _handles(stack, pipeline)
    page = _login(browser, stack, "admin")
    page.goto(
        f"{stack.url}/dags/tx_view_pipeline/runs/{pipeline}/tasks/train/mapped/1/plugin/torchx-lineage-task"
    )
    frame = page.frame_locator("iframe").first
    frame.locator("svg.lineage").wait_for(timeout=60000)
    selected = frame.locator("g.run.selected")
    assert selected.count() == 1 and selected.get_attribute("data-run") == h["train1"]
    page.screenshot(path=SHOTS / "lineage-2-task-instance-tab.png")
    # as a user gets there: the task instance's page, then its tab (the frame then draws at once;
    # opened by its URL in a fresh page, it was at times pictured before it drew)
    docs = _login(browser, stack, "admin", DOCS_WINDOW)
    docs.goto(f"{stack.url}/dags/tx_view_pipeline/runs/{pipeline}/tasks/train/mapped/1")
    docs.get_by_role("link", name="TorchX lineage").last.click()
    docs.wait_for_url(re.compile(r"/plugin/torchx-lineage-task$"))
    docs.frame_locator("iframe").first.locator("g.run.selected").wait_for(state="visible", timeout=60000)
    DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
    _tab_screenshot(docs, DOCS_SHOTS / "ui-task-instance-tab.png")


def test_a_user_who_cannot_read_the_dag_cannot_read_its_lineage(view_stack, view_runs, browser):
    stack = view_stack
    pipeline, _ = view_runs
    run = urllib.parse.quote(pipeline, safe="")
    for path in (f"/torchx/api/lineage/tx_view_pipeline/{run}", f"/torchx/lineage/tx_view_pipeline/{run}"):
        assert _get(stack, path, "bob")[0] == 403, path
        assert _get(stack, path, "ana")[0] == 200, path
    assert _get(stack, f"/api/v2/dags/tx_view_pipeline/dagRuns/{run}", "bob")[0] == 403
    page = _login(browser, stack, "bob")
    reply = page.goto(f"{stack.url}/torchx/lineage/tx_view_pipeline/{run}")
    assert reply.status == 403 and "not allowed to read this DAG" in page.content()
    assert page.locator("svg").count() == 0
    page.screenshot(path=SHOTS / "lineage-3-forbidden.png")
