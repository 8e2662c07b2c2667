"""The cache key (torchx_airflow.policies.cache.inputs): what changes it, what does not, what it never holds.

Keys are computed from real TorchX apps (components materialized by TorchX), real files, a real
fsspec store on memory:// and a local directory; the mutation suite changes one field at a time."""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore

from tests.secret_search import find_secret
from torchx_airflow.exceptions import TorchXConfigError
from torchx_airflow.policies.cache.fingerprints import read_scope
from torchx_airflow.policies.cache.inputs import (
    IGNORED,
    file_inputs,
    ignore_args,
    key_inputs,
    key_of,
    parent_inputs,
)
from torchx_airflow.policies.cache.policy import cache_enabled, key_app
from torchx_airflow.policies.cache.records import new_record, usable
from torchx_airflow.policies.cache.signing import CacheKeys
from torchx_airflow.settings.checks import check_ignore_args, check_ttl

SECRET = "cache-Secret-Value-7731"
KEYS = CacheKeys((b"unit-test-deployment-key-0123456789",))


@pytest.fixture
def job(tmp_path) -> Path:
    script = tmp_path / "train.py"
    script.write_text("print('train')\n")
    return script


@pytest.fixture
def parent(tmp_path):
    """A store with a parent run whose artifact is a local file of 100 bytes."""
    data = tmp_path / "data.csv"
    data.write_bytes(b"x" * 100)
    store = FsspecStore(f"memory://cache-{uuid.uuid4().hex}")
    store.add_artifact("local_cwd://torchx/prepare-1", "data", str(data))
    return store, "local_cwd://torchx/prepare-1", data


def _key(
    job, parent=None, *, args=(), env=None, image=None, cfg=None, salt="", rules=(), component="utils.python"
):
    component_args = ["--script", str(job)]
    if image is not None:
        component_args = ["--image", image, *component_args]
    component_args += ["--", "--lr", "0.1", "--out", "/out/run-1", *args]
    app = key_app(
        "train",
        component=component,
        component_args=component_args,
        app=None,
        env=env if env is not None else {"LOG": "info", "API_TOKEN": SECRET},
        app_name=None,
        rules=rules,
    )
    # the deployment's output roots name where the parents wrote (the parent's file's directory)
    roots = (str(parent[2].parent),) if parent and len(parent) > 2 else ()
    scope = read_scope(app, [parent[0]], roots) if parent else None
    parents = parent_inputs(parent[0], [parent[1]], scope) if parent else []
    inputs = key_inputs(app, "local_cwd", cfg or {"log_dir": None, "prepend_cwd": False}, keys=KEYS,
                        files=file_inputs(app), parents=parents, salt=salt)  # fmt: skip
    return key_of(inputs), inputs


def test_the_same_inputs_give_the_same_key(job, parent):
    first, inputs = _key(job, parent)
    second, _ = _key(job, parent)
    assert first == second and len(first) == 64
    assert inputs["files"][str(job)]["sha256"]  # the job script, by content
    assert inputs["parents"][0]["fingerprint"]["size"] == 100


def _flip_a_byte_keeping_size_and_mtime(path: Path) -> None:
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns


MUTATIONS = {
    "argument": {"args": ["--epochs", "3"]},
    "env value": {"env": {"LOG": "debug", "API_TOKEN": SECRET}},
    "secret env value": {"env": {"LOG": "info", "API_TOKEN": SECRET + "x"}},
    "image": {"image": "ghcr.io/pytorch/torchx:0.7.1"},
    "cfg": {"cfg": {"log_dir": None, "prepend_cwd": True}},
    "salt": {"salt": "again"},
    "component": {"component": "dist.ddp"},
}


@pytest.mark.parametrize("field", list(MUTATIONS))
def test_each_single_field_change_gives_another_key(job, parent, field):
    baseline, _ = _key(job, parent)
    changed, _ = _key(job, parent, **MUTATIONS[field])
    assert changed != baseline


def test_one_byte_of_a_parent_artifact_gives_another_key(job, parent):
    baseline, _ = _key(job, parent)
    _flip_a_byte_keeping_size_and_mtime(parent[2])
    assert _key(job, parent)[0] != baseline


def test_one_byte_of_the_job_script_gives_another_key(job, parent):
    baseline, _ = _key(job, parent)
    _flip_a_byte_keeping_size_and_mtime(job)
    assert _key(job, parent)[0] != baseline


def test_a_parent_artifact_on_a_remote_store_is_told_by_its_content(job):
    store = FsspecStore(f"memory://cache-{uuid.uuid4().hex}")
    url = f"memory:/{store.root}/artifacts/data.bin"  # under the store's root: read with its filesystem
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe_file(url, b"a" * 50)
    store.add_artifact("slurm://torchx/1", "data", url)
    baseline, _ = _key(job, (store, "slurm://torchx/1"))
    fs.pipe_file(url, b"a" * 49 + b"b")
    assert _key(job, (store, "slurm://torchx/1"))[0] != baseline


def test_a_parent_artifact_that_is_gone_stops_caching(job, parent):
    from torchx_airflow.policies.cache.fingerprints import FingerprintError

    parent[2].unlink()
    with pytest.raises(FingerprintError, match="data.csv"):
        _key(job, parent)


def test_ignored_arguments_leave_the_key_as_it_was(job, parent):
    baseline, _ = _key(job, parent, rules=["--out=*"])
    app_args = ["--script", str(job), "--", "--lr", "0.1", "--out", "/out/run-2"]
    app = key_app("train", component="utils.python", component_args=app_args, app=None,
                  env={"LOG": "info", "API_TOKEN": SECRET}, app_name=None, rules=["--out=*"])  # fmt: skip
    assert IGNORED in app.roles[0].args
    parents = parent_inputs(parent[0], [parent[1]], read_scope(app, [parent[0]], (str(parent[2].parent),)))
    cfg = {"log_dir": None, "prepend_cwd": False}
    other = key_of(key_inputs(app, "local_cwd", cfg, keys=KEYS, files=file_inputs(app), parents=parents))
    assert other == baseline
    assert _key(job, parent, rules=["--out=*"], args=["--log-level", "debug"])[0] != baseline


def test_ignore_rules_options_flags_and_patterns():
    args = ["--lr", "0.1", "--out", "/r/1", "--shift", "-1", "--log=DEBUG", "-v", "--keep", "/tmp/run-7/x"]
    assert ignore_args(args, ["--out=*", "--shift=*", "--log", "-v", "/tmp/run-*"]) == [
        "--lr", "0.1", "--out", IGNORED, "--shift", IGNORED, "--log=" + IGNORED, "--keep", IGNORED,
    ]  # fmt: skip
    assert ignore_args(["--outdir", "x"], ["--out=*"]) == ["--outdir", "x"]  # a longer option is another one


@pytest.mark.parametrize("rule", ["-v", "--verbose", "--out"])
def test_a_flag_rule_never_swallows_the_positional_after_it(rule):
    """``-v a.csv`` and ``-v b.csv`` keep their files apart: only ``OPT=*`` takes the next argument."""
    assert ignore_args([rule, "a.csv"], [rule]) == ["a.csv"]
    assert ignore_args([rule, "a.csv"], [rule]) != ignore_args([rule, "b.csv"], [rule])
    assert ignore_args([f"{rule}=x", "a.csv"], [rule]) == [f"{rule}={IGNORED}", "a.csv"]
    assert ignore_args([rule, "a.csv"], [f"{rule}=*"]) == [rule, IGNORED]  # declared as taking a value


def test_a_flag_rule_keeps_the_file_after_it_in_the_key(job, parent, tmp_path):
    """The file after ``-v`` is still fingerprinted: two contents, two keys."""
    data = tmp_path / "a.csv"
    data.write_text("1,2\n")
    first, _ = _key(job, parent, rules=["-v"], args=["-v", str(data)])
    data.write_text("1,3\n")
    assert _key(job, parent, rules=["-v"], args=["-v", str(data)])[0] != first


def test_ignoring_what_the_component_parses_is_a_clear_error(job):
    with pytest.raises(TorchXConfigError, match=r"cache_ignore_args \['-j=\*'\].*does not build"):
        key_app("t", component="dist.ddp", component_args=["-j", "1x2", "--script", str(job)], app=None,
                env=None, app_name=None, rules=["-j=*"])  # fmt: skip


def test_an_appdef_task_ignores_in_its_roles_arguments():
    from torchx.specs import AppDef, Role

    app = AppDef("x", roles=[Role("r", image="i", entrypoint="python", args=["a.py", "--out", "/r/9"])])
    built = key_app(
        "t", component=None, component_args=None, app=app, env=None, app_name=None, rules=["--out=*"]
    )
    assert built.roles[0].args == ["a.py", "--out", IGNORED]
    assert app.roles[0].args[-1] == "/r/9"  # the task's own AppDef is left as it is


def test_the_key_never_holds_a_secret_in_any_form(job, parent):
    _, inputs = _key(job, parent, env={"API_TOKEN": SECRET, "DB_URL": f"postgresql://u:{SECRET}@db/x"})
    text = json.dumps(inputs)
    assert find_secret(SECRET, text) == []
    assert inputs["app"]["roles"][0]["env"]["API_TOKEN"].keys() == {"secret_hmac"}


def test_the_app_name_is_not_part_of_the_key(job):
    def key(name):
        args = ["--script", str(job)]
        app = key_app(
            name, component="utils.python", component_args=args, app=None, env=None, app_name=None, rules=()
        )
        return key_of(key_inputs(app, "local_cwd", {}, keys=KEYS, files=file_inputs(app)))

    assert key("train") == key("train_again")


def test_a_record_is_usable_until_it_expires_or_its_outputs_change(tmp_path):
    out = tmp_path / "model.bin"
    out.write_bytes(b"weights")
    result = {
        "state": "SUCCEEDED",
        "artifacts": {"model": {"name": "model", "path": str(out), "metadata": {}}},
    }
    key, scope = "a" * 64, "dag:d"
    record = new_record(key, scope, "local_cwd://torchx/t-1", result, 60, {"airflow_dag_id": "d"}, KEYS)
    assert usable(record, key, scope, 60, KEYS) is None
    assert usable(record, "b" * 64, scope, 60, KEYS) == ("it is the record of another key", True)
    assert usable(record, key, scope, 60, KEYS, now=time.time() + 61) == ("expired", False)
    # the reader's TTL applies too: the shorter of the record's expires and the reader's cache_ttl
    assert usable(record, key, scope, 5, KEYS, now=time.time() + 6) == ("expired", False)
    _flip_a_byte_keeping_size_and_mtime(out)
    assert "changed since" in usable(record, key, scope, 60, KEYS)[0]
    out.unlink()
    assert "is gone" in usable(record, key, scope, 60, KEYS)[0]


def test_parameters_are_checked_with_the_fix_in_the_message():
    with pytest.raises(TorchXConfigError, match=r"cache_ignore_args must be a list.*got '--out'"):
        check_ignore_args("--out", "Task 't'")
    with pytest.raises(TorchXConfigError, match=r"cache_ttl must be a positive.*got -1"):
        check_ttl(-1, "Task 't'")
    assert check_ttl(timedelta(days=1), "t") == 86400.0


def test_caching_is_off_for_a_task_that_does_not_wait():
    assert cache_enabled(None, True, True) and cache_enabled(True, False, True)
    assert not cache_enabled(False, True, True) and not cache_enabled(True, True, False)


def test_an_operator_caching_without_waiting_is_refused():
    from torchx_airflow.operators.torchx import TorchXOperator

    with pytest.raises(TorchXConfigError, match="cache=True needs wait_for_completion=True"):
        TorchXOperator(task_id="t", component="utils.echo", cache=True, wait_for_completion=False)


def test_a_cached_task_without_a_tracker_fails_before_submitting():
    from tests.fakes import FakeSchedulerHook, TaskStateStore, _context
    from torchx_airflow.operators.torchx import TorchXOperator

    hook = FakeSchedulerHook([])
    op = TorchXOperator(task_id="t", component="utils.echo", cache=True, tracker_conn_ids=[])
    op.__dict__["hook"] = hook
    with pytest.raises(TorchXConfigError, match="has no tracker: cache records live in the task's trackers"):
        op.execute(_context(TaskStateStore()))
    assert getattr(hook, "tokens", []) == []  # observed: nothing reached the scheduler
