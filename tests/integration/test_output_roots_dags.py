"""One setting for where outputs may lie (``output_roots``), through real DAG runs (``airflow dags
test``, local_cwd, a real fsspec store): a cached task whose parent's job writes where its
environment says, a directory no argument names, takes its key and hits on an unchanged rerun once
the torchx connection's extra ``output_roots`` names that directory; without it, the task cannot take
its key, runs every time, and its log says which path lies outside the roots and names
``output_roots``."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def _runs(run_dag, tmp_path, roots: list[str] | None) -> tuple[list, list[str], str]:
    out, ledger, store = tmp_path / "out", tmp_path / "ledger", tmp_path / "store"
    ledger.touch()
    extra = {"scheduler": "local_cwd", "trackers": ["roots_fs"]}
    if roots is not None:
        extra["output_roots"] = [str(r) for r in roots]
    env = {
        "AIRFLOW_CONN_TORCHX_DEFAULT": json.dumps({"conn_type": "torchx", "extra": extra}),
        "AIRFLOW_CONN_ROOTS_FS": json.dumps({"conn_type": "torchx_fsspec", "extra": {"root": str(store)}}),
    }
    conf = {"out": str(out), "ledger": str(ledger)}
    results = [run_dag("tx_output_roots", conf=conf, env=env) for _ in range(2)]
    return results, ledger.read_text().split(), str(out / "train.txt")


def test_a_parent_writing_under_an_output_root_lets_its_child_take_its_key_and_hit(run_dag, tmp_path):
    results, ran, _ = _runs(run_dag, tmp_path, roots=[tmp_path / "out"])
    assert [r.returncode for r in results] == [0, 0], results[-1].output[-4000:]
    assert ran == ["train", "evaluate", "train"]  # the rerun evaluated nothing
    assert [r.xcom("evaluate")["cache_hit"] for r in results] == [False, True]


def test_without_output_roots_the_child_runs_each_time_and_its_log_names_the_setting(run_dag, tmp_path):
    results, ran, path = _runs(run_dag, tmp_path, roots=None)
    assert [r.returncode for r in results] == [0, 0], results[-1].output[-4000:]
    assert ran == ["train", "evaluate", "train", "evaluate"]
    first = results[0].output
    assert f"{path!r} lies outside the task's output roots" in first and "output_roots" in first
    assert "Not caching this run: its cache key could not be computed" in first
