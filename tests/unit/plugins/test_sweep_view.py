"""A sweep in the comparison view, from the XComs its tasks push (the real plan operator, the
segments' results as their workers record them: tests/sweep_xcoms.py): trials x rungs, one curve
per trial, the rung where each stopped and why, the promoted trial marked, the parameters that
differ before the objective, a tick per rung, and a page that escapes what jobs and DAGs named."""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import pytest

from tests.sweep_xcoms import simulate_sweep
from torchx_airflow.plugins.sweep_render import render_sweep_page
from torchx_airflow.plugins.sweep_view import (
    SweepView,
    brackets_of,
    choose_bracket,
    fill_sweep,
    sweep_json,
    sweep_of,
)
from torchx_airflow.sweeps.tasks import XCOM_SWEEP_SPEC

SPACE = [{"lr": lr, "hidden": w, "seed": 7} for lr in (0.01, 0.03, 0.1) for w in (8, 16, 32)]
BUDGETS = [1, 3, 9]


def loss(params, budget: float) -> float:
    """0.1 learns fast and stops early; 0.03 with 16 hidden units ends best (t4), only 2nd after one epoch."""
    tau = {0.01: 4.0, 0.03: 1.5, 0.1: 0.6}[params["lr"]]
    wide = (0.4 if params["lr"] == 0.1 else 0.03) * abs(math.log2(params["hidden"] / 16))
    floor = {0.01: 0.10, 0.03: 0.05, 0.1: 0.25}[params["lr"]] + wide
    return floor + math.exp(-budget / tau)


def _view(instances, xcoms, dag_run_id: str = "run1") -> dict:
    view = SweepView("d", dag_run_id, "sweep")
    fill_sweep(view, instances, xcoms, "/torchx")
    return sweep_json(view)


def _page(data: dict) -> str:
    return render_sweep_page(data, static_url="/s", json_url="/j", runs_url="/torchx/compare/d/run1")


def test_a_sweep_is_shown_as_trials_by_rungs_with_where_each_stopped_and_the_winner_marked():
    data = _view(*simulate_sweep(SPACE, BUDGETS, loss))
    assert (data["objective"], data["mode"], data["layout"]) == ("val_loss", "min", "sweep")
    assert [(r["rung"], r["budget"], r["planned"], r["stopped"]) for r in data["rungs"]] == [
        (0, 1, 9, None),
        (1, 3, 3, None),
        (2, 9, 1, None),
    ]
    trials = {t["id"]: t for t in data["trials"]}
    assert len(trials) == 9 and data["trials"][0]["id"] == "t4"  # the promoted trial first
    winner = trials["t4"]
    assert winner["promoted"] and winner["stop"] == "finished" and winner["reached"] == 2
    assert winner["curve"] == [[b, pytest.approx(loss(SPACE[4], b))] for b in (1, 3, 9)]
    assert data["promoted"]["trial"] == "t4" and data["promoted"]["rung"] == 2
    # the best three after one epoch went on: two stopped at rung 1, six at rung 0
    rung0 = sorted(range(9), key=lambda i: loss(SPACE[i], 1))
    assert rung0.index(4) == 1
    assert {t["id"] for t in data["trials"] if t["reached"] == 1} == {f"t{i}" for i in rung0[:3]} - {"t4"}
    assert sorted(t["stop"] for t in data["trials"]) == ["finished"] + ["not chosen"] * 8
    assert all(not t["promoted"] for t in data["trials"][1:])
    # leaderboard: the highest rung reached first, then by the objective there
    assert [t["reached"] for t in data["trials"]] == [2, 1, 1, 0, 0, 0, 0, 0, 0]
    values = [t["value"] for t in data["trials"][3:]]
    assert values == sorted(values)
    # only what differs between trials (seed does not), in the search space's order
    assert data["params"] == ["lr", "hidden"] and winner["params"] == {"lr": 0.03, "hidden": 16}
    segment = winner["segments"][1]
    assert segment["key"] == "sweep.rung_1/" + str(segment["map_index"])
    assert segment["link"] == f"/torchx/lineage/d/run1?task_id=sweep.rung_1&map_index={segment['map_index']}"
    assert data["spent"] == 9 * 1 + 3 * 2  # what plan_2 recorded: rungs 0 and 1


def test_the_page_draws_a_curve_per_trial_stopped_rungs_the_winner_and_params_before_metrics():
    data = _view(*simulate_sweep(SPACE, BUDGETS, loss))
    page = _page(data)
    assert page.count('<polyline class="curve trial') == 9
    assert page.count('class="curve trial promoted"') == 1 and 'data-trial="t4" points=' in page
    assert page.count('class="curve trial stopped"') == 8 and page.count('<circle class="end') == 9
    assert "★ t4 promoted" in page and '<tr data-trial="t4" class="promoted">' in page
    head = page[page.index('<table class="runs sweep">') : page.index("</thead>")]
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", head)
    assert headers == [
        "Trial",
        "lr",
        "hidden",
        "rung 0 · budget 1",
        "rung 1 · budget 3",
        "rung 2 · budget 9",
        "Stopped",
        "Cost",
    ]
    # the x axis: log scale, a tick per rung; the y axis: round values
    x_labels = re.findall(r'class="tick x"[^>]*>([^<]*)<', page)
    y_labels = re.findall(r'class="tick y"[^>]*>([^<]*)<', page)
    assert x_labels == ["1", "3", "9"]
    assert all(re.fullmatch(r"-?\d+(\.\d{1,2})?", label) for label in y_labels), y_labels
    # where each stopped: its last cell marked, its rung in the Stopped column
    assert page.count('class="num stopped"') == 8
    assert page.count("rung 0 · not chosen") == 6 and page.count("rung 1 · not chosen") == 2
    assert "rung 2 · finished" in page
    assert 'href="/torchx/compare/d/run1?task_id=sweep.rung_1&amp;layout=runs"' in page


def test_a_failed_segment_drops_its_trial_and_a_budget_stops_the_sweep(monkeypatch):
    failed = simulate_sweep(SPACE, BUDGETS, loss, failed={(1, 4)})
    data = _view(*failed)
    trials = {t["id"]: t for t in data["trials"]}
    assert trials["t4"]["stop"] == "failed" and trials["t4"]["reached"] == 1
    assert trials["t4"]["segments"][1]["value"] is None and not trials["t4"]["promoted"]
    assert trials["t4"]["curve"] == [[1, pytest.approx(loss(SPACE[4], 1))]]  # no point for the failure
    assert trials["t4"]["segments"][1]["cost"] == 2.0  # what its job cost, though its task failed
    assert (
        trials["t4"]["segments"][1]["task_state"] == "failed" and trials["t4"]["segments"][1]["state"] is None
    )
    assert 'class="num failed"' in _page(data)

    # a budget the first rung fits (9 CPU-hours) and the second would pass: plan_1 stops the sweep
    extra = {"scheduler": "local_cwd", "prices": {"cpu_hour": 1.0}}
    monkeypatch.setenv("AIRFLOW_CONN_TORCHX_DEFAULT", json.dumps({"conn_type": "torchx", "extra": extra}))
    parts = {"component": "utils.python", "component_args": ["--cpu", "1", "-c", "print(1)"]}
    data = _view(*simulate_sweep(SPACE, BUDGETS, loss, max_cost=12, unit_duration=3600, app_parts=parts))
    assert [r["planned"] for r in data["rungs"]] == [9, 0, 0]
    assert "past max_cost=12" in data["rungs"][1]["stopped"]
    assert {t["stop"] for t in data["trials"]} == {"sweep stopped"} and len(data["trials"]) == 9
    best = min(range(9), key=lambda i: loss(SPACE[i], 1))
    assert data["trials"][0]["id"] == f"t{best}" and data["trials"][0]["promoted"]
    assert "stopped: rung 1" in _page(data)


def test_a_segment_s_own_record_of_its_trial_wins_over_its_plan():
    instances, xcoms = simulate_sweep(SPACE, BUDGETS, loss)
    plan = xcoms[("sweep.plan_1", -1)]["return_value"]
    plan[0], plan[1] = plan[1], plan[0]  # a plan cleared and run again since, in another order
    data = _view(instances, xcoms)
    assert data["trials"][0]["id"] == "t4" and len(data["trials"][0]["segments"]) == 3


def test_without_the_plans_record_the_objective_is_the_promotion_s():
    instances, xcoms = simulate_sweep(SPACE, BUDGETS, loss)
    for k in range(3):
        del xcoms[(f"sweep.plan_{k}", -1)][XCOM_SWEEP_SPEC]  # plans of an earlier version
    data = _view(instances, xcoms)
    assert data["objective"] == "val_loss" and [r["budget"] for r in data["rungs"]] == [1, 3, 9]
    del xcoms[("sweep.promote", -1)]
    data = _view(instances, xcoms)
    assert data["objective"] is None and "recorded no objective" in data["warnings"][0]
    assert all(t["curve"] == [] for t in data["trials"])
    assert "No segment of this sweep recorded" in _page(data)
    # where each stopped, from the next plan's list: no value was read, none failed
    assert sorted(t["stop"] for t in data["trials"]) == ["finished"] + ["not chosen"] * 8
    instances = [ti for ti in instances if ti.task_id != "sweep.rung_2"]  # rung 2 not started yet
    stops = {t["id"]: t["stop"] for t in _view(instances, xcoms)["trials"]}
    assert stops.pop("t4") == "pending" and set(stops.values()) == {"not chosen"}


def test_the_page_escapes_what_the_dag_and_the_jobs_named():
    evil = '<img src=x onerror="alert(1)">'
    space = [{"opt": evil, "n": n} for n in (1, 2, 3)]
    instances, xcoms = simulate_sweep(space, [1, 3], lambda p, b: 1.0 / (p["n"] * b), objective=evil)
    for pushed in xcoms.values():  # a job names its metrics as it likes
        result = pushed.get("return_value")
        if isinstance(result, dict) and "metrics" in result:
            result["metrics"][f"{evil}2"] = 1.0
    data = _view(instances, xcoms, dag_run_id=evil)
    assert data["objective"] == evil and data["trials"][0]["curve"]
    space_differs = [{"opt": f"{evil}{n}", "n": n} for n in (1, 2, 3)]
    instances2, xcoms2 = simulate_sweep(space_differs, [1, 3], lambda p, b: 1.0 / (p["n"] * b))
    for page in (_page(data), _page(_view(instances2, xcoms2))):
        assert "<img" not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page


@pytest.mark.parametrize(
    ("task_id", "sweep"),
    [
        ("sweep", "sweep"),
        ("sweep.rung_1", "sweep"),
        ("sweep.plan_0", "sweep"),
        ("sweep.promote", "sweep"),
        ("outer.sweep.rung_0", "outer.sweep"),
        ("train", None),
        ("other.rung_0", None),
    ],
)
def test_a_sweep_is_recognised_by_its_group_or_any_of_its_tasks(task_id, sweep):
    task_ids = ["sweep.plan_0", "sweep.rung_0", "sweep.plan_1", "sweep.rung_1", "sweep.promote", "train"]
    task_ids += ["outer.sweep.plan_0", "outer.sweep.rung_0", "other.rung_0"]
    assert sweep_of(task_ids, task_id) == sweep


def test_the_furthest_trials_series_are_read_from_their_trackers_joined_by_epoch(tmp_path, monkeypatch):
    """Only the trials that got furthest are read (their segments', a cache hit's from the run it
    stands for); the series is drawn beside the recorded values, which it does not change."""
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins import sweep_view

    instances, xcoms = simulate_sweep(SPACE, BUDGETS, loss)
    store = FsspecStore(str(tmp_path / "store"))
    for (task_id, _), pushed in xcoms.items():
        result = pushed.get("return_value")
        if task_id.startswith("sweep.rung_") and isinstance(result, dict):
            trial = result["sweep_trial"]
            epochs = range(int(trial["previous_budget"] or 0) + 1, int(trial["budget"]) + 1)
            series = [[e, loss(trial["params"], e) + 0.5] for e in epochs]  # not what the worker recorded
            store.add_metadata(
                pushed["torchx_run_id"], torchx_metrics={"final": {}, "series": {"val_loss": series}}
            )
    # the winner's last segment is a cache hit: its series is that of the run it stands for
    last = ("sweep.rung_2", 0)
    original = xcoms[last]["torchx_run_id"]
    xcoms[last]["torchx_run_id"] = "airflow://d/run1/sweep.rung_2/0"
    xcoms[last]["return_value"].update(cache_hit=True, cached_from=original)
    read: list[str] = []

    def counting(tracker, run_id, names=None):
        read.append(run_id)
        return real(tracker, run_id, names)

    real = sweep_view.metric_series
    monkeypatch.setattr(sweep_view, "metric_series", counting)
    view = SweepView("d", "run1", "sweep")
    fill_sweep(view, instances, xcoms, "/torchx")
    fields = {(s.task_id, s.map_index): {"tracker_conn_ids": ["fs"]} for t in view.trials for s in t.segments}
    sweep_view.read_series(view, fields, lambda conn_ids: store)
    data = sweep_json(view)
    winner = data["trials"][0]
    assert winner["id"] == "t4" and winner["highlight"] and sum(t["highlight"] for t in data["trials"]) == 1
    assert sorted(read) == sorted([s["torchx_run_id"] for s in winner["segments"][:2]] + [original])
    assert winner["series"] == [[e, pytest.approx(loss(SPACE[4], e) + 0.5)] for e in range(1, 10)]
    assert winner["curve"][-1] == [9, pytest.approx(loss(SPACE[4], 9))]  # still the worker's record
    page = _page(data)
    assert page.count('<polyline class="series" data-trial="t4"') == 1 and "as logged each epoch" in page
    # a tracker that cannot be opened: a warning, the layout unchanged
    view = SweepView("d", "run1", "sweep")
    fill_sweep(view, instances, xcoms, "/torchx")
    sweep_view.read_series(view, fields, lambda conn_ids: (_ for _ in ()).throw(OSError("down")))
    assert view.warnings == ["Tracker 'fs' could not be read: OSError: down"]
    assert sweep_json(view)["trials"][0]["series"] is None


HYPERBAND = [f"hb.b{s}.{kind}_{k}" for s in range(3) for k in range(3 - s) for kind in ("plan", "rung")]


@pytest.mark.parametrize(
    ("task_id", "sweep", "brackets"),
    [
        ("hb.b1.rung_1", "hb.b1", []),  # a bracket's task: that bracket, a sweep of its own
        ("hb.b2.plan_0", "hb.b2", []),
        ("hb", None, ["hb.b0", "hb.b1", "hb.b2"]),  # the sweep's group or promotion: its brackets
        ("hb.promote", None, ["hb.b0", "hb.b1", "hb.b2"]),
        ("hb.b1", "hb.b1", []),
        ("other", None, []),
    ],
)
def test_a_hyperband_sweep_is_shown_bracket_by_bracket(task_id, sweep, brackets):
    known = [*HYPERBAND, "hb.promote", "other"]
    assert (sweep_of(known, task_id), brackets_of(known, task_id)) == (sweep, brackets)
    if brackets:  # the bracket the promotion published a trial of, else the one that trains the most
        assert choose_bracket(brackets, {"runs_of": "hb.b1.rung_1", "map_index": 0}) == "hb.b1"
        assert choose_bracket(brackets, None) == "hb.b2"


def test_a_bracket_marks_the_sweep_s_promotion_when_it_is_its_trial_else_names_where_it_is():
    instances, xcoms = simulate_sweep(SPACE, BUDGETS, loss, sweep_id="hb.b2", promote_task_id="hb.promote")
    view = SweepView("d", "run1", "hb.b2", brackets=["hb.b0", "hb.b1", "hb.b2"])
    fill_sweep(view, instances, xcoms, "/torchx")
    data = sweep_json(view)
    assert data["trials"][0]["promoted"] and data["promoted"]["trial"] == "t4"
    page = _page(data)
    assert "Hyperband brackets: " in page and "<b>b2 (shown)</b>" in page
    assert 'href="/torchx/compare/d/run1?task_id=hb.b0"' in page
    xcoms[("hb.promote", -1)]["return_value"].update(runs_of="hb.b1.rung_1", map_index=0)
    view = SweepView("d", "run1", "hb.b2")
    fill_sweep(view, instances, xcoms, "/torchx")
    data = sweep_json(view)
    assert not any(t["promoted"] for t in data["trials"]) and data["promoted_elsewhere"] == "hb.b1.rung_1"
    assert "promoted: a trial of hb.b1.rung_1" in _page(data)


@pytest.mark.parametrize(("low", "high"), [(1.7e308, -1.7e308), (0.0, 5e-324)])
def test_a_sweep_of_finite_extremes_is_drawn_inside_the_plot(low, high):
    instances, xcoms = simulate_sweep(SPACE, BUDGETS, lambda p, b: low if p["hidden"] == 8 else high)
    page = _page(_view(instances, xcoms))
    svg = page[page.index("<svg") : page.index("</svg>")]
    coords = re.findall(r'(?:points|cx|cy|x|y)="([-\d., ]+)"', svg)
    numbers = [float(c) for text in coords for part in text.split() for c in part.split(",")]
    assert numbers and all(0 <= n <= 760 for n in numbers)


def test_a_store_s_step_past_a_float_s_range_leaves_out_that_point_only(tmp_path):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins import sweep_view

    instances, xcoms = simulate_sweep(SPACE, BUDGETS, loss)
    store = FsspecStore(str(tmp_path / "store"))
    view = SweepView("d", "run1", "sweep")
    fill_sweep(view, instances, xcoms, "/torchx")
    winner = view.trials[0]
    for segment in winner.segments:  # a JSON store holds any int a job wrote
        series = [[1, 0.5], [10**400, 0.4], [segment.rung + 2, 0.3]]
        store.add_metadata(segment.logged_by, torchx_metrics={"final": {}, "series": {"val_loss": series}})
    fields = {(s.task_id, s.map_index): {"tracker_conn_ids": ["fs"]} for s in winner.segments}
    sweep_view.read_series(view, fields, lambda conn_ids: store)
    assert winner.series == [[1.0, 0.5], [2.0, 0.3], [3.0, 0.3], [4.0, 0.3]] and view.warnings == []
    assert "<svg" in _page(sweep_json(view))


def test_a_tracker_s_series_does_not_set_the_axes_of_the_recorded_curves():
    """A series point far outside (step 10**12, a value of 1e9) is left out; the recorded curves keep
    the plot: the winner's first and last recorded points at the plot's left and right edges."""
    data = _view(*simulate_sweep(SPACE, BUDGETS, loss))
    plain = _page(data)
    winner = data["trials"][0]
    inside = [[2.0, winner["curve"][0][1]], [5.0, winner["curve"][-1][1]]]
    winner["series"] = [[1.0, 1e9], *inside, [10.0**12, 0.2]]
    page = _page(data)
    assert re.findall(r'class="tick [xy]"[^>]*>([^<]*)<', page) == re.findall(
        r'class="tick [xy]"[^>]*>([^<]*)<', plain
    )
    curve = re.search(r'class="curve trial promoted" data-trial="t4" points="([^"]*)"', page).group(1)
    assert curve.split()[0].startswith("64.0,") and curve.split()[-1].startswith("744.0,")
    (series,) = re.findall(r'class="series" data-trial="t4" points="([^"]*)"', page)
    assert len(series.split()) == 2  # the two points inside the recorded range


def test_a_segment_s_cost_counts_its_resubmitted_attempts_as_the_plans_count_them():
    """A job the infrastructure ended and its task resubmitted: the Cost column is what the plan
    counted against max_cost (``policies.cost.usage.spent_total``), not the last job's alone."""
    from torchx_airflow.policies.cost.usage import spent_total

    instances, xcoms = simulate_sweep(SPACE, BUDGETS, loss)
    result = xcoms[("sweep.rung_0", 4)]["return_value"]
    result["attempts"] = [{"cost": {"actual": {"total": 0.75, "currency": "USD"}}}, {"cost": result["cost"]}]
    data = _view(instances, xcoms)
    winner = data["trials"][0]
    assert winner["id"] == "t4" and winner["segments"][0]["cost"] == spent_total(result) == 1.75
    assert re.search(r'<tr data-trial="t4".*?<td class="num">9.75 USD</td></tr>', _page(data))


@pytest.fixture(scope="module")
def metadata_db():
    """Airflow's tables the view reads (DAG runs, task instances, XComs, rendered fields) in an
    in-memory SQLite database: the view's queries run on a real SQL engine."""
    from airflow.models import import_all_models
    from airflow.models.base import Base
    from airflow.models.dagrun import DagRun
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from sqlalchemy import create_engine
    from sqlalchemy.pool import StaticPool

    import_all_models()
    engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    tables = [m.__table__ for m in (DagRun, TaskInstance, XComModel, RenderedTaskInstanceFields)]
    Base.metadata.create_all(engine, tables=tables)
    yield engine
    engine.dispose()


def _load(engine, dag_run_id: str, sweep_id: str = "sweep") -> dict:
    from sqlalchemy.orm import Session

    from torchx_airflow.plugins.sweep_view import load_sweep

    with Session(engine) as session:
        return sweep_json(load_sweep(session, "d", dag_run_id, sweep_id, "/torchx", lambda ids: None))


def test_over_the_segments_bound_the_highest_rungs_are_shown_and_only_their_xcoms_read(
    metadata_db, monkeypatch
):
    """13 segments, 5 shown: rung 2's, rung 1's and one of rung 0 (the rungs by number, not as text:
    rung_10 before rung_2); the XComs read are the plans', the promotion's and those 5 segments'."""
    from airflow.models.xcom import XComModel
    from sqlalchemy.orm import Session

    from tests.sweep_xcoms import store_sweep
    from torchx_airflow.plugins import sweep_view

    instances, xcoms = simulate_sweep(SPACE, BUDGETS, loss)
    with Session(metadata_db) as session:
        store_sweep(session, "d", "capped", instances, xcoms)
    monkeypatch.setattr(sweep_view, "MAX_SEGMENTS", 5)
    read: list[tuple[str, int]] = []
    deserialize = XComModel.deserialize_value
    monkeypatch.setattr(
        XComModel,
        "deserialize_value",
        lambda row: read.append((row.task_id, row.map_index)) or deserialize(row),
    )
    data = _load(metadata_db, "capped")
    shown = sorted((s["task_id"], s["map_index"]) for t in data["trials"] for s in t["segments"])
    assert shown == [
        ("sweep.rung_0", 0),
        ("sweep.rung_1", 0),
        ("sweep.rung_1", 1),
        ("sweep.rung_1", 2),
        ("sweep.rung_2", 0),
    ]
    assert data["segments_not_shown"] == 8
    winner = data["trials"][0]
    assert (winner["id"], winner["promoted"], winner["reached"], winner["stop"]) == (
        "t4",
        True,
        2,
        "finished",
    )
    plans = {(f"sweep.plan_{k}", -1) for k in range(3)}
    assert set(read) == plans | {("sweep.promote", -1)} | set(shown)

    wide = [
        SimpleNamespace(task_id=f"wide.rung_{k}", map_index=i, state="success")
        for k, n in ((0, 4), (2, 2), (10, 1))
        for i in range(n)
    ]
    with Session(metadata_db) as session:
        store_sweep(session, "d", "wide", wide, {("wide.plan_0", -1): {}})
        monkeypatch.setattr(sweep_view, "MAX_SEGMENTS", 3)
        rows, not_shown, cut = sweep_view._instances(session, "d", "wide", "wide")
    assert [(r.task_id, r.map_index) for r in rows] == [
        ("wide.rung_10", 0),
        ("wide.rung_2", 0),
        ("wide.rung_2", 1),
    ]
    assert (not_shown, cut) == (4, {0})


def test_a_trial_whose_later_segments_were_left_out_gets_no_stop_reason():
    instances, xcoms = simulate_sweep(SPACE, BUDGETS, loss)
    instances = [ti for ti in instances if ti.task_id != "sweep.rung_1" or ti.map_index == 0]
    view = SweepView("d", "run1", "sweep")
    fill_sweep(view, instances, xcoms, "/torchx", cut_rungs={1})
    stops = {t.id: t.stop for t in view.trials if t.reached == 0}  # rung 1 cut: each may be there
    assert len(stops) == 7 and set(stops.values()) == {"not shown"}
    assert {t.stop for t in view.trials if t.reached > 0} <= {"finished", "not chosen"}
    assert "rung 0 · later segments not shown" in _page(sweep_json(view))


def test_a_plan_that_failed_stops_the_sweep_and_is_named(metadata_db):
    from sqlalchemy.orm import Session

    from tests.sweep_xcoms import store_sweep

    instances, xcoms = simulate_sweep(SPACE, BUDGETS, loss, promote=False)
    del xcoms[("sweep.plan_2", -1)]  # a plan that failed pushed nothing, and rung 2 never ran
    instances = [ti for ti in instances if ti.task_id != "sweep.rung_2"]
    with Session(metadata_db) as session:
        store_sweep(session, "d", "plan-failed", instances, xcoms, {"sweep.plan_2": "failed"})
    data = _load(metadata_db, "plan-failed")
    assert {t["id"] for t in data["trials"] if t["stop"] == "sweep stopped"} == {"t3", "t4", "t7"}
    assert data["rungs"][2]["stopped"] == "its plan sweep.plan_2 failed: no trial went on"
    assert "pending" not in {t["stop"] for t in data["trials"]}
    assert "stopped: its plan sweep.plan_2 failed" in _page(data)
