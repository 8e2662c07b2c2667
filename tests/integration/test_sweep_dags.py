"""Sweeps through a real DAG run (``airflow dags test``, local_cwd; tests/dags/torchx_sweep_dags.py):
27 configurations by successive halving, rungs at 1, 3 and 9 epochs, where the best configuration
after 9 epochs is only 4th after one (tests/dags/jobs/sweep_trial.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

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


def test_a_27_configuration_sweep_picks_the_best_trains_a_third_reruns_from_cache_and_stops_at_a_budget(
    run_dag, tmp_path
):
    out = tmp_path / "runs"
    env = _env(tmp_path / "store", out)
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
