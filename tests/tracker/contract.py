"""The tracker contract: every store runs these tests with its own ``store`` fixture
(the fsspec pattern: one abstract suite, one fixture class per backend)."""

from __future__ import annotations

import uuid

from torchx.tracker.api import Lineage, TrackerSource
from torchx_airflow_tracker.run_graph import RunLineage


def rid(name: str) -> str:
    """A fresh run id per test, so stores shared across tests never mix runs."""
    return f"slurm://torchx/{name}-{uuid.uuid4().hex[:8]}"


class TrackerContract:
    def test_metadata_round_trip_later_write_wins(self, store):
        run = rid("meta")
        store.add_metadata(run, lr=0.1, epochs=3, name="resnet", nested={"a": [1, 2]})
        store.add_metadata(run, lr=0.2, done=True)
        assert store.metadata(run) == {
            "lr": 0.2,
            "epochs": 3,
            "name": "resnet",
            "nested": {"a": [1, 2]},
            "done": True,
        }

    def test_unknown_run_is_empty(self, store):
        run = rid("nothing")
        assert store.metadata(run) == {}
        assert store.artifacts(run) == {}
        assert list(store.sources(run)) == []

    def test_artifacts_round_trip(self, store):
        run = rid("art")
        store.add_artifact(run, "model", "s3://b/model.pt", {"sha": "abc", "bytes": 12})
        store.add_artifact(run, "data", "/data/train.csv")
        store.add_artifact(run, "model", "s3://b/model-v2.pt", {"sha": "def"})
        artifacts = store.artifacts(run)
        assert set(artifacts) == {"model", "data"}
        assert (artifacts["model"].path, artifacts["model"].metadata) == (
            "s3://b/model-v2.pt",
            {"sha": "def"},
        )
        assert (artifacts["data"].path, artifacts["data"].metadata) == ("/data/train.csv", None)

    def test_sources_idempotent_with_several_artifact_names(self, store):
        parent, child = rid("parent"), rid("child")
        store.add_source(child, parent, "model")
        store.add_source(child, parent, "model")
        store.add_source(child, parent, "data")
        sources = sorted(store.sources(child), key=lambda s: s.artifact_name)
        assert sources == [TrackerSource(parent, "data"), TrackerSource(parent, "model")]
        assert list(store.sources(child, artifact_name="model")) == [TrackerSource(parent, "model")]
        assert list(store.sources(child, artifact_name="other")) == []

    def test_source_without_artifact_name(self, store):
        parent, child = rid("p"), rid("c")
        store.add_source(child, parent)
        store.add_source(child, parent)
        assert list(store.sources(child)) == [TrackerSource(parent, None)]

    def test_descendants_whichever_run_was_created_first(self, store):
        parent, early, late = rid("parent"), rid("early"), rid("late")
        store.add_source(early, parent, "model")  # parent has no data of its own yet
        store.add_metadata(parent, created=True)
        store.add_source(late, parent)
        assert sorted(d.source_run_id for d in store.descendants(parent)) == sorted([early, late])
        assert sorted(store.run_ids(parent_run_id=parent)) == sorted([early, late])

    def test_lineage_both_ways_and_transitive(self, store):
        prep, train1, train2, evaluate, report = (
            rid(n) for n in ("prep", "train1", "train2", "eval", "report")
        )
        store.add_source(train1, prep, "data")
        store.add_source(train2, prep, "data")
        store.add_source(evaluate, train1, "model")
        store.add_source(evaluate, train2, "model")
        store.add_source(report, evaluate)

        lineage = store.lineage(evaluate)
        assert isinstance(lineage, Lineage) and isinstance(lineage, RunLineage)
        assert sorted(lineage.parent_ids) == sorted([train1, train2])
        assert lineage.descendant_ids == [report]
        assert {(e.source_run_id, e.run_id) for e in lineage.upstream} == {
            (train1, evaluate),
            (train2, evaluate),
            (prep, train1),
            (prep, train2),
        }
        assert {e.artifact_names for e in lineage.upstream} == {("model",), ("data",)}

        shallow = store.lineage(report, depth=1)
        assert {(e.source_run_id, e.run_id) for e in shallow.upstream} == {(evaluate, report)}
        down = store.lineage(prep)
        assert {e.run_id for e in down.downstream} == {train1, train2, evaluate, report}

    def test_run_ids_lists_runs(self, store):
        a, b = rid("list-a"), rid("list-b")
        store.add_metadata(a, x=1)
        store.add_artifact(b, "m", "/m")
        assert {a, b} <= set(store.run_ids())

    def test_a_source_that_never_tracked_is_not_a_run(self, store):
        run, dataset = rid("reads-data"), f"s3://data/set-{uuid.uuid4().hex[:8]}"
        store.add_source(run, dataset, "train")
        assert dataset not in set(store.run_ids())
        assert run in set(store.run_ids())
        assert list(store.run_ids(parent_run_id=dataset)) == [run]
        assert [d.source_run_id for d in store.descendants(dataset)] == [run]
        assert store.metadata(dataset) == {}

    def test_values_of_any_size_read_back(self, store):
        run = rid("sizes")
        path = "s3://b/" + "x" * 9000
        store.add_artifact(run, "model", path, {"note": "n" * 9000})
        store.add_metadata(run, text="t" * 20000, **{"k" * 300: 1})
        assert store.artifacts(run)["model"].path == path
        assert store.artifacts(run)["model"].metadata == {"note": "n" * 9000}
        assert store.metadata(run) == {"text": "t" * 20000, "k" * 300: 1}

    def test_run_ids_rejects_unknown_filters(self, store):
        import pytest

        with pytest.raises(ValueError, match="Unknown run_ids filter"):
            store.run_ids(owner="me")


class CacheRecordsContract:
    """The provider's cache records (``cache_records``): kept apart from the runs."""

    def test_cache_records_round_trip_overwrite_and_delete(self, store):
        key, other = uuid.uuid4().hex * 2, uuid.uuid4().hex * 2
        records = store.cache_records
        assert records.get(key) is None and records.delete(key) is False
        records.put(key, {"app_handle": "slurm://torchx/a-1", "result": {"state": "SUCCEEDED"}, "n": 1})
        records.put(other, {"app_handle": "slurm://torchx/b-2", "big": "x" * 20_000})  # split in MLflow
        records.put(key, {"app_handle": "slurm://torchx/a-3", "n": 2})
        assert records.get(key) == {"app_handle": "slurm://torchx/a-3", "n": 2}
        assert len(records.get(other)["big"]) == 20_000
        assert {key, other} <= set(records.keys())
        assert records.delete(key) is True
        assert records.get(key) is None and key not in records.keys()

    def test_cache_records_are_not_runs(self, store):
        run = rid("run")
        store.add_metadata(run, lr=0.1)
        store.cache_records.put(uuid.uuid4().hex * 2, {"app_handle": run})
        run_ids = list(store.run_ids())
        assert run in run_ids and all(r.startswith("slurm://") for r in run_ids)

    def test_a_cache_key_that_is_not_one_is_refused(self, store):
        import pytest

        with pytest.raises(ValueError, match="64 lowercase hex digits"):
            store.cache_records.put("../../etc/passwd", {})
