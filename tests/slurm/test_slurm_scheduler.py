"""The Slurm scheduler layer on the real cluster: batched status, jobs cancelled outside Airflow,
and a sync wait whose log readers never ask Slurm anything themselves.

Every command the provider runs against Slurm is counted by a PATH shim around ``sacct``, ``squeue``
and ``scontrol`` (the real commands run; each call is logged). Jobs are submitted held
(``sbatch --hold``) where they need not run, and
every job a test creates is cancelled by id when it ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow.sdk import Connection

from tests.polling import wait_until
from tests.slurm.conftest import SLURM_CONN
from tests.waits import worker_wait
from torchx_airflow.run.logs import READER_THREAD_PREFIX

pytestmark = pytest.mark.integration
SLURM_COMMANDS = ("sacct", "squeue", "scontrol")


class CommandLog:
    """Counts the Slurm client commands run by this process (through the PATH shim)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def calls(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []

    def count(self, command: str | None = None) -> int:
        return sum(1 for call in self.calls() if command is None or call.split()[0] == command)


@pytest.fixture
def slurm_commands(tmp_path, monkeypatch) -> CommandLog:
    """``sacct``/``squeue``/``scontrol`` on PATH log each call, then run the real command."""
    shim = tmp_path / "shim"
    shim.mkdir()
    log = tmp_path / "slurm-commands.log"
    for command in SLURM_COMMANDS:
        real = shutil.which(command)
        assert real, f"{command} is not installed"
        script = shim / command
        script.write_text(f'#!/bin/sh\necho "{command} $*" >> {log}\nexec {real} "$@"\n')
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    return CommandLog(log)


@pytest.fixture
def slurm_hook(slurm_cluster, tmp_path, monkeypatch):
    """A hook built the way Airflow builds it (``Connection.get_hook``); jobs write into tmp_path."""
    monkeypatch.chdir(tmp_path)  # the job's work dir, where its output files go
    monkeypatch.setenv("AIRFLOW_CONN_TORCHX_SLURM", SLURM_CONN)
    hook = Connection(
        conn_id="torchx_slurm", conn_type="torchx", extra=json.loads(SLURM_CONN)["extra"]
    ).get_hook()
    yield hook
    hook.close()


@pytest.fixture
def submitted(slurm_hook) -> Iterator[list[str]]:
    """Handles of the apps a test submits; each is cancelled (by id) when the test ends."""
    handles: list[str] = []
    yield handles
    ids = [h.rsplit("/", 1)[1] for h in handles]
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True)


def submit(hook, handles: list[str], app, hold: bool = False) -> str:
    """Submit ``app``; ``hold`` keeps it queued (``sbatch --hold``) so nothing runs."""
    dryrun = hook.dryrun(app)
    if hold:  # TorchX's documented way to adjust a request before it is submitted
        dryrun.info.request.cmd.append("--hold")
    handle = hook.schedule(dryrun)
    handles.append(handle)
    return handle


def sleep_app(seconds: int = 300, name: str = "sched-test"):
    from torchx_airflow.apps import build_app_from_component

    app = build_app_from_component("utils.sh", ["sleep", str(seconds)])
    app.name = name
    return app


def multi_replica_app(roles: int = 2, replicas: int = 2):
    from torchx.specs import AppDef, Resource, Role

    return AppDef(
        name="follow",
        roles=[
            Role(
                name=f"r{i}",
                image="/tmp",
                entrypoint="bash",
                args=["-c", "echo started; sleep 60"],
                num_replicas=replicas,
                resource=Resource(cpu=1, gpu=0, memMB=64),
            )
            for i in range(roles)
        ],
    )


WAIT_SECONDS = 120  # for a job's state or accounting on a shared cluster


async def first_event(trigger):
    async for event in trigger.run():
        return event
    raise AssertionError("the trigger yielded no event")


def test_a_job_scancelled_outside_airflow_is_cancelled_for_the_hook_and_a_recreated_trigger(
    slurm_hook, submitted
):
    import importlib

    from torchx_airflow.triggers.torchx import TorchXAppTrigger

    handle = submit(slurm_hook, submitted, sleep_app())
    wait_until(lambda: slurm_hook.status(handle), "the job to be known", WAIT_SECONDS)
    subprocess.run(["scancel", handle.rsplit("/", 1)[1]], check=True)  # a user, an admin, preemption
    # until accounting has it (squeue alone says just "CANCELLED")
    status = wait_until(
        lambda: (s := slurm_hook.status(handle)) is not None and s.is_terminal() and "by" in s.msg and s,
        "the job to end in accounting",
        WAIT_SECONDS,
    )
    assert status.state.name == "CANCELLED"
    assert status.msg.startswith("CANCELLED by "), status.msg  # TorchX 0.7 raised on this state
    slurm_hook.cancel(handle)  # a task killed now: nothing left to cancel, and no error

    classpath, kwargs = TorchXAppTrigger(
        app_handle=handle, torchx_conn_id="torchx_slurm", poll_interval=1
    ).serialize()
    module, _, name = classpath.rpartition(".")
    trigger = getattr(importlib.import_module(module), name)(**kwargs)  # as the triggerer re-creates it
    event = asyncio.run(first_event(trigger))
    assert event.payload["status"] == "terminal", event.payload
    assert event.payload["state"] == "CANCELLED"
    assert event.payload["msg"].startswith("CANCELLED by ")


def test_statuses_of_many_apps_take_one_sacct(slurm_hook, submitted, slurm_commands):
    handles = [submit(slurm_hook, submitted, sleep_app(name=f"batch-{i}"), hold=True) for i in range(3)]
    unknown = "slurm://torchx/987654321"
    before = len(slurm_commands.calls())

    answer = slurm_hook.statuses([*handles, unknown, "slurm://torchx/not-a-job-id"])

    calls = slurm_commands.calls()[before:]
    assert [c.split()[0] for c in calls if c.startswith("sacct")] == ["sacct"], calls
    assert len(calls) <= 2, calls  # plus one squeue for the ids accounting has not caught up with
    assert {h: answer[h].state.name for h in handles} == dict.fromkeys(handles, "PENDING")
    assert answer[unknown] is None and answer["slurm://torchx/not-a-job-id"] is None
    (sacct_call,) = [c for c in calls if c.startswith("sacct")]
    assert all(h.rsplit("/", 1)[1] in sacct_call for h in [*handles, unknown])


def test_a_job_whose_sacct_record_did_not_change_is_not_parsed_again(slurm_hook, submitted):
    """Waits on held jobs read the same records every poll: each such job keeps the status object of
    its last query (nothing parsed, nothing allocated); a job whose record changed is parsed anew."""
    from torchx_airflow.schedulers.slurm import sacct_records

    handles = [submit(slurm_hook, submitted, sleep_app(name=f"same-{i}"), hold=True) for i in range(2)]
    ids = [h.rsplit("/", 1)[1] for h in handles]
    wait_until(lambda: len(sacct_records(ids)) == 2, "accounting to have both jobs", WAIT_SECONDS)
    parsed = slurm_hook.support("slurm").parsed_statuses
    first = slurm_hook.statuses(handles)
    parsed_before = parsed.parsed

    again = slurm_hook.statuses(handles)

    assert all(again[h] is first[h] for h in handles)
    assert parsed.parsed == parsed_before
    subprocess.run(["scancel", ids[0]], check=True)
    changed = wait_until(
        lambda: (s := slurm_hook.statuses(handles)) and s[handles[0]].state.name == "CANCELLED" and s,
        "the cancelled job's record to change",
        WAIT_SECONDS,
    )
    assert changed[handles[1]] is first[handles[1]] and changed[handles[1]].state.name == "PENDING"


def _reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(READER_THREAD_PREFIX) and t.is_alive()]


class CountingStatus:
    """Wraps ``hook.status`` to count its callers' threads; can inject a fault after some polls."""

    def __init__(self, hook, fail_after: int | None = None) -> None:
        self.status = hook.status
        self.callers: list[str] = []
        self.fail_after = fail_after

    @property
    def polls(self) -> int:
        return len(self.callers)

    def __call__(self, app_handle: str):
        from torchx_airflow.exceptions import TorchXConfigError

        self.callers.append(threading.current_thread().name)
        if self.fail_after is not None and self.polls > self.fail_after:
            raise TorchXConfigError("fault injected into the wait's status poll")
        return self.status(app_handle)


def _operator(app):
    from torchx_airflow.operators.torchx import TorchXOperator

    return TorchXOperator(task_id="follow", app=app, torchx_conn_id="torchx_slurm", poll_interval=1)


def test_a_sync_wait_is_the_only_status_source_while_readers_follow_a_multi_replica_job(
    slurm_hook, submitted, slurm_commands
):
    # 2 roles x 2 replicas, held: 8 log readers wait for files that do not exist yet, the case in
    # which each reader used to ask Slurm for the app's status every second.
    app = multi_replica_app()
    operator = _operator(app)
    handle = submit(operator.hook, submitted, app, hold=True)
    counting = CountingStatus(operator.hook)
    operator.hook.status = counting  # type: ignore[method-assign]
    before = len(slurm_commands.calls())
    outcome: dict = {}
    waiter = threading.Thread(target=lambda: outcome.update(status=worker_wait(operator, handle, app)))
    waiter.start()
    wait_until(lambda: len(_reader_threads()) == 8, "8 reader threads", WAIT_SECONDS)
    wait_until(lambda: counting.polls >= 4, "4 status polls", WAIT_SECONDS)
    subprocess.run(["scancel", handle.rsplit("/", 1)[1]], check=True)
    waiter.join(120)

    assert outcome["status"].state.name == "CANCELLED"
    assert not [c for c in counting.callers if c.startswith(READER_THREAD_PREFIX)], counting.callers
    calls = slurm_commands.calls()[before:]
    # one sacct per poll of the wait (and a squeue while accounting has not caught up): none from readers
    assert sum(c.startswith("sacct") for c in calls) == counting.polls, (counting.polls, calls)
    assert len(calls) <= 2 * counting.polls, (counting.polls, calls)
    assert not any(c.startswith("scontrol") for c in calls), calls
    assert _reader_threads() == []


def test_reader_threads_stop_when_the_wait_raises(slurm_hook, submitted):
    app = multi_replica_app(roles=1)
    operator = _operator(app)
    handle = submit(operator.hook, submitted, app, hold=True)
    operator.hook.status = CountingStatus(operator.hook, fail_after=2)  # type: ignore[method-assign]
    from torchx_airflow.exceptions import TorchXConfigError

    with pytest.raises(TorchXConfigError, match="fault injected"):
        worker_wait(operator, handle, app)
    assert _reader_threads() == []


def test_a_job_submitted_with_a_token_is_found_by_it_queued_and_after_it_ended(slurm_hook, submitted):
    """What a retry does when its try died between ``sbatch`` and recording the handle."""
    from torchx_airflow.schedulers.slurm import sacct_marked, submission_mark

    since = time.time()

    def marked(token: str, comment: str | None = None, hold: bool = False) -> str:
        info = slurm_hook.dryrun(
            sleep_app(20), cfg={**slurm_hook.cfg, **({"comment": comment} if comment else {})}
        )
        if hold:  # queued, never runs
            info.info.request.cmd.append("--hold")
        handle = slurm_hook.schedule(info, token=token)
        submitted.append(handle)
        return handle

    token = uuid.uuid4().hex  # as the operator makes them: unique across runs of this test
    handle = marked(token, comment="team ml")
    near_miss = marked(f"{token}b", hold=True)  # a token that starts with the other one
    # queued: squeue has it; the cfg's own comment is kept
    assert slurm_hook.find_submission("slurm", token, since) == handle
    assert slurm_hook.find_submission("slurm", f"{token}b", since) == near_miss
    assert slurm_hook.find_submission("slurm", token[:-1], since) is None
    app_id = handle.rsplit("/", 1)[1]
    comment = subprocess.run(["squeue", "-h", "-j", app_id, "-o", "%k"], capture_output=True, text=True)
    assert comment.stdout.split() == ["team", "ml", submission_mark(token)]
    # ended: accounting has it too (AccountingStoreFlags=job_comment), for when squeue forgot it
    wait_until(lambda: slurm_hook.status(handle).state.name == "RUNNING", "the job to start", WAIT_SECONDS)
    subprocess.run(["scancel", app_id], check=True)
    wait_until(lambda: slurm_hook.status(handle).is_terminal(), "the cancel", WAIT_SECONDS)
    uid = str(os.getuid())
    found = wait_until(lambda: sacct_marked(submission_mark(token), uid, since), "accounting", WAIT_SECONDS)
    assert found == app_id
    assert sacct_marked(submission_mark(token[:-1]), uid, since) is None
    # cancelled while held: accounting never records its eligible time, which hides it from a
    # time window alone (sacct -S); the lookup asks for jobs in every state, so it is found
    near_miss_id = near_miss.rsplit("/", 1)[1]
    subprocess.run(["scancel", near_miss_id], check=True)
    wait_until(lambda: slurm_hook.status(near_miss).is_terminal(), "the held job's cancel", WAIT_SECONDS)
    found = wait_until(
        lambda: sacct_marked(submission_mark(f"{token}b"), uid, since), "accounting", WAIT_SECONDS
    )
    assert found == near_miss_id
