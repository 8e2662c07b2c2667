"""fsspec store specifics: TorchX compatibility both ways, inline config, concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import time
import uuid
from pathlib import Path

import fsspec
import pytest
from torchx.tracker.api import TrackerSource, build_trackers
from torchx.tracker.backend.fsspec import FsspecTracker
from torchx_airflow_tracker.config import TrackerConfigError
from torchx_airflow_tracker.fsspec_store import FsspecStore, create
from torchx_airflow_tracker.store_files import StoreFiles
from torchx_airflow_tracker.store_layout import LEGACY_INDEX_ID, run_dir_name

from tests.tracker.torchx_readers import fetch_torchx_main, torchx_reads, torchx_writes

PARENT, CHILD = "slurm://torchx/parent-1", "slurm://torchx/child-2"


def _write_sample(tracker) -> None:
    tracker.add_metadata(CHILD, lr=0.1)
    tracker.add_metadata(CHILD, epochs=2)
    tracker.add_artifact(CHILD, "model", "/m.pt", {"sha": "x"})
    tracker.add_metadata(PARENT, kind="data")
    tracker.add_source(CHILD, PARENT, "data")


DATASET = "s3://datasets/imagenet/v3"


@pytest.fixture(scope="session")
def torchx_main(tmp_path_factory) -> Path:
    """TorchX main's files (the pinned torchx-nightly), for its own FsspecTracker."""
    return fetch_torchx_main(tmp_path_factory.mktemp("torchx-main"))


@pytest.fixture(params=["0.7", "main"])
def torchx_path(request) -> Path | None:
    """None for TorchX 0.7 (installed), else the path that puts TorchX main first."""
    return None if request.param == "0.7" else request.getfixturevalue("torchx_main")


def _our_view(store: FsspecStore, parents: list[str], runs: list[str]) -> dict:
    return {
        "run_ids": sorted(store.run_ids()),
        "children": {p: sorted(store.run_ids(parent_run_id=p)) for p in parents},
        "metadata": {r: dict(store.metadata(r)) for r in runs},
        "sources": {
            r: sorted([s.source_run_id, s.artifact_name or ""] for s in store.sources(r)) for r in runs
        },
    }


def test_torchx_readers_see_exactly_the_runs_we_see(tmp_path, torchx_path):
    ours = FsspecStore(str(tmp_path / "store"))
    _write_sample(ours)
    ours.add_source(CHILD, DATASET, "train")  # a source that never tracked anything
    ours.add_source(CHILD, PARENT, "model")  # a second name on an edge
    ours.add_source(PARENT, "slurm://torchx/never-tracked")
    ours.cache_records.put("c" * 64, {"app_handle": CHILD, "result": {}})  # the provider's cache keys
    ours.lineage(CHILD)  # a read between the writes changes nothing on disk
    parents, runs = [PARENT, DATASET, CHILD], [PARENT, CHILD]
    theirs = torchx_reads(tmp_path / "store", parents, runs, torchx_path)
    assert theirs["version"].startswith("0.7") == (torchx_path is None)
    expected = _our_view(ours, parents, runs)
    assert {k: theirs[k] for k in expected} == expected
    assert expected["run_ids"] == sorted([PARENT, CHILD])  # no index, no dataset among the runs
    assert expected["sources"][CHILD] == sorted([[PARENT, "data"], [PARENT, "model"], [DATASET, "train"]])


def test_we_read_a_store_torchx_wrote(tmp_path, torchx_path):
    root = tmp_path / "torchx"
    ops = [
        ("add_metadata", [CHILD, {"lr": 0.1}]),
        ("add_metadata", [CHILD, {"epochs": 2}]),
        ("add_artifact", [CHILD, "model", "/m.pt", {"sha": "x"}]),
        ("add_metadata", [PARENT, {"kind": "data"}]),
        ("add_source", [CHILD, PARENT, "data"]),
        ("add_source", [CHILD, DATASET, "train"]),
    ]
    torchx_writes(root, ops, torchx_path)
    ours = FsspecStore(str(root))
    parents, runs = [PARENT, DATASET, CHILD], [PARENT, CHILD]
    theirs = torchx_reads(root, parents, runs, torchx_path)
    assert _our_view(ours, parents, runs) == {
        k: theirs[k] for k in ("run_ids", "children", "metadata", "sources")
    }
    assert ours.artifacts(CHILD)["model"].metadata == {"sha": "x"}
    assert ours.descendants(PARENT) == [TrackerSource(CHILD, "data")]
    assert ours.lineage(PARENT).descendant_ids == [CHILD]
    assert {e.source_run_id for e in ours.lineage(CHILD).upstream} == {PARENT, DATASET}


def _torchx_store(fs: fsspec.AbstractFileSystem, root: str) -> FsspecTracker:
    fs.makedirs(root, exist_ok=True)
    return FsspecTracker(fs, root)


@pytest.fixture(params=["file", "memory"])
def torchx_written(request, tmp_path):
    """A store root written by TorchX's own FsspecTracker, and our store on the same root."""
    if request.param == "file":
        root, url = str(tmp_path / "torchx"), str(tmp_path / "torchx")
    else:
        root = f"/torchx-{uuid.uuid4().hex}"
        url = f"memory://{root}"
    theirs = _torchx_store(fsspec.filesystem(request.param), root)
    _write_sample(theirs)
    return theirs, FsspecStore(url)


def test_we_answer_on_a_store_torchx_wrote_without_a_manual_step(torchx_written):
    theirs, ours = torchx_written
    assert ours.metadata(CHILD) == {"lr": 0.1, "epochs": 2}
    assert list(ours.sources(CHILD)) == [TrackerSource(PARENT, "data")]
    assert list(ours.run_ids(parent_run_id=PARENT)) == [CHILD]
    assert sorted(ours.run_ids()) == sorted([PARENT, CHILD])

    # a run TorchX writes afterwards is answered for on the next query, by the same store object
    grandchild = "slurm://torchx/grandchild-3"
    theirs.add_source(grandchild, CHILD, "model")
    assert list(ours.run_ids(parent_run_id=CHILD)) == [grandchild]
    assert {e.run_id for e in ours.lineage(PARENT).downstream} == {CHILD, grandchild}
    # a writer records the index for good; a fresh store object (another process) agrees
    assert ours.ensure_indexed() == 2
    assert ours.ensure_indexed() == 0
    assert list(FsspecStore(ours.url).run_ids(parent_run_id=CHILD)) == [grandchild]


def test_reindex_picks_up_a_source_torchx_added_to_an_indexed_run(tmp_path):
    theirs = _torchx_store(fsspec.filesystem("file"), str(tmp_path))
    _write_sample(theirs)
    ours = FsspecStore(str(tmp_path))
    assert ours.ensure_indexed() == 1
    other_parent = "slurm://torchx/other-parent"
    theirs.add_source(CHILD, other_parent)  # CHILD is indexed already: the documented gap
    assert list(FsspecStore(str(tmp_path)).run_ids(parent_run_id=other_parent)) == []
    assert ours.reindex() == 1
    assert list(FsspecStore(str(tmp_path)).run_ids(parent_run_id=other_parent)) == [CHILD]
    assert ours.reindex() == 0  # idempotent


def test_stores_of_the_previous_layouts_still_answer_and_reindex_moves_them(tmp_path):
    """The previous version's index directory is not a run; reverse edges kept under
    <root>/<b32(parent)>/descendants/ (an older layout, and TorchX main's) are read."""
    ours = FsspecStore(str(tmp_path))
    ours.add_source(CHILD, PARENT, "data")
    legacy_index = tmp_path / run_dir_name(LEGACY_INDEX_ID) / "descendants"
    legacy_index.mkdir(parents=True)
    legacy = tmp_path / run_dir_name(PARENT) / "descendants"
    legacy.mkdir(parents=True)
    (legacy / run_dir_name("slurm://torchx/old-child")).write_text("model\n")
    assert sorted(ours.run_ids()) == sorted([PARENT, CHILD])
    assert sorted(ours.run_ids(parent_run_id=PARENT)) == sorted([CHILD, "slurm://torchx/old-child"])
    assert {(d.source_run_id, d.artifact_name) for d in ours.descendants(PARENT)} == {
        (CHILD, "data"),
        ("slurm://torchx/old-child", "model"),
    }
    ours.reindex()
    assert not (tmp_path / run_dir_name(LEGACY_INDEX_ID)).exists()


def test_torchx_cli_config_file_works_for_both(tmp_path):
    """TorchX's config file (``[tracker:fsspec] config=path``) configures our store unchanged."""
    import subprocess
    import sys

    store_dir = tmp_path / "store"
    config = tmp_path / "fsspec.cfg"
    config.write_text(f"# TorchX's format\nprotocol=file\nroot_path={store_dir}\nauto_mkdir=true\n")
    ours = create(str(config))
    assert isinstance(ours, FsspecStore) and ours.fs.auto_mkdir == "true"  # strings, as TorchX passes them
    _write_sample(ours)
    (tracker,) = build_trackers({"airflow_fsspec": str(config)})
    assert tracker.metadata(CHILD) == {"lr": 0.1, "epochs": 2}
    code = (
        "from torchx.tracker.backend.fsspec import create; import sys;"
        f"t = create({str(config)!r}); print(sorted(t.run_ids())); print(t.metadata({CHILD!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert str(sorted([PARENT, CHILD])) in out
    assert "'epochs': 2" in out


def test_a_nested_config_file_key_and_a_missing_one(tmp_path):
    config = tmp_path / "s3.cfg"
    config.write_text("protocol=memory\nroot_path=/cfg-test\n")
    assert create(str(config)).url == "memory:///cfg-test"
    config.write_text(
        "protocol=s3\nroot_path=bucket/x\nclient_kwargs.endpoint_url=http://127.0.0.1:1\nanon=true\n"
    )
    from torchx_airflow_tracker.config import read_torchx_fsspec_config

    assert read_torchx_fsspec_config(str(config)) == (
        "s3://bucket/x",
        {"client_kwargs": {"endpoint_url": "http://127.0.0.1:1"}, "anon": "true"},
    )
    config.write_text("protocol=file\n")
    with pytest.raises(TrackerConfigError, match=r"Missing \['root_path'\]"):
        create(str(config))
    with pytest.raises(TrackerConfigError, match="neither JSON nor a readable file"):
        create(str(tmp_path / "nope.cfg"))


def test_entry_points_accept_inline_json_and_two_stores_of_a_kind(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    trackers = list(
        build_trackers(
            {
                "airflow_fsspec": json.dumps({"root": str(a)}),
                "airflow_fsspec_2": json.dumps(
                    {"root": f"file://{b}", "storage_options": {"auto_mkdir": True}}
                ),
            }
        )
    )
    assert [type(t).__name__ for t in trackers] == ["FsspecStore", "FsspecStore"]
    for tracker in trackers:
        tracker.add_metadata("x://s/1", v=1)
    assert FsspecStore(str(a)).metadata("x://s/1") == FsspecStore(str(b)).metadata("x://s/1") == {"v": 1}


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        (None, "needs a config"),
        ('["root"]', "must be a JSON object"),
        ('{"rooot": "/x"}', "Unknown key(s) ['rooot']"),
        ('{"storage_options": {}}', "missing ['root']"),
        ('{"root": "/tmp/x", "storage_options": "k=v"}', "'storage_options' must be a JSON object"),
        ("base64:bm90IGpzb24=", "not valid JSON"),
    ],
)
def test_bad_config_names_the_key_and_the_form(config, fragment):
    with pytest.raises(TrackerConfigError, match=re.escape(fragment)) as err:
        create(config)
    assert isinstance(err.value, ValueError)


WRITERS, WRITES = 8, 200
RUN = "slurm://torchx/concurrent-1"


def _writer(root: str, options: dict, index: int, start) -> None:
    store = FsspecStore(root, options)
    start.wait()
    for j in range(WRITES):
        store.add_metadata(RUN, **{f"w{index}": j, "last_writer": index})


def _concurrent_writes(root: str, options: dict) -> None:
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(root, options, i, start)) for i in range(WRITERS)]
    for p in procs:
        p.start()
    reader = FsspecStore(root, options)
    seen: dict[str, int] = {}
    reads = 0
    start.set()
    while any(p.is_alive() for p in procs):
        snapshot = reader.metadata(RUN)  # a torn entry would raise JSONDecodeError here
        for key, value in snapshot.items():
            if key.startswith("w"):
                assert value >= seen.get(key, -1), f"{key} went back from {seen[key]} to {value}"
                seen[key] = value
        reads += 1
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert reads > 1, "the reader never overlapped the writers"
    final = reader.metadata(RUN)
    assert {k: v for k, v in final.items() if k.startswith("w")} == {
        f"w{i}": WRITES - 1 for i in range(WRITERS)
    }
    assert reader.metadata(RUN) == final  # deterministic
    fs, path = fsspec.core.url_to_fs(root, **options)
    entries = fs.ls(f"{path.rstrip('/')}/{reader._run_dir(RUN).rsplit('/', 1)[-1]}/metadata", detail=False)
    assert len(entries) == WRITERS * WRITES  # nothing lost, no name collided


def test_concurrent_writers_and_a_polling_reader_local(tmp_path):
    _concurrent_writes(str(tmp_path / "store"), {})


def test_concurrent_writers_and_a_polling_reader_s3(s3_endpoint):
    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}
    _concurrent_writes(f"s3://concurrency-{int(time.time())}/store", options)


def test_s3_reads_each_unchanged_entry_once_per_store_object(s3_endpoint, monkeypatch):
    """metadata() and artifacts() on S3 fetch an entry the first time, then only list: a new entry
    is fetched once, and one replaced in place (another ETag) is fetched again."""
    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}
    root = f"s3://entries-{uuid.uuid4().hex[:12]}/store"
    writer = FsspecStore(root, options)
    writer.add_metadata(CHILD, lr=0.1)
    writer.add_metadata(CHILD, epochs=2)
    writer.add_artifact(CHILD, "model", "/m.pt")
    reader = FsspecStore(root, options)
    fetched: list[str] = []
    real_cat_file = reader.fs.cat_file  # s3fs binds its sync methods on the instance

    def counting_cat_file(path, *args, **kwargs):
        fetched.append(path)
        return real_cat_file(path, *args, **kwargs)

    monkeypatch.setattr(reader.fs, "cat_file", counting_cat_file)
    for _ in range(3):
        assert reader.metadata(CHILD) == {"lr": 0.1, "epochs": 2}
        assert set(reader.artifacts(CHILD)) == {"model"}
    assert len(fetched) == 3  # two metadata entries, one artifact entry
    writer.add_metadata(CHILD, lr=0.2)
    assert reader.metadata(CHILD) == {"lr": 0.2, "epochs": 2}
    assert len(fetched) == 4
    (first, _), *_ = reader.files.versioned_names(f"{reader._run_dir(CHILD)}/metadata")
    reader.fs.pipe_file(f"{reader._run_dir(CHILD)}/metadata/{first}", b'{"metadata": {"lr": 0.0, "x": 1}}')
    assert reader.metadata(CHILD) == {"lr": 0.2, "epochs": 2, "x": 1}
    assert len(fetched) == 5
    assert FsspecStore(root, options).metadata(CHILD) == reader.metadata(CHILD)


NAMES_PER_RANK, RANKS = 10, 6
EDGE_CHILD, EDGE_PARENT = "slurm://torchx/edge-child", "slurm://torchx/edge-parent"


def _add_names(root: str, options: dict, rank: int, start) -> None:
    store = FsspecStore(root, options)
    start.wait()
    for i in range(NAMES_PER_RANK):
        store.add_source(EDGE_CHILD, EDGE_PARENT, f"r{rank}-{i}")


def _concurrent_edge_names(root: str, options: dict) -> None:
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(RANKS)
    procs = [ctx.Process(target=_add_names, args=(root, options, r, start)) for r in range(RANKS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    expected = sorted(f"r{r}-{i}" for r in range(RANKS) for i in range(NAMES_PER_RANK))
    store = FsspecStore(root, options)
    assert sorted(s.artifact_name for s in store.sources(EDGE_CHILD)) == expected
    assert sorted(d.artifact_name for d in store.descendants(EDGE_PARENT)) == expected


def test_ranks_adding_names_to_one_edge_lose_none_local(tmp_path):
    _concurrent_edge_names(str(tmp_path / "store"), {})
    # on a local disk TorchX's own reader sees every name too (one O_APPEND write per name)
    theirs = FsspecTracker(fsspec.filesystem("file"), str(tmp_path / "store"))
    assert len({s.artifact_name for s in theirs.sources(EDGE_CHILD)}) == RANKS * NAMES_PER_RANK


def test_ranks_adding_names_to_one_edge_lose_none_s3(s3_endpoint):
    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}
    _concurrent_edge_names(f"s3://edges-{uuid.uuid4().hex[:12]}/store", options)


class _CrashError(Exception):
    pass


@pytest.mark.parametrize("new_run", [False, True], ids=["indexed-run", "new-run"])
def test_a_writer_dying_half_way_through_add_source_loses_no_descendant(tmp_path, monkeypatch, new_run):
    """The writer dies after its first file of the edge (an indexed run: the reverse marker; a run
    the call made: the sources/ line, before the first-edge marker that indexes the run): the
    descendant is still found, and the retry completes the edge, for TorchX's reader too."""
    root = str(tmp_path / "store")
    store = FsspecStore(root)
    store.add_metadata(PARENT, kind="data")
    if not new_run:
        store.add_metadata(CHILD, lr=0.1)  # the run exists and is indexed before the edge
    real_create_once = StoreFiles.create_once
    writes: list[str] = []

    def dying(self, path, text=""):
        if writes:
            raise _CrashError(path)
        writes.append(path)
        return real_create_once(self, path, text)

    def dying_after_the_line(self, existing, path):
        writes.append(existing)
        raise _CrashError(path)

    monkeypatch.setattr(StoreFiles, "create_once", dying)
    monkeypatch.setattr(StoreFiles, "link_once", dying_after_the_line)
    if not new_run:  # the sources/ line is that run's second write
        monkeypatch.setattr(StoreFiles, "append_line", lambda self, path, *a, **k: dying(self, path))
    with pytest.raises(_CrashError):
        store.add_source(CHILD, PARENT, "data")
    monkeypatch.undo()
    if new_run:
        assert Path(writes[0]).read_text() == "data\n"  # the run's sources/ line, then the crash
    else:
        assert len(writes) == 1 and Path(writes[0]).name.startswith(".d.")
    assert FsspecStore(root).run_ids(parent_run_id=PARENT) == [CHILD]
    assert FsspecStore(root).lineage(PARENT).descendant_ids == [CHILD]
    store.add_source(CHILD, PARENT, "data")  # the rank's retry
    assert list(FsspecStore(root).sources(CHILD)) == [TrackerSource(PARENT, "data")]
    assert FsspecStore(root).run_ids(parent_run_id=PARENT) == [CHILD]
    theirs = FsspecTracker(fsspec.filesystem("file"), root)
    assert [(s.source_run_id, s.artifact_name) for s in theirs.sources(CHILD)] == [(PARENT, "data")]


def test_a_query_reuses_the_root_listing_only_while_the_root_is_unchanged(tmp_path, monkeypatch):
    """A local root whose stamp (mtime, inode, link count, size) is unchanged is not listed again;
    a run added by another writer, or by TorchX's tracker, changes it and is seen at once."""
    from torchx_airflow_tracker.root_listing import RACY_WINDOW_NS

    root = tmp_path / "store"
    writer = FsspecStore(str(root))
    writer.add_source(CHILD, PARENT, "data")

    def age_root() -> None:  # as if the last write was a while ago (a recent stamp is not trusted)
        past = time.time_ns() - 2 * RACY_WINDOW_NS
        os.utime(root, ns=(past, past))

    listings: list[str] = []  # of the root (a run TorchX wrote, unindexed, is read in its own directory)
    real_names = StoreFiles.names

    def names(self, directory, hidden=False):
        listings.extend([directory] if directory == str(root) else [])
        return real_names(self, directory, hidden)

    monkeypatch.setattr(StoreFiles, "names", names)
    reader = FsspecStore(str(root))
    age_root()
    assert reader.run_ids(parent_run_id=PARENT) == [CHILD]
    assert reader.run_ids(parent_run_id=PARENT) == [CHILD]
    assert sorted(reader.run_ids()) == [CHILD]
    assert listings == [str(root)]  # one listing for the three queries

    FsspecStore(str(root)).add_source("slurm://torchx/child-3", PARENT)
    assert reader.run_ids(parent_run_id=PARENT) == [CHILD, "slurm://torchx/child-3"]
    age_root()
    reader.run_ids(parent_run_id=PARENT)
    torchx_writes(root, [("add_source", ["slurm://torchx/child-4", PARENT, "x"])], None)
    assert reader.run_ids(parent_run_id=PARENT) == [CHILD, "slurm://torchx/child-3", "slurm://torchx/child-4"]
    assert len(listings) == 4

    reader.run_ids(parent_run_id=PARENT)  # the root changed just now: not trusted, listed again
    assert len(listings) == 5


@pytest.mark.parametrize("protocol", ["local", "memory"])
def test_ids_of_any_length(tmp_path, protocol):
    """Run and source ids past what a file name holds (255 bytes; base32 makes 159 bytes 255)."""
    root = str(tmp_path / "store") if protocol == "local" else f"memory://long-{uuid.uuid4().hex}"
    run = "airflow://dag/" + "task-" * 60  # 314 bytes
    dataset = "s3://bucket/" + "part/" * 80 + "data.parquet"
    parent = "slurm://torchx/" + "p" * 200
    store = FsspecStore(root)
    store.add_metadata(run, lr=0.1)
    store.add_artifact(run, "m" * 300, "/model.pt")
    store.add_source(run, dataset, "n" * 200)
    store.add_source(run, parent)
    store.add_metadata(parent, kind="prep")
    fresh = FsspecStore(root)
    assert fresh.metadata(run) == {"lr": 0.1}
    assert set(fresh.artifacts(run)) == {"m" * 300}
    assert sorted((s.source_run_id, s.artifact_name) for s in fresh.sources(run)) == sorted(
        [(dataset, "n" * 200), (parent, None)]
    )
    assert sorted(fresh.run_ids()) == sorted([run, parent])
    assert fresh.run_ids(parent_run_id=dataset) == [run]
    assert fresh.lineage(parent).descendant_ids == [run]
    if protocol == "local":  # TorchX's reader still lists the store (a long id under its digest name)
        listed = FsspecTracker(fsspec.filesystem("file"), root).run_ids()
        assert len(listed) == 2


def test_a_malformed_entry_is_skipped_with_a_warning(tmp_path, caplog):
    store = FsspecStore(str(tmp_path))
    store.add_metadata(CHILD, lr=0.1)
    store.add_artifact(CHILD, "model", "/m.pt")
    run_dir = tmp_path / run_dir_name(CHILD)
    (run_dir / "metadata" / "0-bad-list").write_text("[]")
    (run_dir / "metadata" / "1-bad-value").write_text('{"metadata": 3}')
    (run_dir / "artifacts" / "0-bad").write_text('{"path": "/x"}')
    (run_dir / "artifacts" / "1-bad").write_text("[]")
    store.add_metadata(CHILD, epochs=2)
    with caplog.at_level("WARNING", logger="torchx_airflow_tracker.fsspec_store"):
        assert store.metadata(CHILD) == {"lr": 0.1, "epochs": 2}
        assert set(store.artifacts(CHILD)) == {"model"}
    assert len([r for r in caplog.records if "Skipping" in r.getMessage()]) == 4
    assert "0-bad-list" in caplog.text


class ReadOnlyFileSystem(fsspec.AbstractFileSystem):
    """A local directory through fsspec that refuses every write: a reader's least privilege."""

    protocol = "readonly"
    root_marker = "/"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.local = fsspec.filesystem("file")

    def ls(self, path, detail=True, **kwargs):
        return self.local.ls(path, detail=detail)

    def info(self, path, **kwargs):
        return self.local.info(path)

    def cat_file(self, path, start=None, end=None, **kwargs):
        return self.local.cat_file(path, start=start, end=end)

    def _open(self, path, mode="rb", **kwargs):
        if mode != "rb":
            raise PermissionError(f"read-only store: open({path!r}, {mode!r})")
        return self.local._open(path, mode)

    def _refuse(self, *args, **kwargs):
        raise PermissionError(f"read-only store: write {args!r}")

    pipe_file = mkdir = makedirs = rm = rm_file = rmdir = touch = mv = cp_file = put_file = _refuse


def _tree(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p): (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"") for p in root.rglob("*")}


def test_readers_never_write(tmp_path):
    """Every query answers with read-only credentials, and a local store is left unchanged."""
    fsspec.register_implementation("readonly", ReadOnlyFileSystem, clobber=True)
    root = tmp_path / "store"
    torchx_writes(root, [("add_source", [CHILD, PARENT, "torchx-edge"])], None)  # never indexed
    writer = FsspecStore(str(root))
    _write_sample(writer)
    before = _tree(root)

    for store in (FsspecStore(f"readonly://{root}"), FsspecStore(str(root))):
        assert store.metadata(CHILD) == {"lr": 0.1, "epochs": 2}
        assert set(store.artifacts(CHILD)) == {"model"}
        assert sorted(s.artifact_name for s in store.sources(CHILD)) == ["data", "torchx-edge"]
        assert store.run_ids(parent_run_id=PARENT) == [CHILD]
        assert store.descendants(PARENT)[0].source_run_id == CHILD
        assert store.lineage(PARENT).descendant_ids == [CHILD]
        assert sorted(store.run_ids()) == sorted([PARENT, CHILD])
    assert _tree(root) == before
    with pytest.raises(PermissionError):
        FsspecStore(f"readonly://{root}").add_metadata(CHILD, x=1)  # the wrapper does refuse writes

    missing = tmp_path / "not-yet"
    assert list(FsspecStore(str(missing)).run_ids()) == []
    assert FsspecStore(str(missing)).lineage(CHILD).descendant_ids == []
    assert not missing.exists()  # a reader made no root
