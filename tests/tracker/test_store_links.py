"""No link is followed in a local fsspec store: a job that tracks to the store plants symbolic links
(to ``/proc/self/environ``, to a secret file, to a directory elsewhere), FIFOs and hard-to-read
entries in run directories, and removes their index markers. Whatever the next writer (the worker
recording usage or lineage), a reader (the lineage view, ``run_ids``), ``reindex`` or the command line
does, no byte of what a link points at reaches any file or name of the store, nothing is written
through a link, and no read blocks."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from torchx_airflow_tracker import cli
from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.store_files import UnsafeEntryError
from torchx_airflow_tracker.store_layout import run_dir_name

CANARY = "worker-secret-canary-7Qx2"  # in this process's environment: /proc/self/environ holds it
HOSTILE = "slurm://torchx/hostile-1"
VICTIM = "slurm://torchx/train-1"
PARENT = "slurm://torchx/prepare-1"


@pytest.fixture(autouse=True)
def canary_env(monkeypatch):
    monkeypatch.setenv("TORCHX_AIRFLOW_TEST_CANARY", CANARY)


@pytest.fixture
def secret_file(tmp_path) -> Path:
    path = tmp_path / "outside" / "airflow.cfg"
    path.parent.mkdir()
    path.write_text(f"[core]\nfernet_key = {CANARY}\n")
    return path


def _store(tmp_path) -> FsspecStore:
    return FsspecStore(str(tmp_path / "store"))


def _run_dir(store: FsspecStore, run_id: str) -> Path:
    return Path(store.root) / run_dir_name(run_id)


def _assert_no_canary(store: FsspecStore) -> None:
    """No file name, link target or file content under the root holds the canary."""
    for directory, dirs, files in os.walk(store.root):
        for name in [*dirs, *files]:
            assert CANARY not in name
            path = Path(directory) / name
            if path.is_symlink():
                continue  # the planted links themselves: their targets are what must not be read
            if path.is_file():
                assert CANARY.encode() not in path.read_bytes(), path


def _plant(store: FsspecStore, secret_file: Path) -> None:
    """A hostile job's own run, whose sources are links to the worker's environment and a secret
    file, whose metadata is a FIFO and a link; then its index markers removed."""
    store.add_source(HOSTILE, PARENT, "data")
    store.add_metadata(HOSTILE, loss=0.5)
    run_dir = _run_dir(store, HOSTILE)
    (run_dir / "sources" / run_dir_name(PARENT)).unlink()
    (run_dir / "sources" / run_dir_name(PARENT)).symlink_to("/proc/self/environ")
    (run_dir / "sources" / run_dir_name("slurm://torchx/x")).symlink_to(secret_file)
    os.mkfifo(run_dir / "metadata" / "0-fifo")
    (run_dir / "metadata" / "1-link").symlink_to(secret_file)
    for marker in Path(store.root).glob(".[ide].*"):
        marker.unlink()


def test_a_writer_a_reader_reindex_and_the_cli_never_read_through_a_link(tmp_path, secret_file, capsys):
    store = _store(tmp_path)
    _plant(store, secret_file)
    writer = _store(tmp_path)  # the worker recording usage and lineage on the hostile run
    writer.add_metadata(HOSTILE, torchx_usage={"elapsed_s": 1})
    writer.add_source(HOSTILE, "slurm://torchx/other", "model")
    reader = _store(tmp_path)
    assert HOSTILE in reader.run_ids()
    reader.lineage(HOSTILE)
    assert reader.metadata(HOSTILE) == {"loss": 0.5, "torchx_usage": {"elapsed_s": 1}}
    _store(tmp_path).reindex()
    assert cli.main(["--fsspec", store.root, "reindex"]) == 0
    assert cli.main(["--fsspec", store.root, "show", HOSTILE]) == 0
    _assert_no_canary(store)
    assert CANARY not in capsys.readouterr().out
    assert reader.files.refused  # each refused entry logged (once)


def test_a_fifo_never_blocks_a_reader(tmp_path, secret_file):
    store = _store(tmp_path)
    _plant(store, secret_file)
    done = threading.Event()

    def read() -> None:
        _store(tmp_path).metadata(HOSTILE)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(20), "a read of a run holding a FIFO blocked"


def test_an_append_through_a_link_writes_nothing_where_it_points(tmp_path, secret_file):
    """A run's sources file replaced by a link to a file the worker can write: the worker's next
    edge on that run is refused, and the file is untouched."""
    store = _store(tmp_path)
    store.add_source(VICTIM, PARENT, "data")
    target = tmp_path / "outside" / "crontab"
    target.write_text("kept\n")
    edge_file = _run_dir(store, VICTIM) / "sources" / run_dir_name(PARENT)
    edge_file.unlink()
    edge_file.symlink_to(target)
    with pytest.raises(UnsafeEntryError, match="symbolic link"):
        _store(tmp_path).add_source(VICTIM, PARENT, "model")
    assert target.read_text() == "kept\n"


def test_a_run_directory_or_a_category_that_is_a_link_is_refused(tmp_path, secret_file):
    store = _store(tmp_path)
    elsewhere = tmp_path / "outside" / "run"
    (elsewhere / "metadata").mkdir(parents=True)
    (elsewhere / "metadata" / "0-entry").write_text('{"metadata": {"loss": 0.0001}}')
    _run_dir(store, VICTIM).parent.mkdir(parents=True, exist_ok=True)
    _run_dir(store, VICTIM).symlink_to(elsewhere)  # the whole run directory
    assert _store(tmp_path).metadata(VICTIM) == {}
    with pytest.raises(UnsafeEntryError):
        _store(tmp_path).add_metadata(VICTIM, loss=0.3)
    assert sorted(p.name for p in (elsewhere / "metadata").iterdir()) == ["0-entry"]  # nothing written there

    store.add_metadata(PARENT, loss=0.2)
    metadata = _run_dir(store, PARENT) / "metadata"
    for entry in metadata.iterdir():
        entry.unlink()
    metadata.rmdir()
    metadata.symlink_to(elsewhere / "metadata")  # one category of a real run
    assert _store(tmp_path).metadata(PARENT) == {}


def test_a_cache_record_that_is_a_link_is_not_read_and_a_new_record_replaces_the_link(tmp_path, secret_file):
    store = _store(tmp_path)
    key = "ab" * 32
    record_path = Path(store.root) / f".c.{key}"
    Path(store.root).mkdir(parents=True, exist_ok=True)
    record_path.symlink_to(secret_file)
    assert store.cache_records.get(key) is None
    store.cache_records.put(key, {"app_handle": VICTIM})
    assert not record_path.is_symlink() and store.cache_records.get(key) == {"app_handle": VICTIM}
    assert CANARY in secret_file.read_text()  # the link's target is untouched
