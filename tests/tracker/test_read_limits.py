"""Reads of what any job wrote are bounded in total, not only per entry (tracker/read_limits.py): per
run and per store object (one request of a view, one task), the entries of a run's category, the
small files (markers, ids, edges, cache records), a bounded graph of an MLflow experiment, and a
junk tag in an MLflow run that hides none of the run's others. Real files, a real MLflow server."""

from __future__ import annotations

import json
import uuid

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore, entry_name
from torchx_airflow_tracker.read_limits import ENTRY_BYTES, RUN_BYTES, RUN_ENTRIES, ReadLimits
from torchx_airflow_tracker.store_files import SMALL_FILE_BYTES, StoreFiles
from torchx_airflow_tracker.store_layout import ID_FILE, run_dir_name

RUN = "local_cwd://torchx/many"


def _reader(root, limits: ReadLimits | None = None) -> FsspecStore:
    store = FsspecStore(str(root))
    store.limits = limits or ReadLimits.for_readers()
    return store


@pytest.fixture
def bytes_read(monkeypatch) -> list[int]:
    """The size of every file the store's reads returned, counted on the real reads."""
    sizes: list[int] = []
    real = StoreFiles.read

    def counting(self, path, max_bytes=None):
        data = real(self, path, max_bytes)
        sizes.append(len(data))
        return data

    monkeypatch.setattr(StoreFiles, "read", counting)
    return sizes


def test_a_run_of_many_entries_each_under_the_entry_bound_is_read_up_to_the_run_bound(tmp_path, bytes_read):
    """Eight entries of 3 MiB (each far under 8 MiB): a reader reads no more than 16 MiB of the run,
    keeps what it read, and names the rest; a job (no limits) reads its own run whole."""
    writer = FsspecStore(str(tmp_path))
    writer.add_metadata(RUN, loss=0.25)
    for i in range(8):
        writer.add_metadata(RUN, **{f"junk{i}": "x" * (3 << 20)})
    reader = _reader(tmp_path)
    metadata = reader.metadata(RUN)
    assert metadata["loss"] == 0.25 and 1 < len(metadata) < 9
    assert sum(bytes_read) <= RUN_BYTES + 1 and reader.limits.read[RUN] <= RUN_BYTES
    assert any("one run's bound" in why for why in reader.oversized[RUN])
    bytes_read.clear()
    assert len(FsspecStore(str(tmp_path)).metadata(RUN)) == 9
    assert sum(bytes_read) > 8 * (3 << 20)


def test_a_store_object_reads_at_most_its_total(tmp_path, bytes_read):
    """Runs each within the run bound: the store object stops at its total (one request) and says so."""
    writer = FsspecStore(str(tmp_path))
    runs = [f"local_cwd://torchx/r{i}" for i in range(4)]
    for run in runs:
        writer.add_metadata(run, blob="y" * (1 << 20))
    reader = _reader(tmp_path, ReadLimits(ENTRY_BYTES, RUN_BYTES, total_bytes=(5 << 20) // 2))
    read = [bool(reader.metadata(run)) for run in runs]
    assert read == [True, True, False, False]
    assert sum(bytes_read) <= (5 << 20) // 2 + 2
    assert all("one request's bound" in why for run in runs[2:] for why in reader.oversized[run])


def test_a_run_with_thousands_of_sources_costs_a_bounded_number_of_reads(tmp_path, bytes_read):
    """3,000 files in a run's sources/: a reader reads RUN_ENTRIES of them, not 3,001 files."""
    writer = FsspecStore(str(tmp_path))
    writer.add_metadata(RUN, loss=1.0)
    sources = tmp_path / run_dir_name(RUN) / "sources"
    sources.mkdir()
    for i in range(3000):
        (sources / run_dir_name(f"local_cwd://torchx/p{i}")).write_text("\n")
    reader = _reader(tmp_path)
    found = list(reader.sources(RUN))
    assert len(found) == RUN_ENTRIES and len(bytes_read) <= RUN_ENTRIES + 2
    assert any("2000 entries past the first 1000" in why for why in reader.oversized[RUN])
    bytes_read.clear()
    assert len(list(FsspecStore(str(tmp_path)).sources(RUN))) == 3000  # the job's own reads: all


def test_ids_and_cache_records_are_read_up_to_a_small_bound(tmp_path, bytes_read):
    """Files that are small when honest (a long run id's ``id`` file, a cache record) are read no
    further than their bound and count as absent past it."""
    from torchx_airflow_tracker.cache_records import MAX_RECORD_BYTES

    long_id = "airflow://" + "d" * 200
    writer = FsspecStore(str(tmp_path))
    writer.add_metadata(long_id, loss=1.0)
    id_file = tmp_path / run_dir_name(long_id) / ID_FILE
    id_file.unlink()
    id_file.write_text("z" * (SMALL_FILE_BYTES * 4))
    writer.cache_records.put("a" * 64, {"v": 1})
    record = next(p for p in tmp_path.iterdir() if p.name.startswith(".c."))
    record.write_text(json.dumps({"v": "w" * (MAX_RECORD_BYTES + 10)}))
    bytes_read.clear()
    assert FsspecStore(str(tmp_path)).cache_records.get("a" * 64) is None
    assert not any(run.startswith("zzz") for run in FsspecStore(str(tmp_path)).run_ids())
    assert max(bytes_read, default=0) <= SMALL_FILE_BYTES  # the id file, the record: neither read
    assert FsspecStore(str(tmp_path)).cache_records.delete("a" * 64)  # too large to read, still there
    assert not record.exists()


def test_a_junk_tag_hides_none_of_a_runs_entries_and_a_bounded_graph_stops(mlflow_uri, monkeypatch):
    """Any client may set any tag on any run: a tag under the store's prefixes that is not JSON, or
    not an entry of its kind, is skipped, never an error that hides the run's other entries or every
    edge of the experiment. A view's graph reads at most MAX_GRAPH_RUNS runs, the newest."""
    from mlflow.tracking import MlflowClient
    from torchx_airflow_tracker import mlflow_store
    from torchx_airflow_tracker.mlflow_store import MlflowStore

    experiment = f"junk-{uuid.uuid4().hex[:6]}"
    writer = MlflowStore(mlflow_uri, experiment)
    runs = [f"slurm://torchx/r{i}-{uuid.uuid4().hex[:4]}" for i in range(3)]
    for i, run in enumerate(runs):
        writer.add_metadata(run, loss=float(i))
        writer.add_artifact(run, "model", f"/runs/{i}/model.pt")
        writer.add_source(run, "slurm://torchx/prepare-1", "data")
    victim = writer.mlflow_run_id(runs[0])
    client = MlflowClient(mlflow_uri)
    client.set_tag(victim, "torchx.metadata.zzz", "not json")
    client.set_tag(victim, "torchx.artifact.zzz", json.dumps({"nope": 1}))
    client.set_tag(victim, "torchx.source.zzz", json.dumps({"source": "x", "artifact_names": "data"}))
    client.set_tag(victim, "torchx.source.zzy", json.dumps({"parts": "abc", "count": 2}))

    reader = MlflowStore(mlflow_uri, experiment)
    reader.limits = ReadLimits.for_readers()
    assert reader.metadata(runs[0]) == {"loss": 0.0}
    assert {name: a.path for name, a in reader.artifacts(runs[0]).items()} == {"model": "/runs/0/model.pt"}
    assert [s.source_run_id for s in reader.sources(runs[0])] == ["slurm://torchx/prepare-1"]
    graph = reader.graph()
    assert all(graph.parents_of(run) == {"slurm://torchx/prepare-1": ("data",)} for run in runs)

    monkeypatch.setattr(mlflow_store, "MAX_GRAPH_RUNS", 2)
    bounded = MlflowStore(mlflow_uri, experiment).graph(max_reads=64)
    assert bounded.unread >= 1
    assert sum(1 for run in runs if bounded.parents_of(run)) == 2
    assert all(MlflowStore(mlflow_uri, experiment).graph().parents_of(run) for run in runs)


def test_bytes_that_are_not_utf8_skip_their_file_and_hide_nothing_else(tmp_path):
    """A job writes bytes that are not UTF-8 into an entry of its run and into the id file of a run
    whose marker it removed: that entry and that id are skipped (logged), never an error that hides
    the run's other entries or the store's other runs."""
    writer = FsspecStore(str(tmp_path))
    long_id = "local_cwd://torchx/" + "l" * 200
    writer.add_metadata(RUN, loss=0.5)
    writer.add_metadata(long_id, loss=0.7)
    writer.add_metadata("local_cwd://torchx/other", loss=0.9)
    run_dir = next(p for p in tmp_path.iterdir() if (p / ID_FILE).exists())
    (run_dir / ID_FILE).write_bytes(b"\xff\xfe")
    for marker in tmp_path.rglob("*.i.*"):
        marker.unlink()
    bad = tmp_path / run_dir_name(RUN) / "metadata" / entry_name()
    bad.write_bytes(b'{"metadata": {"x": "\xff"}}')
    reader = _reader(tmp_path)
    assert reader.metadata(RUN) == {"loss": 0.5}
    assert str(bad) in reader.files.refused
    assert "local_cwd://torchx/other" in set(reader.run_ids())
    assert reader.graph(max_reads=64) is not None


def test_the_bounds_count_bytes_not_characters(tmp_path, bytes_read):
    """Entries of four-byte characters: what a reader reads stays within the run bound in bytes."""
    FsspecStore(str(tmp_path)).add_metadata(RUN, first=1)
    for i in range(3):  # written raw, as a job may: 4 MiB of bytes, 1 Mi characters each
        entry = json.dumps({"metadata": {f"e{i}": "\U0001f600" * (1 << 20)}}, ensure_ascii=False)
        (tmp_path / run_dir_name(RUN) / "metadata" / entry_name()).write_text(entry, encoding="utf-8")
    reader = _reader(tmp_path, ReadLimits(ENTRY_BYTES, run_bytes=9 << 20, total_bytes=TOTAL))
    assert len(reader.metadata(RUN)) == 3  # the first entry and two of 4 MiB: 9 MiB in all
    assert reader.limits.read[RUN] <= 9 << 20 and sum(bytes_read) <= (9 << 20) + 2


TOTAL = 32 << 20


def test_a_task_reads_its_own_results_whole_after_its_reads_of_other_runs_spent_the_total(tmp_path):
    """Hostile parents with large artifacts spend the store object's total before the task reads its
    own run's results at the end: those results are still read (a total of their own)."""
    from torchx_airflow.lineage.recorded import run_results

    writer = FsspecStore(str(tmp_path))
    writer.add_metadata(RUN, loss=0.125)
    writer.add_artifact(RUN, "model", "/out/model.pt")
    reader = _reader(tmp_path, ReadLimits(ENTRY_BYTES, RUN_BYTES, total_bytes=1 << 20))
    writer.add_metadata("local_cwd://torchx/parent", blob="p" * (700 << 10))
    assert reader.metadata("local_cwd://torchx/parent")
    reader.limits.charge("local_cwd://torchx/others", (1 << 20) - reader.limits.total)  # all spent
    results = run_results(reader, RUN)
    assert results["metadata"] == {"loss": 0.125} and results["metrics"] == {"loss": 0.125}
    assert results["artifacts"]["model"]["path"] == "/out/model.pt"


def test_a_writer_keeps_an_edges_names_when_the_readers_total_is_spent(mlflow_uri):
    """The worker's store reads within the readers' limits; adding a name to an edge reads the edge
    whole all the same, so the names it held are kept."""
    from torchx_airflow_tracker.mlflow_store import MlflowStore

    experiment = f"edge-{uuid.uuid4().hex[:6]}"
    store = MlflowStore(mlflow_uri, experiment)
    store.limits = ReadLimits(ENTRY_BYTES, RUN_BYTES, total_bytes=1 << 20)
    child, parent = f"slurm://torchx/c-{uuid.uuid4().hex[:4]}", "slurm://torchx/p"
    store.add_source(child, parent, "a")
    store.limits.charge("elsewhere", 1 << 20)  # spent by reads of other runs
    store.add_source(child, parent, "b")
    assert MlflowStore(mlflow_uri, experiment).graph().parents_of(child) == {parent: ("a", "b")}
