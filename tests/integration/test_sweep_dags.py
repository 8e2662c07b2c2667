"""Sweeps through a real DAG run (``airflow dags test``, local_cwd; tests/dags/torchx_sweep_dags.py):
27 configurations by successive halving, rungs at 1, 3 and 9 epochs, where the best configuration
after 9 epochs is only 4th after one (tests/dags/jobs/sweep_trial.py).

The views of the sweep are read from the same runs, through the plugin's own app and routes (its
access checks stood in for: tests/integration/test_compare_view.py runs them against Airflow's auth):
the comparison as trials x rungs, and the lineage graph of each trial's chain of segments."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.parse

import pytest

from tests.plugin_views import plugin_client, view_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

BEST = {"lr": 0.03, "width": 16, "depth": 2}
GRID_EPOCHS = 27 * 9


def _env(store_root, out) -> dict[str, str]:
    # output_roots: a continuing segment's key reads its previous segment's checkpoint there
    extra = {
        "scheduler": "local_cwd",
        "trackers": ["sweep_fs"],
        "output_roots": [str(out)],
        "prices": {"cpu_hour": 3600.0, "currency": "CPU-s"},  # a segment costs its CPU seconds
    }
    return {
        "AIRFLOW_CONN_TORCHX_DEFAULT": json.dumps({"conn_type": "torchx", "extra": extra}),
        "AIRFLOW_CONN_SWEEP_FS": json.dumps(
            {"conn_type": "torchx_fsspec", "extra": {"root": str(store_root)}}
        ),
    }


def _segments(result, rung: int, count: int) -> list[dict]:
    return [result.xcom(f"sweep.rung_{rung}", map_index=i) for i in range(count)]


def _choices(plans: list[list[dict]]) -> list[list[dict]]:
    return [[{k: v for k, v in p["trial"].items() if k != "source"} for p in plan] for plan in plans]


def _processes(out) -> str:
    return subprocess.run(["pgrep", "-af", str(out)], capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def views():
    with plugin_client() as client:
        yield client


def _chains(result, plans: list[list[dict]]) -> dict[str, list[tuple[str, str | None]]]:
    """Each trial's segments, rung by rung: (run id, the run a cache hit stands for)."""
    chains: dict[str, list[tuple[str, str | None]]] = {}
    for k, plan in enumerate(plans):
        for i, segment in enumerate(plan):
            run_id = result.xcom(f"sweep.rung_{k}", "torchx_run_id", map_index=i)
            cached_from = result.xcom(f"sweep.rung_{k}", map_index=i).get("cached_from")
            chains.setdefault(segment["trial"]["id"], []).append((run_id, cached_from))
    return chains


def _check_lineage(views, result, plans: list[list[dict]]) -> None:
    """The lineage view shows each trial as its chain of segments: a continuing segment's one parent
    in the DAG run is its trial's previous segment; a cache hit's other parent is the run it stands
    for (``cached_from``), and it has no other."""
    graph = view_of(views, "/api/lineage", result, depth=3)
    chains = _chains(result, plans)
    runs = {run["id"]: run for run in graph["runs"]}
    parents: dict[str, set[str]] = {}
    for edge in graph["edges"]:
        parents.setdefault(edge["target"], set()).add(edge["source"])
    chained = {run_id for chain in chains.values() for run_id, _ in chain}
    assert chained <= {run_id for run_id, run in runs.items() if run["in_dag_run"]}
    for trial, chain in chains.items():
        before = None
        for run_id, cached_from in chain:
            expected = {p for p in (before, cached_from) if p}
            assert parents.get(run_id, set()) == expected, (trial, run_id, parents.get(run_id), expected)
            before = run_id
    continuing = [run_id for run_id in chained if parents.get(run_id, set()) & chained]
    assert len(continuing) == 9 + 3


def _check_comparison(views, result, plans: list[list[dict]], segments, winner: dict) -> dict:
    """The comparison view of any of the sweep's tasks shows the sweep: trials x rungs, each trial's
    curve of what its segments' workers recorded, where it stopped, the promoted trial first."""
    data = view_of(views, "/api/compare", result, task_id="sweep.rung_1")
    assert data["layout"] == "sweep" and data["sweep_id"] == "sweep"
    assert (data["objective"], data["mode"], data["params"]) == ("val_loss", "min", ["lr", "width", "depth"])
    assert [(r["budget"], r["planned"]) for r in data["rungs"]] == [(1, 27), (3, 9), (9, 3)]
    trials = {t["id"]: t for t in data["trials"]}
    assert len(trials) == 27 and data["trials"][0]["id"] == winner["id"] and data["trials"][0]["promoted"]
    assert data["promoted"]["trial"] == winner["id"] and data["promoted"]["rung"] == 2
    for k, plan in enumerate(plans):
        for p, s in zip(plan, segments[k], strict=True):
            trial = trials[p["trial"]["id"]]
            assert trial["params"] == p["trial"]["params"]
            assert trial["curve"][k] == [p["trial"]["budget"], s["metrics"]["val_loss"]]
    # the trials that got furthest: their per-epoch series as their segments logged it, joined
    furthest = [t for t in data["trials"] if t["highlight"]]
    assert sorted(t["id"] for t in furthest) == sorted(p["trial"]["id"] for p in plans[2])
    for trial in furthest:
        assert [step for step, _ in trial["series"]] == list(range(1, 10))
        assert [p for p in trial["series"] if p[0] in (1, 3, 9)] == trial["curve"]
    assert all(t["series"] is None for t in data["trials"] if not t["highlight"])
    stops = [(t["reached"], t["stop"]) for t in data["trials"]]
    assert sorted(stops) == [(0, "not chosen")] * 18 + [(1, "not chosen")] * 6 + [(2, "finished")] * 3
    assert sum(t["promoted"] for t in data["trials"]) == 1
    assert view_of(views, "/api/compare", result, task_id="sweep") == data  # the group's id: the same
    runs = view_of(views, "/api/compare", result, task_id="sweep.rung_1", layout="runs")
    assert runs["layout"] == "runs" and len(runs["runs"]) == 9
    path = f"/api/compare/{result.dag_id}/{urllib.parse.quote(result.run_id, safe='')}"
    reply = views.get(path, params={"task_id": "prepare", "layout": "sweep"})
    assert reply.status_code == 404 and "'prepare'" in reply.text and "not part of a sweep" in reply.text
    page = view_of(views, "/compare", result, task_id="sweep.promote")
    assert page.count('<polyline class="curve trial') == 27 and page.count('<polyline class="series"') == 3
    assert f"★ {winner['id']} promoted" in page and page.count('<tr data-trial="') == 27
    assert re.findall(r'class="tick x"[^>]*>([^<]*)<', page) == ["1", "3", "9"]
    assert page.count("rung 0 · not chosen") == 18 and page.count("rung 2 · finished") == 3
    return data


def test_a_27_configuration_sweep_picks_the_best_trains_a_third_reruns_from_cache_and_stops_at_a_budget(
    run_dag, tmp_path, views, monkeypatch
):
    out = tmp_path / "runs"
    env = _env(tmp_path / "store", out)
    for name, value in env.items():  # the views read the store as the tasks' connections name it
        monkeypatch.setenv(name, value)
    result = run_dag("tx_sweep", conf={"out": str(out)}, env=env, timeout=900)
    assert result.states.get("sweep.promote") == "success", result.output[-6000:]
    plans = [result.xcom(f"sweep.plan_{k}") for k in range(3)]
    assert [len(p) for p in plans] == [27, 9, 3]
    segments = [_segments(result, k, len(plans[k])) for k in range(3)]
    assert all(s["state"] == "SUCCEEDED" and not s.get("cache_hit") for rung in segments for s in rung)

    trained = sum(s["metadata"]["epochs_trained"] for rung in segments for s in rung)
    assert trained <= 0.4 * GRID_EPOCHS, trained  # 27 + 9 x 2 + 3 x 6 = 63 with resuming
    assert trained == 27 + 9 * 2 + 3 * 6
    assert 27 - len(plans[1]) >= 15  # stopped after one epoch
    # a continuing segment resumed from its own trial's previous segment, and links to it alone
    for k in (1, 2):
        for plan, segment in zip(plans[k], segments[k], strict=True):
            trial = plan["trial"]
            assert segment["metadata"]["resumed_at"] == [1, 3][k - 1]
            assert segment["sources"] == [trial["source"]]
            before = plans[k - 1][[p["trial"]["index"] for p in plans[k - 1]].index(trial["index"])]
            assert trial["resume_from"] == str(out / before["trial"]["id"] / f"r{k - 1}" / "checkpoint.json")

    promoted = result.xcom("sweep.promote")
    winner = next(p["trial"] for p in plans[2] if p["trial"]["params"] == BEST)
    assert promoted["path"] == str(out / winner["id"] / "r2" / "model.txt")
    rung0 = {
        p["trial"]["index"]: s["metrics"]["val_loss"] for p, s in zip(plans[0], segments[0], strict=True)
    }
    assert sorted(rung0, key=rung0.__getitem__).index(winner["index"]) == 3  # 4th after one epoch
    assert result.output.count("Promoted ") == 1
    assert _processes(out) == ""
    _check_lineage(views, result, plans)
    data = _check_comparison(views, result, plans, segments, winner)

    again = run_dag("tx_sweep", conf={"out": str(out)}, env=env, timeout=900)
    assert again.states.get("sweep.promote") == "success", again.output[-6000:]
    replans = [again.xcom(f"sweep.plan_{k}") for k in range(3)]
    for k in range(3):
        hits = [s.get("cache_hit") for s in _segments(again, k, len(replans[k]))]
        assert all(hits), (k, hits)
    # the same choices; each continuing segment's parent is this run's record of the one before
    assert _choices(replans) == _choices(plans)
    assert all(p["trial"]["source"].startswith("airflow://tx_sweep/") for k in (1, 2) for p in replans[k])
    assert again.xcom("sweep.promote")["path"] == promoted["path"]
    _check_lineage(views, again, replans)  # the cache hits' chains too
    rerun = view_of(views, "/api/compare", again, task_id="sweep")
    # the same layout from the hits' own records, each hit's series that of the run it stands for
    assert [(t["id"], t["curve"], t["series"], t["stop"]) for t in rerun["trials"]] == [
        (t["id"], t["curve"], t["series"], t["stop"]) for t in data["trials"]
    ]

    # the same sweep, uncached, under a budget that the first rung fits and the second would pass:
    # it stops after the first rung and promotes the best trial after one epoch
    rung0_cost = sum(s["cost"]["actual"]["total"] for s in segments[0])
    full_cost = sum(s["cost"]["actual"]["total"] for rung in segments for s in rung)
    budget = 1.5 * rung0_cost
    assert budget < full_cost
    out2 = tmp_path / "budget"
    env2 = {**_env(tmp_path / "store", out2), "TX_SWEEP_MAX_COST": repr(budget)}
    capped = run_dag("tx_sweep_budget", conf={"out": str(out2)}, env=env2, timeout=900)
    assert capped.states.get("sweep.promote") == "success", capped.output[-6000:]
    assert [len(capped.xcom(f"sweep.plan_{k}")) for k in range(3)] == [27, 0, 0]
    assert "Sweep stops: rung 1" in capped.output and "past max_cost" in capped.output
    spent = sum(s["cost"]["actual"]["total"] for s in _segments(capped, 0, 27))
    assert spent <= budget, (spent, budget)
    first = capped.xcom("sweep.plan_0")
    leader = next(p["trial"] for p in first if p["trial"]["params"] == {"lr": 0.1, "width": 16, "depth": 2})
    assert capped.xcom("sweep.promote")["path"] == str(out2 / leader["id"] / "r0" / "model.txt")
