"""Jobs the infrastructure ended are resubmitted in the same try, on their own budget, resuming from
their checkpoint; jobs that failed for their own reasons are not (torchx_airflow.policies.resubmission).

Fakes pin what the operator does with each answer; tests/slurm/test_slurm_preemption.py takes real
nodes down and preempts real jobs.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from torchx.specs import AppState, AppStatus

from tests.fakes import HANDLE, TI, FakeSchedulerHook, TaskStateStore, _context, _operator, _terminal
from torchx_airflow.exceptions import (
    TorchXAppFailedError,
    TorchXConfigError,
    TorchXConnectionError,
    TorchXTaskKilledError,
)
from torchx_airflow.policies.resubmission import ATTEMPT_ENV, RESUME_FROM_ENV
from torchx_airflow.run.state import ATTEMPTS_KEY
from torchx_airflow.schedulers.slurm import infrastructure_states
from torchx_airflow.settings.connection import TorchXConnectionSettings

SECOND, THIRD = "slurm://torchx/4243", "slurm://torchx/4244"
NODE_FAIL = AppStatus(AppState.FAILED, msg="CANCELLED by 0, NODE_FAIL (exit code 0:0)")
PREEMPTED = AppStatus(AppState.FAILED, msg="PREEMPTED (exit code 0:15)")
EXIT_1 = AppStatus(AppState.FAILED, msg="FAILED (exit code 1:0)")
TIMEOUT = AppStatus(AppState.FAILED, msg="TIMEOUT (exit code 0:15)")
OOM = AppStatus(AppState.FAILED, msg="OUT_OF_MEMORY (exit code 0:125)")


class CheckpointStore:
    """A tracker store in which every run recorded a checkpoint artifact at ``/ckpt/<app id>``."""

    def __init__(self, has_checkpoint: bool = True) -> None:
        self.has_checkpoint = has_checkpoint
        self.edges: list[tuple[str, str, str | None]] = []
        self.written: dict[str, dict[str, Any]] = {}

    def artifacts(self, run_id: str) -> dict[str, Any]:
        if not self.has_checkpoint:
            return {}
        return {"checkpoint": SimpleNamespace(path=f"/ckpt/{run_id.rsplit('/', 1)[1]}")}

    def add_source(self, run_id: str, source_id: str, artifact_name: str | None = None) -> None:
        self.edges.append((run_id, source_id, artifact_name))

    def metadata(self, run_id: str) -> dict[str, Any]:
        return dict(self.written.get(run_id, {}))

    def sources(self, run_id: str) -> list[Any]:
        return []

    def add_metadata(self, run_id: str, **kv: Any) -> None:
        self.written.setdefault(run_id, {}).update(kv)


class FakeTrackers:
    """The task's trackers: one store, nothing to check or hand to the job."""

    conn_ids: list[str] = []

    def __init__(self, store: Any) -> None:
        self.stores = [store]

    def __bool__(self) -> bool:
        return True

    def job_env(self) -> dict[str, str]:
        return {}

    def secret_env_names(self) -> tuple[str, ...]:
        return ()

    def check_within(self, *args: Any) -> None:
        pass


def _resubmitting(
    hook: FakeSchedulerHook,
    store: TaskStateStore,
    tracker: Any = None,
    budget: int = 3,
    roots: tuple[str, ...] | None = ("/ckpt",),
    **kw,
):
    """The task on ``hook``, whose connection's ``output_roots`` are ``roots`` (where checkpoints lie)."""
    from dataclasses import replace

    hook.handles = (HANDLE, SECOND, THIRD)
    hook.settings = replace(hook.settings, output_roots=roots)
    op = _operator(hook, infrastructure_retries=budget, **kw)
    tracker = tracker if tracker is not None else CheckpointStore()
    op.__dict__["trackers"] = FakeTrackers(tracker)
    return op, tracker


def _env(hook: FakeSchedulerHook, k: int) -> dict[str, str]:
    return dict(hook.apps[k].roles[0].env)


@pytest.mark.parametrize("ended", [NODE_FAIL, PREEMPTED], ids=["node_fail", "preempted"])
def test_a_job_the_infrastructure_ended_runs_again_in_the_same_try_from_its_checkpoint(ended):
    hook = FakeSchedulerHook([AppState.RUNNING, ended, AppState.RUNNING, AppState.SUCCEEDED])
    store = TaskStateStore()
    op, tracker = _resubmitting(hook, store, retries=0)
    result = op.execute(_context(store))

    assert len(hook.tokens) == 2  # two submissions, both through the durable protocol (marked)
    assert result["state"] == "SUCCEEDED" and result["app_handle"] == SECOND
    assert store.values["torchx_app_handle"] == SECOND  # a retry would reattach to the new job
    first_env, second_env = _env(hook, 0), _env(hook, 1)
    assert ATTEMPT_ENV not in first_env and RESUME_FROM_ENV not in first_env
    assert second_env[ATTEMPT_ENV] == "2" and second_env[RESUME_FROM_ENV] == "/ckpt/4242"
    reason = infrastructure_states(ended.msg)[0]
    attempts = result["attempts"]
    assert [(a["attempt"], a["app_handle"], a["state"]) for a in attempts] == [
        (1, HANDLE, "FAILED"),
        (2, SECOND, "SUCCEEDED"),
    ]
    assert attempts[0]["reason"] == reason and attempts[0]["elapsed_s"] >= 0
    assert attempts[1]["resumed_from"] == "/ckpt/4242"
    assert tracker.edges == [(SECOND, HANDLE, "checkpoint")]  # lineage: attempt 2 <- attempt 1
    recorded = {
        run: {k: v for k, v in kv.items() if k.startswith("airflow_")} for run, kv in tracker.written.items()
    }
    assert recorded == {
        HANDLE: {"airflow_attempt": 1, "airflow_attempt_ended_by": reason},
        SECOND: {"airflow_attempt": 2},
    }
    # each job's usage: the ended one's with its attempt (and in its run), the last one's in the result
    assert attempts[0]["usage"]["source"] == "requested" and "torchx_usage" in tracker.written[HANDLE]
    assert result["usage"] == tracker.written[SECOND]["torchx_usage"]


@pytest.mark.parametrize("ended", [EXIT_1, TIMEOUT, OOM], ids=["exit_1", "timeout", "oom"])
def test_a_job_that_failed_for_its_own_reasons_is_not_resubmitted(ended):
    hook = FakeSchedulerHook([AppState.RUNNING, ended])
    store = TaskStateStore()
    op, _ = _resubmitting(hook, store)
    with pytest.raises(TorchXAppFailedError, match="FAILED"):
        op.execute(_context(store))
    assert len(hook.tokens) == 1
    assert [a["app_handle"] for a in store.values[ATTEMPTS_KEY]] == [HANDLE]


def test_the_budget_is_its_own_and_ends_with_the_last_jobs_state():
    hook = FakeSchedulerHook([NODE_FAIL])  # every job's node fails
    store = TaskStateStore()
    op, _ = _resubmitting(hook, store, budget=2, retries=5)
    with pytest.raises(TorchXAppFailedError, match="NODE_FAIL"):
        op.execute(_context(store))
    assert len(hook.tokens) == 3  # the first job and 2 resubmissions
    attempts = store.values[ATTEMPTS_KEY]
    assert [a["app_handle"] for a in attempts] == [HANDLE, SECOND, THIRD]
    assert [a.get("reason") for a in attempts] == ["NODE_FAIL"] * 3


def test_without_a_checkpoint_the_job_restarts_and_a_later_one_keeps_the_earlier_checkpoint():
    hook = FakeSchedulerHook([NODE_FAIL, NODE_FAIL, AppState.SUCCEEDED])
    store = TaskStateStore()
    op, tracker = _resubmitting(hook, store, tracker=CheckpointStore(has_checkpoint=False))
    op.execute(_context(store))
    assert RESUME_FROM_ENV not in _env(hook, 1) and _env(hook, 1)[ATTEMPT_ENV] == "2"
    assert tracker.edges == [(SECOND, HANDLE, None), (THIRD, SECOND, None)]

    hook = FakeSchedulerHook([NODE_FAIL, NODE_FAIL, AppState.SUCCEEDED])
    store = TaskStateStore()
    tracker = CheckpointStore()
    op, _ = _resubmitting(hook, store, tracker=tracker)
    tracker.artifacts = lambda run_id: (
        {"checkpoint": SimpleNamespace(path="/ckpt/4242")} if run_id == HANDLE else {}
    )
    op.execute(_context(store))
    assert _env(hook, 2)[RESUME_FROM_ENV] == "/ckpt/4242"  # the third resumes where the second did


def test_a_deferred_wait_resubmits_when_the_task_resumes_and_defers_again():
    hook = FakeSchedulerHook([AppState.RUNNING])
    store = TaskStateStore()
    store.set("torchx_app_handle", HANDLE)
    store.set(ATTEMPTS_KEY, [{"attempt": 1, "app_handle": HANDLE, "submitted_at": 1.0}])
    op, _ = _resubmitting(hook, store, deferrable=True)
    hook.handles = (SECOND,)  # this process submits only the second job
    event = {**_terminal("FAILED"), "msg": NODE_FAIL.msg}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute_complete(_context(store), event)
    assert deferred.value.trigger.serialize()[1]["app_handle"] == SECOND
    assert store.values["torchx_app_handle"] == SECOND
    assert [a["app_handle"] for a in store.values[ATTEMPTS_KEY]] == [HANDLE, SECOND]
    assert _env(hook, 0)[RESUME_FROM_ENV] == "/ckpt/4242"


def test_a_deferred_task_without_a_state_store_never_resubmits_on_a_budget_it_cannot_keep():
    """durable=False keeps no attempts across the deferral: each resume would start a fresh budget, so
    the task asks the scheduler to requeue nothing for it and fails with the infrastructure's end."""
    hook = FakeSchedulerHook([AppState.RUNNING])
    op = _operator(hook, deferrable=True, durable=False, infrastructure_retries=2)
    with pytest.raises(TaskDeferred):
        op.execute({"ti": TI()})
    assert hook.dryrun_kwargs[-1]["resubmits"] is False  # Slurm may requeue it itself
    resumed = _operator(
        FakeSchedulerHook([NODE_FAIL]), deferrable=True, durable=False, infrastructure_retries=2
    )
    event = {**_terminal("FAILED"), "msg": NODE_FAIL.msg}
    with pytest.raises(TorchXAppFailedError, match="NODE_FAIL"):
        resumed.execute_complete({"ti": TI()}, event)
    assert getattr(resumed.hook, "tokens", []) == []  # nothing submitted in its place


def test_a_new_try_continues_the_attempts_of_a_job_the_infrastructure_ended():
    """The worker died with the node: the next try finds the job NODE_FAIL and resumes it."""
    hook = FakeSchedulerHook([NODE_FAIL, AppState.SUCCEEDED])
    store = TaskStateStore()
    store.set("torchx_app_handle", HANDLE)
    store.set(ATTEMPTS_KEY, [{"attempt": 1, "app_handle": HANDLE, "submitted_at": 1.0}])
    op, _ = _resubmitting(hook, store)
    hook.handles = (SECOND,)
    result = op.execute(_context(store))
    assert result["app_handle"] == SECOND
    assert _env(hook, 0)[ATTEMPT_ENV] == "2" and _env(hook, 0)[RESUME_FROM_ENV] == "/ckpt/4242"


def test_a_succeeded_job_or_a_zero_budget_is_never_resubmitted():
    hook = FakeSchedulerHook([NODE_FAIL])
    store = TaskStateStore()
    op, _ = _resubmitting(hook, store, budget=0)
    with pytest.raises(TorchXAppFailedError):
        op.execute(_context(store))
    assert len(hook.tokens) == 1


@pytest.mark.parametrize("value", [-1, 1.5, "three", True, [3]])
def test_a_bad_budget_is_refused_naming_the_value(value):
    with pytest.raises(
        TorchXConfigError,
        match=re.escape(
            f"infrastructure_retries must be a whole number of resubmissions (0 or more), got {value!r}"
        ),
    ):
        _operator(FakeSchedulerHook([None]), infrastructure_retries=value)
    with pytest.raises(TorchXConnectionError, match="Connection 'c'.*infrastructure_retries"):
        TorchXConnectionSettings.from_extra("c", {"infrastructure_retries": value})


def test_the_budget_comes_from_the_task_else_the_connection_else_the_site(monkeypatch):
    from torchx_airflow.settings.resolve import resolve

    def resolve_infrastructure_retries(task: int | None, connection: int | None) -> int:
        return int(resolve("infrastructure_retries", task, connection))

    assert resolve_infrastructure_retries(1, 5) == 1
    assert resolve_infrastructure_retries(None, 5) == 5
    assert resolve_infrastructure_retries(None, None) == 3
    monkeypatch.setenv("AIRFLOW__TORCHX__INFRASTRUCTURE_RETRIES", "7")
    assert resolve_infrastructure_retries(None, None) == 7
    assert (
        TorchXConnectionSettings.from_extra("c", {"infrastructure_retries": "2"}).infrastructure_retries == 2
    )


@pytest.mark.parametrize(
    ("msg", "states"),
    [
        ("NODE_FAIL", ["NODE_FAIL"]),
        ("CANCELLED by 0, NODE_FAIL (exit code 0:0)", ["NODE_FAIL"]),
        ("FAILED, PREEMPTED (exit code 1:0)", ["PREEMPTED"]),
        ("BOOT_FAIL", ["BOOT_FAIL"]),
        ("FAILED (exit code 1:0)", []),
        ("TIMEOUT", []),
        ("CANCELLED by 0", []),
        ("OUT_OF_MEMORY", []),
    ],
)
def test_slurm_states_that_are_the_infrastructures(msg, states):
    assert infrastructure_states(msg) == states


def test_the_lineage_view_draws_each_attempt_and_the_checkpoint_edge_between_them(tmp_path):
    """Through a real fsspec store: what the operator records is what the view reads."""
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.lineage.edges import record_attempt
    from torchx_airflow.plugins.graph import AirflowTask, Seed, build_graph
    from torchx_airflow.plugins.render import render_svg

    store = FsspecStore(str(tmp_path))
    identity = {
        "airflow_dag_id": "d",
        "airflow_run_id": "r",
        "airflow_task_id": "train",
        "airflow_map_index": -1,
    }
    for handle in (HANDLE, SECOND):
        store.add_metadata(handle, **identity)
    store.add_artifact(HANDLE, "checkpoint", "/ckpt/4242", {"epoch": 3})
    record_attempt(store, SECOND, 2, HANDLE, "NODE_FAIL", "checkpoint")

    graph = build_graph([(store, [Seed(SECOND, AirflowTask("d", "r", "train"), "SUCCEEDED")])], depth=2)
    runs = {run["id"]: run for run in graph.to_dict()["runs"]}
    assert runs[HANDLE]["label"] == "train · attempt 1" and runs[HANDLE]["state"] == "NODE_FAIL"
    assert runs[SECOND]["label"] == "train · attempt 2" and runs[SECOND]["state"] == "SUCCEEDED"
    assert graph.to_dict()["edges"] == [
        {"source": HANDLE, "target": SECOND, "artifact_names": ["checkpoint"]}
    ]
    svg = render_svg(graph)
    assert "train · attempt 1" in svg and "NODE_FAIL" in svg
    # as the endpoints serve it: every text passed through the secrets masker, attempts kept
    from torchx_airflow.plugins.app import LineageView, masked_view

    served = {run["id"]: run for run in masked_view(LineageView(graph)).graph.to_dict()["runs"]}
    assert served[HANDLE]["label"] == "train · attempt 1" and served[HANDLE]["state"] == "NODE_FAIL"
    assert served[HANDLE]["airflow"]["attempt"] == 1 and served[HANDLE]["airflow"]["ended_by"] == "NODE_FAIL"


def test_a_kill_while_resubmitting_submits_nothing_more_and_cancels_what_slipped_through():
    """on_kill cancels the job it knows (the ended one); the resubmission must not leave a new one."""
    hook = FakeSchedulerHook([NODE_FAIL])
    store = TaskStateStore()
    op, _ = _resubmitting(hook, store)
    schedule = hook.schedule

    def schedule_then_killed(info: Any, token: str | None = None) -> str:
        handle = schedule(info, token)
        if len(hook.tokens) == 2:  # the kill arrives while sbatch of the resubmission runs
            op.execution.kills.killed = True
        return handle

    hook.schedule = schedule_then_killed  # type: ignore[method-assign]
    with pytest.raises(TorchXTaskKilledError, match="the task was killed"):
        op.execute(_context(store))
    assert hook.cancelled == [SECOND] and len(hook.tokens) == 2

    hook = FakeSchedulerHook([NODE_FAIL])
    op, _ = _resubmitting(hook, TaskStateStore())
    status = hook.status

    def status_then_killed(handle: str) -> AppStatus | None:
        op.execution.kills.killed = True  # killed as the first job ended, before the resubmission's sbatch
        return status(handle)

    hook.status = status_then_killed  # type: ignore[method-assign]
    with pytest.raises(TorchXTaskKilledError, match="the task was killed"):
        op.execute(_context(TaskStateStore()))
    assert len(hook.tokens) == 1 and hook.cancelled == []


def test_no_resubmission_past_the_execution_timeout():
    import datetime

    hook = FakeSchedulerHook([NODE_FAIL])
    store = TaskStateStore()
    op, _ = _resubmitting(
        hook, store, execution_timeout=datetime.timedelta(seconds=1)
    )  # TI started in 2026-01
    with pytest.raises(TorchXAppFailedError, match="NODE_FAIL"):
        op.execute(_context(store))
    assert len(hook.tokens) == 1


def test_a_fresh_submission_starts_a_new_chain_before_it_submits():
    """An earlier try's chain (its budget used up) must not count against a fresh job, even if this
    try dies between the submission and its record."""
    hook = FakeSchedulerHook([NODE_FAIL, AppState.SUCCEEDED])
    store = TaskStateStore()
    store.set(ATTEMPTS_KEY, [{"attempt": n, "app_handle": f"slurm://torchx/{n}"} for n in (1, 2, 3, 4)])
    op, _ = _resubmitting(hook, store, budget=1)
    result = op.execute(_context(store))
    assert result["app_handle"] == SECOND and [a["attempt"] for a in result["attempts"]] == [1, 2]
    assert store.writes.index(("set", ATTEMPTS_KEY)) < store.writes.index(("set", "torchx_app_handle"))


def test_slurm_keeps_torchx_requeue_for_an_app_with_max_retries_and_a_task_that_does_not_wait():
    from torchx_airflow.apps import build_app_from_component
    from torchx_airflow.hooks.torchx import TorchXHook

    hook = TorchXHook(scheduler="slurm")
    app = build_app_from_component("utils.sh", ["true"])
    app.roles[0].max_retries = 2  # TorchX's batch script requeues the job itself on a failed exit
    assert "--requeue" in hook.dryrun(app, resubmits=True).info.request.materialize()
    hook.close()

    fake = FakeSchedulerHook([AppState.RUNNING])
    op, _ = _resubmitting(fake, TaskStateStore(), wait_for_completion=False)
    resubmits = []
    fake.dryrun = lambda app, *a, **kw: (
        resubmits.append(kw["resubmits"]) or FakeSchedulerHook.dryrun(fake, app)
    )
    op.execute(_context(TaskStateStore()))
    assert resubmits == [False]  # nothing would resubmit it: Slurm keeps its own requeue


class ForeignCheckpointStore(CheckpointStore):
    """A store in which another job rewrote the ended run's checkpoint artifact to point elsewhere."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def artifacts(self, run_id: str) -> dict[str, Any]:
        return {"checkpoint": SimpleNamespace(path=self.path)}


@pytest.mark.parametrize(
    "foreign",
    [
        "https://attacker.example/evil.pt",
        "/data/other-team/evil.pt",
        "/ckpt/../etc/evil.pt",
        "/ckptx/evil.pt",
    ],
)
def test_a_checkpoint_outside_the_output_roots_is_not_resumed_from(foreign, capsys):
    hook = FakeSchedulerHook([AppState.RUNNING, NODE_FAIL, AppState.RUNNING, AppState.SUCCEEDED])
    op, _ = _resubmitting(hook, TaskStateStore(), ForeignCheckpointStore(foreign), retries=0)
    result = op.execute(_context(TaskStateStore()))
    log = capsys.readouterr().out  # the task's log (Airflow's structlog writes it to stdout here)
    assert (
        f"is {foreign!r}, which is not under the task's output roots (/ckpt)" in log and "output_roots" in log
    )
    # the resubmission says why it starts fresh (not "it recorded no checkpoint")
    assert "from the start: its 'checkpoint' artifact is outside the task's output roots" in log
    assert result["state"] == "SUCCEEDED" and len(hook.tokens) == 2  # resubmitted all the same...
    assert RESUME_FROM_ENV not in _env(hook, 1) and _env(hook, 1)[ATTEMPT_ENV] == "2"  # ...fresh
    assert result["attempts"][1]["resumed_from"] is None


@pytest.mark.parametrize(
    ("out", "resumes"), [("/ckpt", True), ("/ckpt/out.txt", False), ("/data/out.txt", False)]
)
def test_without_output_roots_the_outputs_the_tasks_arguments_name_are_the_roots(out, resumes):
    """Unset everywhere, the roots are the outputs the task's own arguments name, each as itself: a
    path not made yet (``/ckpt``) is the job's output directory; never its parent (``/ckpt/out.txt``
    does not make ``/ckpt`` a root)."""
    hook = FakeSchedulerHook([AppState.RUNNING, NODE_FAIL, AppState.RUNNING, AppState.SUCCEEDED])
    op, _ = _resubmitting(hook, TaskStateStore(), roots=None, component_args=["--msg", out])
    op.execute(_context(TaskStateStore()))
    assert _env(hook, 1).get(RESUME_FROM_ENV) == ("/ckpt/4242" if resumes else None)


def test_the_deprecated_checkpoint_root_still_adds_a_root_and_says_so(capsys):
    hook = FakeSchedulerHook([AppState.RUNNING, NODE_FAIL, AppState.RUNNING, AppState.SUCCEEDED])
    op, _ = _resubmitting(hook, TaskStateStore(), roots=None, checkpoint_root="/ckpt")
    op.execute(_context(TaskStateStore()))
    assert _env(hook, 1)[RESUME_FROM_ENV] == "/ckpt/4242"
    assert "checkpoint_root='/ckpt' is deprecated: set output_roots" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["ckpt", "/", "/ckpt/../etc", 5])
def test_a_bad_checkpoint_root_is_refused_naming_the_value(value):
    with pytest.raises(
        TorchXConfigError, match=rf"checkpoint_root must be an absolute directory.*got {value!r}"
    ):
        _operator(FakeSchedulerHook([]), checkpoint_root=value)
    with pytest.raises(TorchXConnectionError, match="checkpoint_root"):
        TorchXConnectionSettings.from_extra("c", {"checkpoint_root": value})


class CountingHook(FakeSchedulerHook):
    """The fake scheduler, counting the usage reads (``sacct`` on Slurm) per handle."""

    def usage(self, handle: str) -> dict[str, Any] | None:
        self.usage_reads = [*getattr(self, "usage_reads", []), handle]
        return super().usage(handle)


class CountingStore(CheckpointStore):
    """A tracker store counting the usage metadata written per run."""

    def add_metadata(self, run_id: str, **kv: Any) -> None:
        if "torchx_usage" in kv:
            self.usage_writes = [*getattr(self, "usage_writes", []), run_id]
        super().add_metadata(run_id, **kv)


def test_a_retry_that_finds_its_earlier_jobs_failed_reads_no_usage_of_it_and_writes_none():
    """The earlier try saw its job fail (and recorded its usage then): the retry submits a fresh job
    without asking the scheduler for the old one's usage again nor rewriting its tracker metadata."""
    hook = CountingHook([EXIT_1, AppState.SUCCEEDED])
    store = TaskStateStore()
    store.set("torchx_app_handle", HANDLE)
    op, tracker = _resubmitting(hook, store, tracker=CountingStore())
    hook.handles = (SECOND,)
    result = op.execute(_context(store))
    assert result["app_handle"] == SECOND
    assert hook.usage_reads == [SECOND]
    assert tracker.usage_writes == [SECOND]


def test_a_retry_that_resubmits_its_earlier_try_s_job_reads_its_usage_once_and_counts_its_cost():
    """The earlier try died with its node: the retry resubmits the job, and that job's usage is read
    once (one sacct), written once, kept on its attempt, and counted toward max_cost."""
    from torchx_airflow.exceptions import TorchXCostLimitError
    from torchx_airflow.settings.prices import PriceTable

    hook = CountingHook([NODE_FAIL, AppState.SUCCEEDED])
    hook.settings = TorchXConnectionSettings(scheduler="slurm", prices=PriceTable(cpu_hour=1.0))
    hook.usage_answer = {"elapsed_s": 3600.0, "cpu_time_s": 3600.0, "cpus": 1, "max_rss_mb": 1.0}
    store = TaskStateStore()
    store.set("torchx_app_handle", HANDLE)
    store.set(ATTEMPTS_KEY, [{"attempt": 1, "app_handle": HANDLE, "submitted_at": 1.0}])
    op, tracker = _resubmitting(hook, store, tracker=CountingStore())
    hook.handles = (SECOND,)
    result = op.execute(_context(store))
    assert result["app_handle"] == SECOND
    assert hook.usage_reads == [HANDLE, SECOND]
    assert tracker.usage_writes == [HANDLE, SECOND]
    assert store.values[ATTEMPTS_KEY][0]["usage"]["elapsed_s"] == 3600.0

    hook = CountingHook([NODE_FAIL])
    hook.settings = TorchXConnectionSettings(scheduler="slurm", prices=PriceTable(cpu_hour=1.0))
    hook.usage_answer = {"elapsed_s": 3600.0, "cpu_time_s": 3600.0, "cpus": 1, "max_rss_mb": 1.0}
    store = TaskStateStore()
    store.set("torchx_app_handle", HANDLE)
    store.set(ATTEMPTS_KEY, [{"attempt": 1, "app_handle": HANDLE, "submitted_at": 1.0}])
    op, _ = _resubmitting(hook, store, max_cost=1.5, expected_duration=3600)
    with pytest.raises(TorchXCostLimitError, match=r"1\.0000 USD already spent"):
        op.execute(_context(store))
    assert hook.usage_reads == [HANDLE]


def test_a_new_chain_starts_before_the_job_is_submitted():
    """The earlier job's chain is cleared before the new job's submission mark: a worker that dies
    between sbatch and the handle's write leaves a job the next try recovers as attempt 1, never as
    the next attempt of a chain that is not its own (the budget, the try's cost, the result)."""
    hook = FakeSchedulerHook([AppState.SUCCEEDED])
    old_chain = [{"attempt": 1, "app_handle": "slurm://torchx/1", "state": "FAILED", "usage": {}}]
    store = TaskStateStore({ATTEMPTS_KEY: old_chain})
    op, _ = _resubmitting(hook, store)
    result = op.execute(_context(store))
    writes = store.writes
    assert writes.index(("set", ATTEMPTS_KEY)) < writes.index(("set", "torchx_submission"))
    assert [a["app_handle"] for a in result["attempts"]] == [HANDLE]


def test_a_task_that_does_not_wait_reads_the_usage_of_its_job_already_over_and_resubmits_nothing():
    hook = FakeSchedulerHook([NODE_FAIL])
    hook.usage_answer = {"source": "sacct", "elapsed_s": 3.0}
    op, _ = _resubmitting(hook, TaskStateStore(), wait_for_completion=False)
    with pytest.raises(TorchXAppFailedError) as failed:
        op.execute(_context(TaskStateStore()))
    assert failed.value.usage is not None and failed.value.usage["elapsed_s"] == 3.0
    assert len(hook.tokens) == 1  # no replacement: nobody would wait for it
