"""fsspec store specifics: TorchX compatibility both ways, inline config, concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
import re
import time
import uuid

import fsspec
import pytest
from torchx.tracker.api import TrackerSource, build_trackers
from torchx.tracker.backend.fsspec import FsspecTracker
from torchx_airflow_tracker.config import TrackerConfigError
from torchx_airflow_tracker.fsspec_store import INDEX_ID, FsspecStore, create

PARENT, CHILD = "slurm://torchx/parent-1", "slurm://torchx/child-2"


def _write_sample(tracker) -> None:
    tracker.add_metadata(CHILD, lr=0.1)
    tracker.add_metadata(CHILD, epochs=2)
    tracker.add_artifact(CHILD, "model", "/m.pt", {"sha": "x"})
    tracker.add_metadata(PARENT, kind="data")
    tracker.add_source(CHILD, PARENT, "data")


def test_torchx_reads_a_store_we_wrote(tmp_path):
    _write_sample(FsspecStore(str(tmp_path)))
    theirs = FsspecTracker(fsspec.filesystem("file"), str(tmp_path))
    assert theirs.metadata(CHILD) == {"lr": 0.1, "epochs": 2}
    assert theirs.artifacts(CHILD)["model"].path == "/m.pt"
    assert list(theirs.sources(CHILD)) == [TrackerSource(PARENT, "data")]
    # TorchX lists every directory under the root: the runs, and this store's index
    assert sorted(theirs.run_ids()) == sorted([PARENT, CHILD, INDEX_ID])
    assert list(theirs.run_ids(parent_run_id=PARENT)) == [CHILD]


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
    assert ours.artifacts(CHILD)["model"].metadata == {"sha": "x"}
    assert list(ours.sources(CHILD)) == [TrackerSource(PARENT, "data")]
    assert list(ours.run_ids(parent_run_id=PARENT)) == [CHILD]
    assert ours.descendants(PARENT) == [TrackerSource(CHILD, "data")]
    assert ours.lineage(PARENT).descendant_ids == [CHILD]
    assert ours.lineage(CHILD).parent_ids == [PARENT]
    assert sorted(ours.run_ids()) == sorted([PARENT, CHILD])

    # a run TorchX writes afterwards is answered for on the next query, by the same store object
    grandchild = "slurm://torchx/grandchild-3"
    theirs.add_source(grandchild, CHILD, "model")
    assert list(ours.run_ids(parent_run_id=CHILD)) == [grandchild]
    assert {e.run_id for e in ours.lineage(PARENT).downstream} == {CHILD, grandchild}
    # and a fresh store object (another process) agrees, reading the index written above
    assert ours.ensure_indexed() == 0
    assert list(FsspecStore(ours.url).run_ids(parent_run_id=CHILD)) == [grandchild]


def test_reindex_picks_up_a_source_torchx_added_to_an_indexed_run(tmp_path):
    theirs = _torchx_store(fsspec.filesystem("file"), str(tmp_path))
    _write_sample(theirs)
    ours = FsspecStore(str(tmp_path))
    assert list(ours.run_ids(parent_run_id=PARENT)) == [CHILD]
    other_parent = "slurm://torchx/other-parent"
    theirs.add_source(CHILD, other_parent)  # CHILD is indexed already: the documented gap
    assert ours.reindex() == 1
    assert list(ours.run_ids(parent_run_id=other_parent)) == [CHILD]
    assert ours.reindex() == 0  # idempotent


def test_stores_of_the_previous_layout_still_answer(tmp_path):
    """Reverse edges the previous version wrote under <root>/<b32(parent)>/descendants/ are read."""
    ours = FsspecStore(str(tmp_path))
    ours.add_source(CHILD, PARENT, "data")
    legacy = tmp_path / ours._run_dir(PARENT).rsplit("/", 1)[-1] / "descendants"
    legacy.mkdir(parents=True)
    (legacy / ours._run_dir("slurm://torchx/old-child").rsplit("/", 1)[-1]).write_text("model\n")
    assert sorted(ours.run_ids(parent_run_id=PARENT)) == sorted([CHILD, "slurm://torchx/old-child"])
    assert {(d.source_run_id, d.artifact_name) for d in ours.descendants(PARENT)} == {
        (CHILD, "data"),
        ("slurm://torchx/old-child", "model"),
    }


def test_torchx_cli_lists_our_store(tmp_path):
    import subprocess
    import sys

    _write_sample(FsspecStore(str(tmp_path)))
    config = tmp_path.parent / f"{tmp_path.name}.cfg"
    config.write_text(f"protocol=file\nroot_path={tmp_path}\n")
    # TorchX's own reader over our layout: run ids decode, sources and metadata parse
    code = (
        "from torchx.tracker.backend.fsspec import create; import sys;"
        f"t = create({str(config)!r}); print(sorted(t.run_ids())); print(t.metadata({CHILD!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert str(sorted([PARENT, CHILD, INDEX_ID])) in out  # the index is a directory too
    assert "'epochs': 2" in out


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
        ("not json", "not valid JSON"),
        ('["root"]', "must be a JSON object"),
        ('{"rooot": "/x"}', "Unknown key(s) ['rooot']"),
        ('{"storage_options": {}}', "missing ['root']"),
        ('{"root": "/tmp/x", "storage_options": "k=v"}', "'storage_options' must be a JSON object"),
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
