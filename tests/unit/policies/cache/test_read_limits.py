"""Reads with limits (torchx_airflow/policies/cache/fingerprints.py): paths a store holds are what any
job tracking to it wrote, so fingerprints read only regular local files under the task's roots and
URLs under its stores, bounded in bytes and time, in the calling thread.

Real files, a real FIFO, the real /dev/zero and /proc/self/environ, a real fsspec store, and a real
HTTP server on loopback that must see no request.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore

from tests.services import recording_http_server
from torchx_airflow.policies.cache.fingerprints import FingerprintError, ReadScope, fingerprint, read_scope
from torchx_airflow.policies.cache.inputs import file_inputs, parent_inputs
from torchx_airflow.policies.cache.records import usable

PARENT = "local_cwd://torchx/prepare-1"


@pytest.fixture
def loopback_url():
    """A URL on an HTTP server on loopback, and the requests it saw."""
    with recording_http_server() as served:
        yield served


def _parent_with(path: str) -> FsspecStore:
    store = FsspecStore(f"memory://reads-{uuid.uuid4().hex}")
    store.add_artifact(PARENT, "out", path)
    return store


def _inputs_of(store: FsspecStore, scope: ReadScope) -> list:
    threads = set(threading.enumerate())
    started = time.monotonic()
    try:
        return parent_inputs(store, [PARENT], scope)
    finally:
        # nothing blocked or burned: a blocked read would last the 30 s read limit (or for ever)
        assert time.monotonic() - started < 20
        # none left behind (a thread of an earlier test may end meanwhile: only new ones count)
        assert set(threading.enumerate()) - threads == set()


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    with pytest.raises(FingerprintError, match="not a regular file"):
        _inputs_of(_parent_with(str(fifo)), ReadScope(local_roots=(str(tmp_path),)))


@pytest.mark.parametrize("path", ["/dev/zero", "/proc/self/environ", "file:///dev/zero", "/sys/kernel/notes"])
def test_devices_proc_and_sys_are_never_read(tmp_path, path):
    with pytest.raises(FingerprintError, match=r"under /proc, /sys or /dev"):
        _inputs_of(_parent_with(path), ReadScope(local_roots=None))  # not even with no roots at all


def test_a_link_to_proc_is_refused_where_it_points(tmp_path):
    link = tmp_path / "config.yaml"
    link.symlink_to("/proc/self/environ")
    with pytest.raises(FingerprintError, match=r"under /proc"):
        _inputs_of(_parent_with(str(link)), ReadScope(local_roots=(str(tmp_path),)))


def test_a_file_named_by_the_arguments_in_proc_is_refused():
    """``--config=/proc/self/environ`` would hash the worker's own environment into the key."""
    from torchx_airflow.apps import build_app_from_component

    app = build_app_from_component("utils.sh", ["train", "--config=/proc/self/environ"])
    with pytest.raises(FingerprintError, match=r"/proc/self/environ.*never read"):
        file_inputs(app)


def test_an_http_url_outside_the_stores_is_never_requested(loopback_url):
    url, requests = loopback_url
    store = _parent_with(url)
    with pytest.raises(FingerprintError, match="not under a configured tracker store"):
        _inputs_of(store, read_scope(None, [store]))
    assert requests == []  # not a HEAD, not a GET


def test_a_local_file_outside_the_tasks_roots_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.key").write_text("k")
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    with pytest.raises(FingerprintError, match="lies outside the task's output roots.*output_roots"):
        _inputs_of(_parent_with(str(elsewhere / "secret.key")), ReadScope(local_roots=(str(task_dir),)))


def test_roots_are_the_output_roots_the_outputs_and_files_the_arguments_name_and_the_local_stores(tmp_path):
    """An argument naming a directory, or a path not made yet, names an output: the path itself is a
    root. One naming a file names an input: the file itself may be read, never its directory (a
    sibling of an input is another's). Never /dev. The deployment's output_roots add theirs."""
    from torchx_airflow.apps import build_app_from_component

    data = tmp_path / "in" / "data.csv"
    data.parent.mkdir()
    data.write_text("1,2\n")
    sibling = data.parent / "secret.key"
    sibling.write_text("k")
    out = tmp_path / "out" / "run-1"  # made by the job later
    shared = tmp_path / "shared"
    local_store = FsspecStore(str(tmp_path / "store"))
    app = build_app_from_component("utils.echo", ["--msg", f"--in={data} --out {out} --dev /dev/zero"])
    scope = read_scope(app, [local_store], (str(shared),))
    assert set(scope.local_roots or ()) == {str(data), str(out), str(shared), str(tmp_path / "store")}
    local_store.add_artifact(PARENT, "out", str(data))
    assert _inputs_of(local_store, scope)[0]["fingerprint"]["size"] == 4  # the named file itself: read
    sibling_store = FsspecStore(str(tmp_path / "store2"))
    sibling_store.add_artifact(PARENT, "out", str(sibling))
    with pytest.raises(FingerprintError, match="output_roots"):  # beside an input: never read
        _inputs_of(sibling_store, scope)


def test_reads_stop_at_the_byte_budget(tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * (3 << 20))
    with pytest.raises(FingerprintError, match="more than 1048576 bytes"):
        fingerprint(str(big), ReadScope(local_roots=(str(tmp_path),), max_bytes=1 << 20))


def test_listing_a_directory_is_charged_to_the_budget(tmp_path, monkeypatch):
    """A tree of empty directories (no file to read) still costs: every entry listed counts against
    MAX_DIRECTORY_FILES, and every listing against the deadline, local and remote alike."""
    import fsspec

    from torchx_airflow.policies.cache import fingerprints

    tree = tmp_path / "out"
    for i in range(30):
        (tree / f"d{i}" / "e").mkdir(parents=True)
    roots = ReadScope(local_roots=(str(tmp_path),))
    assert fingerprint(str(tree), roots) == {"directory": {}}
    monkeypatch.setattr(fingerprints, "MAX_DIRECTORY_FILES", 20)
    with pytest.raises(FingerprintError, match="more than 20 entries"):
        fingerprint(str(tree), roots)
    monkeypatch.setattr(fingerprints, "MAX_DIRECTORY_FILES", 10_000)
    with pytest.raises(FingerprintError, match="took over 0 s"):
        fingerprint(str(tree), ReadScope(local_roots=(str(tmp_path),), seconds=0))

    fs = fsspec.filesystem("memory")
    root = f"/fp-{uuid.uuid4().hex}"
    for i in range(30):
        fs.makedirs(f"{root}/out/d{i}/e", exist_ok=True)
        fs.pipe_file(f"{root}/out/d{i}/e/.keep", b"")
    remote = ReadScope(stores=((fs, root),))
    assert len(fingerprint(f"memory://{root}/out", remote)["directory"]) == 30
    monkeypatch.setattr(fingerprints, "MAX_DIRECTORY_FILES", 20)
    with pytest.raises(FingerprintError, match="more than 20 entries"):
        fingerprint(f"memory://{root}/out", remote)


def test_a_record_whose_outputs_point_at_dev_zero_or_a_url_is_a_miss_at_once(loopback_url):
    """A record's outputs (paths a job chose, signed as the job recorded them) are checked within the
    default scope: no device, no URL; at once, without a request."""
    from torchx_airflow.policies.cache.records import new_record
    from torchx_airflow.policies.cache.signing import SIGNATURE_FIELD, CacheKeys

    keys = CacheKeys((b"read-limits-test-deployment-key-0123456789",))
    url, requests = loopback_url
    for output in ("/dev/zero", url):
        result = {"app_handle": "local_cwd://torchx/x", "state": "SUCCEEDED", "artifacts": {}}
        record = new_record("k", "dag:d", "local_cwd://torchx/x", result, 60, {}, keys)
        fields = {k: v for k, v in record.items() if k != SIGNATURE_FIELD}
        fields["outputs"] = {output: {"size": 5}}
        record = {**fields, SIGNATURE_FIELD: keys.sign(fields)}
        started = time.monotonic()
        reason = usable(record, "k", "dag:d", 60, keys)
        assert reason is not None and "is gone" in reason[0], reason
        assert time.monotonic() - started < 20  # not the 30 s read limit
    assert requests == []
