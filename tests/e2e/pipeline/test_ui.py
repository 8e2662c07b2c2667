"""The Airflow UI in headless Chromium (Debian's, driven by Playwright): log in, open the pipeline,
trigger it from the form with changed params (a number field, and the learning rates' JSON editor),
wait for success, open a TorchX task and find its extra links. Screenshots go to the
test artifacts' ui/ directory (tests/artifacts.py, outside the repo) for a person to look at."""

from __future__ import annotations

import json
import re

import pytest

from tests.artifacts import SHOTS
from tests.polling import wait_until

LRS = [0.2, 0.5]  # typed into the form's JSON editor, in place of the DAG's three
# The pipeline trains DDP apps (torchrun, torch imports) on 2 cores: more than the default 300 s.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def test_trigger_from_the_form_and_find_the_extra_links(pipeline_stack, browser):
    stack = pipeline_stack
    SHOTS.mkdir(parents=True, exist_ok=True)
    stack.wait_for_dag("torchx_pipeline")
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(stack.url)
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(stack.password)
    page.screenshot(path=SHOTS / "1-login.png")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(rf":{stack.port}/(?!auth)"))

    page.goto(f"{stack.url}/dags/torchx_pipeline")
    page.get_by_role("button", name=re.compile("Trigger", re.I)).first.click()
    epochs = page.locator("input[name=element_epochs]")
    epochs.fill("13")
    # Two learning rates, not the form's three: two DDP apps of two ranks (about 0.3 GB a rank) at once
    # instead of three, while Chromium and a second stack run (the suite's memory peak).
    page.locator("#element_learning_rates .view-lines").click()
    page.keyboard.press("Control+a")  # Linux only, as Debian's Chromium
    page.keyboard.insert_text(json.dumps(LRS))
    page.keyboard.press("Shift+End")  # the editor may have closed the "[" itself: drop what follows
    page.keyboard.press("Delete")
    page.screenshot(path=SHOTS / "2-trigger-form.png")
    before = {r["dag_run_id"] for r in stack.api("GET", "/dags/torchx_pipeline/dagRuns")["dag_runs"]}
    page.get_by_role("dialog").get_by_role("button", name=re.compile("^Trigger$")).click()
    (run,) = wait_until(
        lambda: (
            {r["dag_run_id"] for r in stack.api("GET", "/dags/torchx_pipeline/dagRuns")["dag_runs"]} - before
        ),
        "a run triggered from the form",
        60,
    )
    conf = stack.api("GET", f"/dags/torchx_pipeline/dagRuns/{run}")["conf"]
    assert (conf["epochs"], conf["learning_rates"]) == (13, LRS)
    assert stack.wait_run("torchx_pipeline", run, timeout=600) == "success"
    trains = stack.api("GET", f"/dags/torchx_pipeline/dagRuns/{run}/taskInstances/train/listMapped")
    assert trains["total_entries"] == len(LRS)  # one app per learning rate of the form
    train = stack.xcom("torchx_pipeline", run, "train", "return_value", map_index=1)
    assert train["metadata"]["epochs"] == 13  # the job got the form's values
    assert train["metadata"]["lr"] == LRS[1]

    page.goto(f"{stack.url}/dags/torchx_pipeline/runs/{run}")
    page.wait_for_load_state("networkidle")
    page.screenshot(path=SHOTS / "3-run.png")
    page.goto(f"{stack.url}/dags/torchx_pipeline/runs/{run}/tasks/evaluate/details")
    mlflow_link = page.get_by_role("link", name="MLflow Run")
    mlflow_link.wait_for(timeout=30000)
    page.screenshot(path=SHOTS / "4-task-extra-links.png", full_page=True)
    assert mlflow_link.get_attribute("href") == stack.xcom("torchx_pipeline", run, "evaluate", "tracker_url")
    # "TorchX App" points at a local_cwd log directory (file://), which the UI does not offer as a link
    links = stack.api("GET", f"/dags/torchx_pipeline/dagRuns/{run}/taskInstances/evaluate/links")
    assert links["extra_links"]["TorchX App"].startswith("file://")
