"""The cache policy through the real operator (scheduler: the named fake of tests/fakes.py;
tracker: a real fsspec store in a temporary directory): a hit submits nothing, a task with a job of
its own never takes another run's result, and the key of a deferred task is kept where its resumed
execution finds it."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import TaskDeferred
from torchx.specs import AppState
from torchx_airflow_tracker.fsspec_store import FsspecStore

from tests.fakes import HANDLE, TI, FakeSchedulerHook, TaskStateStore
from torchx_airflow.operators.torchx import TorchXOperator
from torchx_airflow.run.points import RunPolicy
from torchx_airflow.run.state import CACHE_KEY, HANDLE_KEY

SECOND = "slurm://torchx/4243"


class StoreTrackers:
    """The task's trackers: one real store, and the env the provider hands the job for it."""

    conn_ids = ["fs"]

    def __init__(self, store: FsspecStore, job_env: dict[str, str] | None = None) -> None:
        self.stores = [store]
        self.env = dict(job_env or {})

    def __bool__(self) -> bool:
        return True

    def job_env(self) -> dict[str, str]:
        return dict(self.env)

    def secret_env_names(self) -> tuple[str, ...]:
        return ()

    def check_within(self, *args: Any) -> None:
        pass

    def run_url(self, run_id: str) -> None:
        return None


class CacheTI(TI):
    """A task instance as the cache asks it: its identity, its XComs, no upstream states."""

    dag_id, run_id, task_id, map_index, try_number = "cached", "manual__1", "train", -1, 1

    def xcom_pull(self, task_ids: Any = None, key: str = "return_value", **kwargs: Any) -> Any:
        return self.pushed.get(key)

    def get_task_states(self, **kwargs: Any) -> dict[str, Any]:
        return {}


class CachingHook(FakeSchedulerHook):
    def support(self, scheduler: str) -> Any:
        return SimpleNamespace(image_digest=lambda image: None)


def _task(hook: FakeSchedulerHook, store: FsspecStore, **kwargs: Any) -> TorchXOperator:
    with DAG("cached", schedule=None, start_date=datetime.datetime(2026, 1, 1)):
        op = TorchXOperator(
            task_id="train",
            component="utils.echo",
            cache=True,
            poll_interval=0.01,
            stream_logs=False,
            **kwargs,
        )
    op.__dict__["hook"] = hook
    op.__dict__["trackers"] = StoreTrackers(store)
    return op


def _context(op: TorchXOperator, state: TaskStateStore) -> dict[str, Any]:
    return {
        "ti": CacheTI(),
        "task": op,
        "dag_run": SimpleNamespace(logical_date=None),
        "task_state_store": state,
    }


@pytest.fixture
def store(tmp_path) -> FsspecStore:
    return FsspecStore(str(tmp_path / "tracker"))


def _first_run(store: FsspecStore) -> dict[str, Any]:
    """A run that SUCCEEDED and recorded its key."""
    hook = CachingHook([AppState.SUCCEEDED])
    result = _task(hook, store).execute(_context(_task(hook, store), TaskStateStore()))
    assert result["cache_hit"] is False and len(hook.tokens) == 1
    return result


def test_a_second_run_with_the_same_inputs_submits_nothing(store):
    first = _first_run(store)
    hook = CachingHook([AppState.SUCCEEDED])
    op = _task(hook, store)
    result = op.execute(_context(op, TaskStateStore()))
    assert result["cache_hit"] is True and result["cached_from"] == HANDLE
    assert result["cache_key"] == first["cache_key"] and getattr(hook, "tokens", []) == []


def test_a_task_with_a_running_job_of_its_own_reattaches_instead_of_taking_a_cached_result(store):
    _first_run(store)
    hook = CachingHook([AppState.RUNNING, AppState.SUCCEEDED])
    hook.handles = (SECOND,)
    state = TaskStateStore()
    state.set(HANDLE_KEY, SECOND)  # an earlier try's job, still running
    op = _task(hook, store)
    result = op.execute(_context(op, state))
    assert result["app_handle"] == SECOND and result["cache_hit"] is False
    assert getattr(hook, "tokens", []) == []  # reattached: nothing submitted, nothing taken from the cache
    assert state.get(CACHE_KEY) == result["cache_key"]


def test_an_earlier_tries_job_found_succeeded_is_recorded_with_its_usage(store, tmp_path):
    """A retry finds its earlier try's job SUCCEEDED (that try kept the job's key, submitted, and
    died): the result is that job's, with its usage read now, and its cache record carries it (a
    later hit reports what it cost, and that the hit spent nothing)."""
    key = _first_run(FsspecStore(str(tmp_path / "elsewhere")))["cache_key"]  # the same task's key
    hook = CachingHook([AppState.SUCCEEDED])
    hook.usage_answer = {"source": "sacct", "elapsed_s": 42.0}
    state = TaskStateStore({HANDLE_KEY: SECOND, CACHE_KEY: key})
    op = _task(hook, store)
    result = op.execute(_context(op, state))
    assert result["app_handle"] == SECOND and result["usage"]["elapsed_s"] == 42.0
    assert getattr(hook, "tokens", []) == []
    hit_op = _task(CachingHook([AppState.SUCCEEDED]), store)
    hit = hit_op.execute(_context(hit_op, TaskStateStore()))
    assert hit["cache_hit"] is True and hit["cached_usage"]["usage"]["elapsed_s"] == 42.0


def test_a_task_whose_own_job_failed_submits_anew_instead_of_taking_a_cached_result(store):
    _first_run(store)
    hook = CachingHook([AppState.FAILED, AppState.SUCCEEDED])
    hook.handles = (SECOND,)
    state = TaskStateStore()
    state.set(HANDLE_KEY, "slurm://torchx/999")  # an earlier try's job, failed
    op = _task(hook, store)
    result = op.execute(_context(op, state))
    assert result["app_handle"] == SECOND and result["cache_hit"] is False and len(hook.tokens) == 1


def test_a_deferred_task_keeps_its_key_where_its_resumed_execution_records_it(store):
    hook = CachingHook([AppState.RUNNING])
    state = TaskStateStore()
    op = _task(hook, store, deferrable=True)
    context = _context(op, state)
    with pytest.raises(TaskDeferred):
        op.execute(context)
    key = state.get(CACHE_KEY)
    assert key, "the key must outlive the deferral"
    # the task resumes in another process: a fresh operator, the same task state store, new XComs
    resumed = _task(CachingHook([AppState.SUCCEEDED]), store, deferrable=True)
    event = {
        "status": "terminal",
        "app_handle": HANDLE,
        "state": "SUCCEEDED",
        "msg": "",
        "num_restarts": 0,
        "structured_error_msg": "",
        "ui_url": None,
        "roles": {"echo": ["SUCCEEDED"]},
        "log_cursor": {},
    }
    result = resumed.execute_complete(_context(resumed, state), event)
    assert result["cache_key"] == key
    names = [name.rsplit("/", 1)[-1] for name in store.fs.ls(store.root, detail=False)]
    assert f".c.{key}" in names, names


def test_the_env_the_provider_adds_to_the_job_is_not_part_of_the_key(store, monkeypatch):
    """Two runs whose jobs get different tracker and OpenLineage env (another store URL, another
    parent run) have one key: the env reaches the submitted app, never the key."""
    keys, envs = [], []
    for n in (1, 2):
        monkeypatch.setenv("OPENLINEAGE_PARENT_ID", f"ns/job/run-{n}")
        hook = CachingHook([AppState.SUCCEEDED])
        op = _task(hook, store, cache_salt=str(n))
        op.__dict__["trackers"] = StoreTrackers(
            store,
            {"TORCHX_TRACKERS": "airflow_fsspec", "TORCHX_TRACKER_AIRFLOW_FSSPEC_CONFIG": f"/stores/{n}"},
        )
        result = op.execute(_context(op, TaskStateStore()))
        keys.append(result["cache_key"])
        envs.append(dict(hook.apps[0].roles[0].env))
    assert (
        envs[0]["TORCHX_TRACKER_AIRFLOW_FSSPEC_CONFIG"]
        == "/stores/1"
        != envs[1]["TORCHX_TRACKER_AIRFLOW_FSSPEC_CONFIG"]
    )
    # the salts differ on purpose (else the second run would be a hit); the same salt gives the same key
    same = _task(CachingHook([AppState.SUCCEEDED]), store, cache_salt="1")
    same.__dict__["trackers"] = StoreTrackers(
        store, {"TORCHX_TRACKERS": "airflow_mlflow", "TORCHX_TRACKER_AIRFLOW_MLFLOW_CONFIG": "other"}
    )
    hit = same.execute(_context(same, TaskStateStore()))
    assert hit["cache_hit"] is True and hit["cache_key"] == keys[0]


class Team(RunPolicy):
    """A platform team's policy: every role gets ``TEAM`` (and an output argument the key ignores)."""

    name = "team"

    def __init__(self, team: str) -> None:
        self.team = team

    def prepare(self, run: Any, *, app: Any, **kwargs: Any) -> Any:
        for role in app.roles:
            role.env["TEAM"] = self.team
            role.args = [*role.args, f"--out=/runs/{run.ti.run_id}"]
        return app


def _team_run(store: FsspecStore, team: str, ti: Any = None) -> tuple[dict[str, Any], CachingHook]:
    hook = CachingHook([AppState.SUCCEEDED])
    op = _task(hook, store, policies=[Team(team)], cache_ignore_args=["--out=*"])
    context = _context(op, TaskStateStore())
    if ti is not None:
        context["ti"] = ti
    return op.execute(context), hook


def test_what_a_policy_prepares_is_in_the_key_and_what_the_key_ignores_stays_out(store):
    """The contract: the key is the prepared app's. team=ml runs; team=ml again (another DAG run, so
    another --out the key ignores) is a hit; team=research is a key of its own, runs, and its job gets
    TEAM=research: never the ml run's result."""
    ml, hook = _team_run(store, "ml")
    assert ml["cache_hit"] is False and hook.apps[0].roles[0].env["TEAM"] == "ml"
    again_ti = CacheTI()
    again_ti.run_id = "manual__2"
    again, hook = _team_run(store, "ml", again_ti)
    assert again["cache_hit"] is True and again["cache_key"] == ml["cache_key"]
    assert getattr(hook, "tokens", []) == []
    research, hook = _team_run(store, "research")
    assert research["cache_hit"] is False and research["cache_key"] != ml["cache_key"]
    assert len(hook.tokens) == 1 and hook.apps[0].roles[0].env["TEAM"] == "research"
