"""fsspec store specifics: TorchX compatibility both ways, inline config, concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
import re
import time

import fsspec
import pytest
from torchx.tracker.api import TrackerSource, build_trackers
from torchx.tracker.backend.fsspec import FsspecTracker
from torchx_airflow_tracker.config import TrackerConfigError
from torchx_airflow_tracker.fsspec_store import FsspecStore, create

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
    assert sorted(theirs.run_ids()) == sorted([PARENT, CHILD])
    assert list(theirs.run_ids(parent_run_id=PARENT)) == [CHILD]


def test_we_read_a_store_torchx_wrote(tmp_path):
    _write_sample(FsspecTracker(fsspec.filesystem("file"), str(tmp_path)))
    ours = FsspecStore(str(tmp_path))
    assert ours.metadata(CHILD) == {"lr": 0.1, "epochs": 2}
    assert ours.artifacts(CHILD)["model"].metadata == {"sha": "x"}
    assert list(ours.sources(CHILD)) == [TrackerSource(PARENT, "data")]
    assert ours.lineage(CHILD).parent_ids == [PARENT]
    # TorchX's stable writer leaves the descendants index empty; reindex() rebuilds it once
    assert ours.reindex() == 1
    assert list(ours.run_ids(parent_run_id=PARENT)) == [CHILD]
    assert ours.lineage(PARENT).descendant_ids == [CHILD]


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
    assert str(sorted([PARENT, CHILD])) in out
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
