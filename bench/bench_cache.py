"""Cache figures (``torchx_airflow.policies.cache.inputs``): computing a task's key, and a whole hit, against
submitting the same app on local_cwd and waiting for it, which is what a hit saves.

The app is the example pipeline's training step (``dags/jobs/train.py`` through ``dist.ddp``, its
output left out by ``cache_ignore_args``) with one parent artifact (1 MiB, hashed whole) and a
secret env value; the key is computed as the operator does (``caching.key_app`` and the hook's
resolved cfg); a hit is the key, the lookup in a local fsspec store and the check of the earlier
run's output. The baseline submits a one-line Python job (``utils.python``) with the operator's
hook and waits until it ends: the least a miss costs on the cheapest scheduler.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench.common import Figure, figure, interleaved, median

REPO = Path(__file__).resolve().parent.parent
CONN_ID = "torchx_bench_cache"
ARTIFACT_BYTES = 1 << 20


class _Setup:
    """The store, the parent run and its artifact, the hook, and the functions timed."""

    def __init__(self, workdir: Path) -> None:
        from torchx_airflow_tracker.fsspec_store import FsspecStore

        from torchx_airflow.hooks.torchx import TorchXHook
        from torchx_airflow.policies.cache.records import new_record
        from torchx_airflow.policies.cache.signing import CacheKeys

        # a benchmark's own deployment key: the HMACs cost the same whatever the key
        self.keys = CacheKeys((b"bench-deployment-cache-key-0123456789",))
        self.store = FsspecStore(str(workdir / "store"))
        data = workdir / "data.csv"
        data.write_bytes(os.urandom(ARTIFACT_BYTES))
        self.parent = "local_cwd://torchx/prepare-bench"
        self.store.add_artifact(self.parent, "data", str(data))
        self.hook = TorchXHook(CONN_ID)
        self.workdir = workdir
        self.key = self.compute_key()
        model = workdir / "model.pt"
        model.write_bytes(os.urandom(ARTIFACT_BYTES))
        result = {
            "state": "SUCCEEDED",
            "artifacts": {"model": {"name": "model", "path": str(model), "metadata": {}}},
        }
        record = new_record(self.key, "deployment", "local_cwd://torchx/train-1", result, 3600, {}, self.keys)
        self.store.cache_records.put(self.key, record)

    def compute_key(self, secret: bool = True) -> str:
        from torchx_airflow.policies.cache.fingerprints import read_scope
        from torchx_airflow.policies.cache.inputs import file_inputs, key_inputs, key_of, parent_inputs
        from torchx_airflow.policies.cache.policy import key_app

        env = {"LOGLEVEL": "INFO", **({"API_TOKEN": "bench-secret-value"} if secret else {})}
        app = key_app(
            "train",
            component="dist.ddp",
            component_args=[
                "-j",
                "1x2",
                "--script",
                str(REPO / "dags" / "jobs" / "train.py"),
                "--",
                "--data",
                str(self.workdir / "data.csv"),
                "--out",
                "/out/run-1/train-0",
            ],  # fmt: skip
            app=None,
            env=env,
            app_name=None,
            rules=("--out=*",),
        )
        scheduler = self.hook.scheduler
        cfg = self.hook.resolve_cfg(scheduler, self.hook.cfg)
        scope = read_scope(app, [self.store])
        inputs = key_inputs(app, scheduler, cfg, keys=self.keys, files=file_inputs(app),
                            parents=parent_inputs(self.store, [self.parent], scope))  # fmt: skip
        return key_of(inputs)

    def hit(self) -> None:
        from torchx_airflow.policies.cache.records import find_record

        class _Quiet:
            def info(self, *args: Any) -> None:
                pass

            warning = info

        found = find_record([self.store], self.compute_key(), "deployment", 3600, self.keys, _Quiet())
        if found is None:
            raise AssertionError("the benchmark's record was not found: the key changed")

    def submit_and_wait(self) -> None:
        from torchx_airflow.apps import build_task_app

        app = build_task_app("hello", component="utils.python", component_args=["-c", "print('hello')"])
        dryrun = self.hook.dryrun(app)
        status = self.hook.wait(self.hook.schedule(dryrun), wait_interval=0.05)
        if status is None or status.state.name != "SUCCEEDED":
            raise AssertionError(f"the baseline job did not succeed: {status}")


def run() -> list[Figure]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.setdefault("AIRFLOW_HOME", str(workdir / "airflow"))
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
        {"conn_type": "torchx", "extra": {"scheduler": "local_cwd"}}
    )
    try:
        os.chdir(workdir)  # local_cwd writes its logs here, never into the repo
        setup = _Setup(workdir)
        candidates = {
            "key": setup.compute_key,
            "key without a secret": lambda: setup.compute_key(secret=False),
            "hit": setup.hit,
            "submit": setup.submit_and_wait,
        }
        times = interleaved(candidates, repeat=9, warmup=2)
        setup.hook.close()
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        shutil.rmtree(workdir, ignore_errors=True)
    submit, plain = median(times["submit"]), median(times["key without a secret"])
    note = (
        "dist.ddp app with its job script (hashed), a 1 MiB parent artifact (hashed) and a secret env value "
        "(keyed HMAC-SHA256); baseline: utils.python one-liner, dry run + submit + wait (poll 0.05 s); "
        f"9 interleaved rounds; the same key without the secret env value: {plain * 1000:.1f} ms"
    )
    return [
        figure(
            "cache key of a task (local_cwd)",
            "submitting and waiting for a one-line job (local_cwd)",
            "<= 0.1",
            median(times["key"]),
            submit,
            "s",
            lambda r: r <= 0.1,
            note,
        ),  # fmt: skip
        figure(
            "cache hit: key + lookup + the earlier run's output checked (local fsspec store)",
            "submitting and waiting for a one-line job (local_cwd)",
            "<= 0.1",
            median(times["hit"]),
            submit,
            "s",
            lambda r: r <= 0.1,
            note + "; the earlier output: 1 MiB, hashed",
        ),  # fmt: skip
    ]
