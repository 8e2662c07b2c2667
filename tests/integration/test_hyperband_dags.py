"""Hyperband through a real DAG run (``airflow dags test``, local_cwd; tests/dags/torchx_hyperband_dags.py):
9 configurations (lr x depth) on rungs at 1, 3 and 9 epochs, seed 0, within a ``max_cost`` each
bracket gets a share of. Bracket b2 is successive halving over all nine: lr=0.1 leads after one epoch
and it keeps lr=0.1 to the end; bracket b1 starts five of them at 3 epochs and finds the best
(lr=0.03, depth=2), which the promotion, comparing every bracket at 9 epochs, publishes; bracket b0's
first rung, priced from its trials' requests, passes its share: it trains nothing. The comparison
view (the plugin's routes, tests/plugin_views.py) shows the sweep bracket by bracket."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.plugin_views import plugin_client, view_of
from torchx_airflow.sweeps.segment import TRIAL_FIELDS as RECORDED
from torchx_airflow.sweeps.tasks import RESULT_TRIAL

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

# configuration index = 3 x lr's position + depth's position (tests/dags/torchx_hyperband_dags.py)
BEST, EARLY_LEADER = 4, 7  # lr=0.03 depth=2; lr=0.1 depth=2
#: bracket -> the configuration indexes each of its rungs trains (seed 0; sweep_trial.py's curves)
EXPECTED = {2: [list(range(9)), [6, 7, 8], [EARLY_LEADER]], 1: [[0, 3, 4, 5, 8], [BEST]], 0: [[]]}
BUDGETS = {2: [1, 3, 9], 1: [3, 9], 0: [9]}


def _env(store_root, out) -> dict[str, str]:
    extra = {
        "scheduler": "local_cwd",
        "trackers": ["hyperband_fs"],
        "output_roots": [str(out)],
        "prices": {"cpu_hour": 3600.0, "currency": "CPU-s"},  # a segment costs its CPU seconds
    }
    return {
        "AIRFLOW_CONN_TORCHX_DEFAULT": json.dumps({"conn_type": "torchx", "extra": extra}),
        "AIRFLOW_CONN_HYPERBAND_FS": json.dumps(
            {"conn_type": "torchx_fsspec", "extra": {"root": str(store_root)}}
        ),
    }


def _plans(result) -> dict[int, list[list[dict]]]:
    return {
        s: [[p["trial"] for p in result.xcom(f"hyperband.b{s}.plan_{k}")] for k in range(len(BUDGETS[s]))]
        for s in BUDGETS
    }


def _segments(result, s: int, k: int, count: int) -> list[dict]:
    return [result.xcom(f"hyperband.b{s}.rung_{k}", map_index=i) for i in range(count)]


def test_hyperband_brackets_run_within_their_shares_resume_and_promote_the_best_at_max_budget(
    run_dag, tmp_path, monkeypatch
):
    out = tmp_path / "runs"
    env = _env(tmp_path / "store", out)
    result = run_dag("tx_hyperband", conf={"out": str(out)}, env=env, timeout=500)
    assert result.states.get("hyperband.promote") == "success", result.output[-6000:]
    plans = _plans(result)
    assert {s: [[t["index"] for t in rung] for rung in plans[s]] for s in plans} == EXPECTED
    trained = 0
    for s, rungs in plans.items():
        for k, trials in enumerate(rungs):
            assert all(t["bracket"] == s and t["budget"] == BUDGETS[s][k] for t in trials), trials
            assert [t["id"] for t in trials] == [f"b{s}-t{t['index']}" for t in trials]
            segments = _segments(result, s, k, len(trials))
            assert all(seg["state"] == "SUCCEEDED" and not seg.get("cache_hit") for seg in segments)
            # what each job was told, as its worker recorded it: its own bracket, budget and id
            assert [seg[RESULT_TRIAL] for seg in segments] == [
                {key: t[key] for key in (*RECORDED, "bracket")} for t in trials
            ]
            trained += sum(seg["metadata"]["epochs_trained"] for seg in segments)
            for trial, segment in zip(trials, segments, strict=True):
                if k == 0:  # a bracket's first rung starts from scratch, at its own budget
                    assert trial["resume_from"] is None and segment["metadata"]["resumed_at"] == 0
                    continue
                # a continuing segment resumed from its own trial's segment of the rung before, in its bracket
                assert segment["metadata"]["resumed_at"] == BUDGETS[s][k - 1]
                assert trial["resume_from"] == str(out / trial["id"] / f"r{k - 1}" / "checkpoint.json")
                assert segment["sources"] == [trial["source"]]
    assert trained == (9 + 3 * 2 + 6) + (5 * 3 + 6)  # b2 and b1: 42 epochs

    # b0's first rung, 3 trials x 9 units x 20 s x 1 CPU, passes its share 1200 x 27 / 78; the others
    # train within theirs
    stopped = result.xcom("hyperband.b0.plan_0", key="torchx_sweep")["stopped"]
    assert "rung 0 (3 trials to 9) would cost about 540.0000 more, past max_cost=415.385" in stopped, stopped
    assert (
        "Bracket b0 spends within max_cost=415.385, its share of the sweep's max_cost=1200" in result.output
    )
    for s, rungs in ((2, 3), (1, 2)):
        state = result.xcom(f"hyperband.b{s}.plan_{rungs - 1}", key="torchx_sweep")
        assert "stopped" not in state and 0 < state["spent"] < 1200 * (27 if s == 2 else 24) / 78, state

    promoted = result.xcom("hyperband.promote")
    assert promoted["path"] == str(out / f"b1-t{BEST}" / "r1" / "model.txt")
    assert result.xcom("hyperband.b2.plan_2")[0]["trial"]["id"] == f"b2-t{EARLY_LEADER}"  # halving's pick
    assert result.output.count("Promoted ") == 1
    assert subprocess.run(["pgrep", "-af", str(out)], capture_output=True, text=True).stdout == ""

    # the comparison view: the sweep's group (or promote) shows the bracket whose trial was promoted,
    # each bracket's tasks show that bracket, a sweep of successive halving of its own
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with plugin_client() as views:
        b1 = view_of(views, "/api/compare", result, task_id="hyperband.promote")
        assert (
            b1["sweep_id"] == "hyperband.b1"
            and view_of(views, "/api/compare", result, task_id="hyperband") == b1
        )
        assert b1["brackets"] == ["hyperband.b0", "hyperband.b1", "hyperband.b2"]
        assert [r["budget"] for r in b1["rungs"]] == BUDGETS[1]
        assert sorted(t["index"] for t in b1["trials"]) == EXPECTED[1][0]
        assert b1["trials"][0]["id"] == f"b1-t{BEST}" and b1["trials"][0]["promoted"]
        assert [(t["reached"], t["stop"]) for t in b1["trials"]] == [(1, "finished")] + [
            (0, "not chosen")
        ] * 4
        b2 = view_of(views, "/api/compare", result, task_id="hyperband.b2.rung_0")
        assert b2["promoted_elsewhere"] == "hyperband.b1.rung_1" and not any(
            t["promoted"] for t in b2["trials"]
        )
        assert [t["id"] for t in b2["trials"] if t["stop"] == "finished"] == [f"b2-t{EARLY_LEADER}"]
        b0 = view_of(views, "/api/compare", result, task_id="hyperband.b0.plan_0")
        assert b0["trials"] == [] and "past max_cost" in b0["rungs"][0]["stopped"]
        page = view_of(views, "/compare", result, task_id="hyperband.b2.plan_1")
        assert "Hyperband brackets: " in page and "<b>b2 (shown)</b>" in page
