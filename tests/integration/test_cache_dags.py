"""Lineage-based caching through real DAG runs (``airflow dags test``) on local_cwd, with an fsspec
store and a real MLflow server: a three-step pipeline run again unchanged submits nothing; each
single-field change re-runs the changed step and everything downstream of it while the steps
upstream stay cached (no false hit); a failed run is never a hit; the MLflow store's records are
read when it is the only tracker. Step ``a`` is cached through its connection's extra ``cache``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.mlflow_store import MlflowStore

from tests.conftest import DagRunResult
from tests.dags.torchx_cache_dags import SECRET
from tests.openlineage_events import datasets, file_transport, read_events, run_dataset, task_events, validate
from tests.secret_search import find_secret

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]
STEPS = ("a", "b", "c")


class Pipeline:
    """Runs ``tx_cache`` with a conf changed from the baseline, and reads what each run did."""

    def __init__(self, run_dag, root: Path, mlflow_uri: str, tmp: Path) -> None:
        self.run_dag = run_dag
        self.root = root
        self.ledger = tmp / "ledger"
        self.ledger.touch()
        self.baseline = {"output_dir": str(tmp / "out"), "ledger": str(self.ledger)}
        self.mlflow_uri = mlflow_uri
        self.durations: list[float] = []
        self.tmp = tmp
        self.events: dict[str, list[dict]] = {}  # DAG run id -> its OpenLineage events

    def env(self, trackers: list[str]) -> dict[str, str]:
        conn = {
            "conn_type": "torchx",
            "extra": {"scheduler": "local_cwd", "trackers": trackers, "cache": True},
        }
        return {
            "AIRFLOW_CONN_TORCHX_DEFAULT": json.dumps(conn),
            "AIRFLOW_CONN_CACHE_FS": json.dumps(
                {"conn_type": "torchx_fsspec", "extra": {"root": str(self.root)}}
            ),
            "AIRFLOW_CONN_CACHE_ML": json.dumps(
                {"conn_type": "mlflow", "host": self.mlflow_uri, "extra": {"experiment": "cache"}}
            ),
        }

    def run(
        self,
        trackers: tuple[str, ...] = ("cache_fs", "cache_ml"),
        dag_id: str = "tx_cache",
        env: dict[str, str] | None = None,
        **changes,
    ):
        before = self.ledger.read_text().split()
        events = self.tmp / f"events-{len(self.durations)}.jsonl"
        env = {**self.env(list(trackers)), **file_transport(events), **(env or {})}
        started = time.monotonic()
        result = self.run_dag(dag_id, conf={**self.baseline, **changes}, env=env)
        self.durations.append(time.monotonic() - started)
        self.events[result.run_id] = read_events(events) if events.exists() else []
        ran = self.ledger.read_text().split()[len(before) :]
        return result, ran


def first_run(run_dag, tmp: Path, mlflow_uri: str) -> tuple[Pipeline, DagRunResult]:
    """``tx_cache`` run once in ``tmp``: every step ran and recorded its key in both stores."""
    pipe = Pipeline(run_dag, tmp / "store", mlflow_uri, tmp)
    first, ran = pipe.run()
    assert first.returncode == 0, first.output[-6000:]
    assert ran == ["a", "b", "c"]
    return pipe, first


@pytest.fixture(scope="module")
def pipeline(run_dag, tmp_path_factory, mlflow_uri):
    return first_run(run_dag, tmp_path_factory.mktemp("cache"), mlflow_uri)


def task_seconds(result) -> dict[str, float]:
    """Each task's run time as Airflow recorded it (start to end of its task instance)."""
    import sqlite3
    from datetime import datetime

    with sqlite3.connect(result.db) as conn:
        rows = conn.execute(
            "SELECT task_id, start_date, end_date FROM task_instance WHERE dag_id=? AND run_id=?",
            (result.dag_id, result.run_id),
        ).fetchall()
    return {t: (datetime.fromisoformat(e) - datetime.fromisoformat(s)).total_seconds() for t, s, e in rows}


def _hits(result) -> dict[str, bool]:
    return {step: result.xcom(step)["cache_hit"] for step in STEPS}


def test_a_second_unchanged_run_submits_nothing_and_returns_the_first_results(pipeline):
    pipe, first = pipeline
    second, ran = pipe.run()
    assert second.states == {"a": "success", "b": "success", "c": "success"}, second.output[-4000:]
    assert ran == []  # no job ran
    assert "Submitted TorchX app" not in second.output
    assert _hits(first) == {"a": False, "b": False, "c": False}
    assert _hits(second) == {"a": True, "b": True, "c": True}
    for step in STEPS:
        earlier, now = first.xcom(step), second.xcom(step)
        assert now["cached_from"] == earlier["app_handle"] == now["app_handle"]
        assert now["cache_key"] == earlier["cache_key"]
        assert now["artifacts"] == earlier["artifacts"] and now["metadata"] == earlier["metadata"]
        assert second.xcom(step, key="app_handle") == earlier["app_handle"]
        assert f"TorchX cache hit: key {earlier['cache_key']}" in second.output
    print(f"task seconds: first run {task_seconds(first)}, unchanged second run {task_seconds(second)}")
    print(f"airflow dags test seconds: {pipe.durations}")


def _asset_events(result) -> list[tuple[str, dict]]:
    import sqlite3

    with sqlite3.connect(result.db) as conn:
        rows = conn.execute(
            "SELECT a.uri, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE e.source_dag_id = ? AND e.source_run_id = ?",
            (result.dag_id, result.run_id),
        ).fetchall()
    return [(uri, json.loads(extra)) for uri, extra in rows]


def test_a_hit_emits_asset_and_openlineage_events_as_a_run_does(pipeline):
    pipe, first = pipeline
    second, ran = pipe.run()
    assert ran == []
    earlier = second.xcom("a")["cached_from"]
    out = second.xcom("a")["artifacts"]["out"]
    for result in (first, second):
        ((uri, extra),) = _asset_events(result)
        assert uri == "torchx-test://tx_cache/a-out"
        assert (extra["app_handle"], extra["path"]) == (earlier, out["path"])
    events = task_events(pipe.events[second.run_id], "tx_cache", "a")
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    complete = events[1]
    validate(complete)
    facet = complete["run"]["facets"]["torchx_run"]
    assert (facet["appHandle"], facet["cachedFrom"], facet["state"]) == (earlier, earlier, "SUCCEEDED")
    assert datasets(complete, "outputs") == {run_dataset(earlier), ("file", out["path"])}
    (artifact,) = [d for d in complete["outputs"] if d["name"] == out["path"]]
    assert artifact["facets"]["torchx_artifact"]["artifactName"] == "out"
    # b's COMPLETE: a's artifact in, with its name and the run that recorded it
    (b_complete,) = [
        e for e in task_events(pipe.events[second.run_id], "tx_cache", "b") if e["eventType"] == "COMPLETE"
    ]
    (consumed,) = [d for d in b_complete["inputs"] if d["name"] == out["path"]]
    assert consumed["facets"]["torchx_artifact"]["artifactName"] == "out"


@pytest.mark.parametrize(
    ("change", "output_changes"),
    [
        ({"b_value": "2"}, True),  # one argument: b's output holds it
        ({"b_env": "y"}, True),  # one env value: b's output holds it
        ({"b_image": "ghcr.io/pytorch/torchx:0.7.1"}, False),  # the image
        ({"b_salt": "again"}, False),  # the salt
        ({"b_cfg": {"prepend_cwd": True}}, False),  # the scheduler's cfg
    ],
    ids=lambda value: next(iter(value)) if isinstance(value, dict) else None,
)
def test_one_changed_input_reruns_that_step_and_downstream_only_if_its_output_changed(
    pipeline, change, output_changes
):
    """c's key holds b's output by path and content: c runs again exactly when that changed."""
    pipe, first = pipeline
    result, ran = pipe.run(**change)
    assert result.returncode == 0, result.output[-4000:]
    assert ran == (["b", "c"] if output_changes else ["b"])
    assert _hits(result) == {"a": True, "b": False, "c": not output_changes}
    assert result.xcom("b")["cache_key"] != first.xcom("b")["cache_key"]
    assert (result.xcom("c")["cache_key"] != first.xcom("c")["cache_key"]) is output_changes
    # the change reached the job that ran
    out = Path(result.xcom("b")["artifacts"]["out"]["path"]).read_text()
    assert f"b={change.get('b_value', '1')} env={change.get('b_env', 'x')}" in out


def test_a_changed_byte_of_an_output_reruns_its_step(pipeline):
    pipe, first = pipeline
    path = Path(first.xcom("b")["artifacts"]["out"]["path"])
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01  # same size, and within the same second as far as mtime goes
    stat = path.stat()
    path.write_bytes(bytes(data))
    import os

    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    result, ran = pipe.run()
    # b's record no longer holds: b runs again and writes its output as it was, so c's input is back
    assert ran == ["b"]
    assert _hits(result) == {"a": True, "b": False, "c": True}
    assert "Cache record" in result.output and "changed since" in result.output
    assert path.read_bytes() != bytes(data)


def test_a_failed_run_is_never_a_hit(pipeline):
    pipe, _ = pipeline
    for _ in range(2):
        result, ran = pipe.run(b_fail="true")
        assert result.states == {"a": "success", "b": "failed", "c": "upstream_failed"}
        assert ran == ["b"]  # submitted both times


def test_records_are_read_from_the_mlflow_store_alone(pipeline):
    pipe, first = pipeline
    result, ran = pipe.run(trackers=("cache_ml",))
    assert ran == []
    assert _hits(result) == {"a": True, "b": True, "c": True}
    assert result.xcom("a")["cached_from"] == first.xcom("a")["app_handle"]  # b and c ran again since


def test_no_record_holds_the_secret_of_a_step_in_any_form(pipeline):
    pipe, first = pipeline
    fs, ml = FsspecStore(str(pipe.root)), MlflowStore(pipe.mlflow_uri, "cache")
    stored = [(pipe.root / name).read_text() for name in sorted(p.name for p in pipe.root.iterdir())
              if name.startswith(".c.")]  # fmt: skip
    stored += [json.dumps(run.data.tags) for run in ml.cache_records._runs()]
    assert len(stored) >= 6
    assert find_secret(SECRET, "\n".join(stored)) == []
    assert find_secret(SECRET, first.output) == []
    assert fs.cache_records.get(first.xcom("a")["cache_key"]) is not None


def test_records_are_kept_where_torchx_readers_do_not_look(pipeline):
    pipe, first = pipeline
    fs, ml = FsspecStore(str(pipe.root)), MlflowStore(pipe.mlflow_uri, "cache")
    key = first.xcom("a")["cache_key"]
    for store in (fs, ml):
        record = store.cache_records.get(key)
        assert record["app_handle"] == first.xcom("a")["app_handle"]
        assert record["result"]["state"] == "SUCCEEDED"
        assert all(not run_id.startswith(".") for run_id in store.run_ids())
    assert (pipe.root / f".c.{key}").is_file()


def test_a_hit_is_a_tracked_run_linked_to_the_earlier_run(pipeline):
    pipe, first = pipeline
    second, ran = pipe.run()
    assert ran == []
    store = FsspecStore(str(pipe.root))
    ids = {step: second.xcom(step, key="torchx_run_id") for step in STEPS}
    # b and c last ran in the byte-change test: their records are that run's; a's is the first run's
    earlier = {step: second.xcom(step)["cached_from"] for step in STEPS}
    assert earlier["a"] == first.xcom("a")["app_handle"]
    for step in STEPS:
        assert ids[step] == f"airflow://tx_cache/{second.run_id}/{step}"
        md = store.metadata(ids[step])
        assert md["airflow_cached_from"] == earlier[step]
        assert md["airflow_cache_key"] == second.xcom(step)["cache_key"]
        assert md["airflow_task_id"] == step and md["airflow_run_id"] == second.run_id
        assert store.artifacts(ids[step])["out"].path == second.xcom(step)["artifacts"]["out"]["path"]
    sources = {
        step: sorted((s.source_run_id, s.artifact_name) for s in store.sources(ids[step])) for step in STEPS
    }
    assert sources["a"] == [(earlier["a"], None)]
    # b's arguments name a's output: the edge to the (cached) a carries the artifact's name
    assert sources["b"] == sorted([(ids["a"], "out"), (earlier["b"], None)])
    assert sources["c"] == sorted([(ids["b"], "out"), (earlier["c"], None)])


def test_edges_between_runs_carry_the_artifact_names(pipeline):
    pipe, first = pipeline
    handles = {step: first.xcom(step)["app_handle"] for step in STEPS}
    for store in (FsspecStore(str(pipe.root)), MlflowStore(pipe.mlflow_uri, "cache")):
        assert [(s.source_run_id, s.artifact_name) for s in store.sources(handles["b"])] == [
            (handles["a"], "out")
        ]
        assert [(s.source_run_id, s.artifact_name) for s in store.sources(handles["c"])] == [
            (handles["b"], "out")
        ]


def test_a_forged_record_is_never_taken_and_never_hides_the_honest_one(pipeline):
    """A job with the stores' credentials wrote a forged record of b (a backdoored artifact and a
    ``javascript:`` link, the signature kept) into the fsspec store (where it replaces the record)
    and the MLflow server (where it is one more record, the newest). The forged one is ignored with
    a warning, and the honest record the MLflow server still holds is a hit: nothing runs, nothing of
    the attacker's reaches b or c. With the fsspec store alone, b runs again (its only record is
    forged), and the record its run signs hits on the next run."""
    pipe, first = pipeline
    key = first.xcom("b")["cache_key"]
    forged_path = "s3://attacker-bucket/backdoored.pt"
    stores = (FsspecStore(str(pipe.root)), MlflowStore(pipe.mlflow_uri, "cache"))
    for store in stores:
        record = store.cache_records.get(key)
        record["result"]["artifacts"]["out"]["path"] = forged_path
        record["result"]["ui_url"] = "javascript:alert(document.domain)"
        store.cache_records.put(key, record)

    result, ran = pipe.run()
    assert result.states == {"a": "success", "b": "success", "c": "success"}, result.output[-4000:]
    assert ran == [] and _hits(result) == {"a": True, "b": True, "c": True}
    assert f"Cache record {key} in FsspecStore" in result.output and "ignored" in result.output
    for step in ("b", "c"):
        assert forged_path not in json.dumps(result.xcom(step)) and "javascript:" not in json.dumps(
            result.xcom(step)
        )

    alone, ran = pipe.run(trackers=("cache_fs",))
    assert alone.states == {"a": "success", "b": "success", "c": "success"}, alone.output[-4000:]
    assert ran == ["b"]  # its only record here is forged; c's input (b's output) is as it was
    assert forged_path not in json.dumps(alone.xcom("b")) and forged_path not in json.dumps(alone.xcom("c"))
    assert stores[0].cache_records.get(key)["result"]["artifacts"]["out"]["path"] != forged_path

    again, ran = pipe.run(trackers=("cache_fs",))
    assert ran == [] and _hits(again) == {"a": True, "b": True, "c": True}
