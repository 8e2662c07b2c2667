"""local_cwd's usage (torchx_airflow/schedulers/processes.py, LocalSupport.usage) on real TorchX
local_cwd apps: each replica process reaped with its CPU time, exit codes kept for TorchX's status,
cancelled apps, and no reaping thread left behind."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from torchx.specs import AppDef, Resource, Role

from torchx_airflow.hooks.torchx import TorchXHook
from torchx_airflow.schedulers.processes import ProcessWatch

BURN = str(Path(__file__).resolve().parents[2] / "dags" / "jobs" / "burn.py")


def _app(*args: str, replicas: int = 1) -> AppDef:
    role = Role(
        "burner",
        image=str(Path(BURN).parent),
        entrypoint=sys.executable,
        args=[BURN, *args],
        num_replicas=replicas,
        resource=Resource(cpu=2, gpu=0, memMB=512),
    )
    return AppDef("burn", roles=[role])


def _run(hook: TorchXHook, app: AppDef) -> str:
    return hook.schedule(hook.dryrun(app, "local_cwd", {}))


def _reapers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("torchx-reap-")]


def test_each_replicas_cpu_time_and_wall_time_come_from_the_kernel():
    hook = TorchXHook()
    try:
        handle = _run(hook, _app("--cpu-seconds", "1.0", "--sleep", "0.5", replicas=2))
        status = hook.wait(handle, wait_interval=0.2)
        assert status is not None and status.state.name == "SUCCEEDED"
        usage = hook.usage(handle)
    finally:
        hook.close()
    assert usage is not None and usage["source"] == "process"
    replicas = usage["replicas"]
    assert [(r["role"], r["replica"], r["exit_code"]) for r in replicas] == [
        ("burner", 0, 0),
        ("burner", 1, 0),
    ]
    for replica in replicas:
        # the job burns 1 s of its own CPU time; the kernel's count adds the interpreter's start
        assert 1.0 <= replica["cpu_time_s"] < 10, replica
        assert replica["cpu_time_s"] == round(replica["user_s"] + replica["system_s"], 3)
        assert replica["wall_s"] >= replica["cpu_time_s"] + 0.5 - 0.05, replica  # single-threaded, then idle
    assert usage["cpu_time_s"] == round(sum(r["cpu_time_s"] for r in replicas), 3)
    assert usage["elapsed_s"] == max(r["wall_s"] for r in replicas)
    assert "unaccounted_replicas" not in usage
    assert not _reapers()


def test_a_failing_replica_keeps_its_exit_code_and_its_usage():
    hook = TorchXHook()
    try:
        handle = _run(hook, _app("--cpu-seconds", "0.2", "--exit-code", "3"))
        status = hook.wait(handle, wait_interval=0.2)
        usage = hook.usage(handle)
    finally:
        hook.close()
    assert status is not None and status.state.name == "FAILED"  # a reaped exit code never reads as 0
    assert usage is not None and usage["replicas"][0]["exit_code"] == 3
    assert usage["cpu_time_s"] >= 0.2


def test_a_cancelled_app_is_accounted_up_to_its_end():
    hook = TorchXHook()
    try:
        handle = _run(hook, _app("--cpu-seconds", "0.1", "--sleep", "60"))
        status = hook.status(handle)
        assert status is not None and status.state.name == "RUNNING"
        hook.cancel(handle)
        assert hook.status(handle).state.name == "CANCELLED"
        usage = hook.usage(handle)
    finally:
        hook.close()
    assert usage is not None and usage["replicas"][0]["exit_code"] == -15  # SIGTERM from TorchX
    assert usage["elapsed_s"] < 30
    assert not _reapers()


def test_a_process_already_reaped_is_not_watched():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    watch = ProcessWatch()
    assert watch.watch("app", "role", 0, proc) is False
    assert not watch.watches("app")


def test_an_app_not_started_here_has_no_process_usage():
    hook = TorchXHook()
    try:
        assert hook.usage("local_cwd://torchx/not-started-here") is None
    finally:
        hook.close()
