"""Promotion on a running Airflow (scheduler, DAG processor, triggerer, API server, started by
scripts/airflow-stack.sh): a five-point sweep of TorchX apps on local_cwd (one fails on purpose,
two tie) is promoted by its loss; the asset gets exactly one event carrying the best run, the run's
tracker entry says it was promoted, and the DAG scheduled on the asset runs exactly once.

Then by hand, through the plugin's POST endpoint: a viewer is refused (403), and so is a user who may
edit DAGs but not create asset events (role ``user``); an editor who may (role ``op``) promotes another
run once; promoting it again, or the run the asset's
latest event already carries, emits nothing. Non-JSON and cross-site requests are refused. In
headless Chromium, the comparison view's Promote button sends the same request with the UI's cookie.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore

from tests.polling import wait_until
from tests.stack import AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
REPO = Path(__file__).resolve().parents[2]
SWEEP, CONSUMER = "tx_promote_sweep", "tx_promote_consumer"
ASSET = "model://tx_promote_sweep/best"
USERS = "admin:admin,vera:viewer,ed:op,uma:user"


@pytest.fixture(scope="module")
def promote_stack(tmp_path_factory):
    home = tmp_path_factory.mktemp("promote-airflow")
    dags = tmp_path_factory.mktemp("promote-dags")
    (dags / "torchx_promotion_dags.py").symlink_to(REPO / "tests" / "dags" / "torchx_promotion_dags.py")
    stack = AirflowStack(
        home=home,
        dags_folder=dags,
        env_extra={
            "TORCHX_PROMOTE_OUTPUT": str(home / "out"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": USERS,
        },
    )
    with stack.running():
        yield stack


def _events(stack: AirflowStack) -> list[dict]:
    """The asset's events, oldest first."""
    query = urllib.parse.urlencode({"uri": ASSET, "limit": 100})
    assets = stack.api("GET", f"/assets?{query}")["assets"]
    (asset,) = [a for a in assets if a["uri"] == ASSET]
    path = f"/assets/events?asset_id={asset['id']}&limit=100&order_by=timestamp"

    def listed() -> list[dict] | None:
        try:
            return stack.api("GET", path)["asset_events"]
        except urllib.error.HTTPError as e:
            # Airflow's listing answers 500 while a DAG run an event created is queued: the run's
            # start_date is still None and its response model requires one (apache/airflow issue
            # 71360). The run starts within seconds.
            if e.code != 500:
                raise
            return None

    return wait_until(listed, f"the events of {ASSET} listed", 120, 1)


def _consumer_runs(stack: AirflowStack) -> list[dict]:
    return stack.api("GET", f"/dags/{CONSUMER}/dagRuns?order_by=logical_date")["dag_runs"]


@pytest.fixture(scope="module")
def promoted(promote_stack):
    stack = promote_stack
    stack.wait_for_dag(CONSUMER)  # parsed and unpaused before the sweep publishes
    run = stack.trigger(SWEEP)
    assert stack.wait_run(SWEEP, run, timeout=600) == "success"
    consumer = wait_until(lambda: _consumer_runs(stack), f"a run of {CONSUMER}", 300, 1)[0]
    assert stack.wait_run(CONSUMER, consumer["dag_run_id"], timeout=300) == "success"
    return stack, run


def _runs_if(stack: AirflowStack, count: int) -> list[dict] | None:
    runs = _consumer_runs(stack)
    return runs if len(runs) == count else None


def _token(stack: AirflowStack, user: str) -> str:
    password = json.loads((stack.home / "stack" / "passwords.json").read_text())[user]
    body = json.dumps({"username": user, "password": password}).encode()
    login = urllib.request.Request(
        f"{stack.url}/auth/token", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(login, timeout=30) as reply:
        return json.loads(reply.read())["access_token"]


def _promote(stack, run, user, body, content_type="application/json", **headers) -> tuple[int, dict]:
    path = f"/torchx/api/promote/{SWEEP}/{urllib.parse.quote(run, safe='')}"
    request = urllib.request.Request(
        f"{stack.url}{path}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {_token(stack, user)}", "Content-Type": content_type, **headers},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_the_best_run_is_promoted_with_one_event_and_the_consumer_runs_once(promoted):
    stack, run = promoted
    handles = [stack.xcom(SWEEP, run, "train", "app_handle", map_index=i) for i in range(5)]
    model = stack.xcom(SWEEP, run, "train", "return_value", map_index=2)["artifacts"]["model"]["path"]
    # index 1 (loss 0.0) failed; 2 and 4 tie at 0.1: the earlier map index wins
    expected = {
        "app_handle": handles[2],
        "artifact": "model",
        "path": model,
        "objective": "loss",
        "mode": "min",
        "value": 0.1,
        "runs_of": "train",
        "map_index": 2,
        "promoted_by": f"dag_run {SWEEP}/{run}",
    }
    (event,) = _events(stack)
    assert event["extra"] == expected
    assert (event["source_dag_id"], event["source_task_id"], event["source_run_id"]) == (
        SWEEP,
        "promote",
        run,
    )
    runs = _consumer_runs(stack)
    assert len(runs) == 1 and runs[0]["run_type"] == "asset_triggered"
    assert stack.xcom(CONSUMER, runs[0]["dag_run_id"], "promoted", "return_value") == expected
    record = FsspecStore(str(stack.home / "tracker")).metadata(handles[2])["airflow_promoted"]
    assert (record["asset"], record["value"], record["promoted_by"]) == (ASSET, 0.1, f"dag_run {SWEEP}/{run}")


def test_manual_promotion_is_for_editors_and_happens_once(promoted):
    stack, run = promoted
    # a viewer may read the DAG but not edit it; a user may edit it but not create asset events
    assert _promote(stack, run, "vera", {"task_id": "train", "map_index": 3})[0] == 403
    assert _promote(stack, run, "uma", {"task_id": "train", "map_index": 3})[0] == 403
    # the run the asset's latest event carries already: nothing new
    status, reply = _promote(stack, run, "ed", {"task_id": "train", "map_index": 2})
    assert (status, reply["created"], len(_events(stack))) == (200, False, 1)
    # a failed run cannot be promoted, nor a request from another site or not in JSON
    status, reply = _promote(stack, run, "ed", {"task_id": "train", "map_index": 1})
    assert status == 409 and "no SUCCEEDED TorchX result" in reply["detail"]
    cross_site = {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
    assert _promote(stack, run, "ed", {"task_id": "train", "map_index": 3}, **cross_site)[0] == 403
    # a form or text body: FastAPI refuses it (422) before the endpoint's own JSON check (415)
    assert _promote(stack, run, "ed", {"task_id": "train", "map_index": 3}, "text/plain")[0] == 422
    assert len(_events(stack)) == 1

    first = _promote(stack, run, "ed", {"task_id": "train", "map_index": 3})
    again = _promote(stack, run, "ed", {"task_id": "train", "map_index": 3})
    assert (first[0], first[1]["created"], again[0], again[1]["created"]) == (201, True, 200, False)
    assert again[1]["event"]["id"] == first[1]["event"]["id"]
    events = _events(stack)
    assert len(events) == 2
    handle = stack.xcom(SWEEP, run, "train", "app_handle", map_index=3)
    assert events[-1]["extra"]["app_handle"] == handle
    assert (events[-1]["extra"]["value"], events[-1]["extra"]["promoted_by"]) == (0.3, "user ed")
    # the manual promotion's event triggers the consumer once more: two runs, one per promotion
    runs = wait_until(lambda: _runs_if(stack, 2), f"a second run of {CONSUMER}", 300, 1)
    assert stack.wait_run(CONSUMER, runs[-1]["dag_run_id"], timeout=300) == "success"
    assert stack.xcom(CONSUMER, runs[-1]["dag_run_id"], "promoted", "return_value")["app_handle"] == handle
    record = FsspecStore(str(stack.home / "tracker")).metadata(handle)["airflow_promoted"]
    assert record["promoted_by"] == "user ed"
    # each request that passed the access checks is in Airflow's audit log, with who sent it (the
    # viewer's and the user's were refused before it)
    logs = stack.api("GET", f"/eventLogs?event=torchx_promote&dag_id={SWEEP}&limit=100")["event_logs"]
    assert {log["owner"] for log in logs} == {"ed"} and len(logs) >= 3, logs


def _login(browser, stack: AirflowStack, user: str):
    password = json.loads((stack.home / "stack" / "passwords.json").read_text())[user]
    page = browser.new_page(viewport={"width": 1500, "height": 950})
    page.goto(stack.url)
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(rf":{stack.port}/(?!auth)"))
    page.on("dialog", lambda dialog: dialog.accept())  # the button asks "Promote ...?"
    return page


def _click_promote(page, stack: AirflowStack, run: str, map_index: int) -> str:
    """Open the comparison view of the sweep, press the row's Promote, return what the row says."""
    page.goto(f"{stack.url}/torchx/compare/{SWEEP}/{urllib.parse.quote(run, safe='')}?task_id=train")
    form = page.locator(f'form.promote:has(input[name="map_index"][value="{map_index}"])')
    form.get_by_role("button", name="Promote").click()
    result = form.locator(".promote-result")
    result.wait_for(timeout=60_000)
    return result.inner_text()


def test_the_comparison_views_promote_button_in_a_browser(promoted, browser):
    stack, run = promoted
    before = len(_events(stack))
    viewer = _login(browser, stack, "vera")
    assert _click_promote(viewer, stack, run, 4).startswith("Refused (403)")
    assert len(_events(stack)) == before
    editor = _login(browser, stack, "ed")
    assert _click_promote(editor, stack, run, 4) == "Promoted"
    assert _click_promote(editor, stack, run, 4) == "Already promoted"
    events = _events(stack)
    assert len(events) == before + 1
    handle = stack.xcom(SWEEP, run, "train", "app_handle", map_index=4)
    assert (events[-1]["extra"]["app_handle"], events[-1]["extra"]["promoted_by"]) == (handle, "user ed")
