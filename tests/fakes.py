"""The tests' fakes, in one module (named as fakes: the same paths run on the real engines in the
integration, Slurm, Kubernetes and e2e tiers; here the tests pin what the provider does with what
it is handed): what Airflow hands a running task (the task instance, the task state store, the task
log), and a scheduler for the contract tests of the operator, the sensor, the trigger and the
durable submission, with the helpers that run an operator on it."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Mapping
from typing import Any

from torchx.specs import AppState, AppStatus

from torchx_airflow.hooks.torchx import TorchXDryRun
from torchx_airflow.operators.torchx import TorchXOperator
from torchx_airflow.settings.connection import TorchXConnectionSettings


class TaskStateStore:
    """Airflow's ``task_state_store`` in memory (the provider uses get, set and delete); ``writes``
    records every set and delete in order."""

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self.values: dict[str, Any] = dict(values or {})
        self.writes: list[tuple[str, str]] = []  # ("set" | "delete", key), in order

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def set(self, key: str, value: Any) -> None:
        self.writes.append(("set", key))
        self.values[key] = value

    def delete(self, key: str) -> None:
        self.writes.append(("delete", key))
        self.values.pop(key, None)


class TI:
    """Airflow's task instance as an operator sees it: records XCom pushes (``pushed``)."""

    stats_tags: dict[str, str] = {}
    start_date = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


class ListLog:
    """A task log that collects each line (``message % args``) in ``lines``."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: object) -> None:
        self.lines.append(message % args if args else message)

    warning = debug = error = info


HANDLE = "slurm://torchx/4242"
TRIGGER_PATH = "torchx_airflow.triggers.torchx.TorchXAppTrigger"


class FakeSchedulerHook:
    """Fake scheduler: answers ``status`` from a script (an exception in it is raised once; the last
    answer again when it runs out); a cancelled app is CANCELLED from then on. Records the threads
    ``status`` ran on, whether it was asked (``asked``), cancels, and ``close``."""

    scheduler = "slurm"
    torchx_conn_id = "torchx_default"
    cfg: dict[str, Any] = {}
    settings = TorchXConnectionSettings(scheduler="slurm")

    def __init__(self, answers: list[Any]) -> None:
        self.answers = list(answers)
        self.calls = 0
        self.cancelled: list[str] = []
        self.threads: set[str] = set()
        self.asked = threading.Event()
        self.closed = False

    def status(self, handle: str) -> AppStatus | None:
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        self.asked.set()
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if answer is None or isinstance(answer, AppStatus):
            return answer
        return AppStatus(state=answer, msg=answer.name)

    def statuses(self, handles: list[str]) -> dict[str, AppStatus | None]:
        return {handle: self.status(handle) for handle in handles}

    def cancel(self, handle: str) -> None:
        self.cancelled.append(handle)
        self.answers = [AppState.CANCELLED]

    def infrastructure_reason(self, handle: str, state: str, msg: str) -> str | None:
        from torchx_airflow.schedulers.slurm import SlurmSupport

        return SlurmSupport.infrastructure_reason(None, state, msg)  # type: ignore[arg-type]

    #: what find_submission answers (a handle, None, or an exception raised every time); the tokens
    #: schedule was given; set False for a scheduler that cannot find a job by its mark
    finds = True
    found: Any = None

    def apps_outlive_launcher(self, scheduler: str | None = None) -> bool:
        return True

    def finds_submissions(self, scheduler: str) -> bool:
        return self.finds

    def find_submission(self, scheduler: str, token: str, since: float) -> str | None:
        self.searched = (scheduler, token)
        if isinstance(self.found, Exception):
            raise self.found
        return self.found

    #: the handles schedule returns, one per call (the last one again when they run out)
    handles: tuple[str, ...] = (HANDLE,)

    def schedule(self, info: Any, token: str | None = None) -> str:
        self.tokens = [*getattr(self, "tokens", []), token]
        return self.handles[min(len(self.tokens), len(self.handles)) - 1]

    def resolve_cfg(self, scheduler: str, cfg: dict) -> dict:
        return {}

    def dryrun(self, app: Any, scheduler: Any = None, cfg: Any = None, **kwargs: Any) -> TorchXDryRun:
        self.apps = [*getattr(self, "apps", []), app]
        self.dryrun_kwargs = [*getattr(self, "dryrun_kwargs", []), kwargs]
        return TorchXDryRun("sbatch --parsable torchx-sbatch.sh", self.scheduler)  # type: ignore[arg-type]

    def log_streams(self, handle: str) -> tuple:
        return ()

    #: whether the scheduler keeps an accounting of usage (Slurm does), and what ``usage`` answers
    accounts = True
    usage_answer: dict[str, Any] | None = None

    def accounts_usage(self, scheduler: str) -> bool:
        return self.accounts

    def usage(self, handle: str) -> dict[str, Any] | None:
        return self.usage_answer

    def close(self) -> None:
        self.closed = True


def _context(store: TaskStateStore | None = None) -> dict[str, Any]:
    return {"ti": TI(), "task_state_store": store if store is not None else TaskStateStore()}


def _operator(hook: FakeSchedulerHook, **kwargs: Any) -> TorchXOperator:
    kwargs.setdefault("tracker_conn_ids", [])
    op = TorchXOperator(
        task_id="train", component="utils.echo", poll_interval=0.01, stream_logs=False, **kwargs
    )
    op.__dict__["hook"] = hook
    return op


def _terminal(state: str) -> dict[str, Any]:
    return {
        "status": "terminal",
        "app_handle": HANDLE,
        "state": state,
        "msg": state,
        "structured_error_msg": "",
        "num_restarts": 0,
        "ui_url": None,
        "roles": {"echo": [state]},
        "log_cursor": {},
    }


def handle_keys(store: TaskStateStore) -> dict[str, Any]:
    """What the store keeps of the durable protocol: everything but the attempts' record."""
    return {key: value for key, value in store.values.items() if key != "torchx_attempts"}
