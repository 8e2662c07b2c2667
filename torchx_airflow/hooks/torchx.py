"""TorchXHook: a TorchX ``Runner`` configured by an Airflow connection of type ``torchx``.

Connection extra (all optional)::

    {"scheduler": "slurm", "cfg": {"partition": "gpu", "time": "01:00:00"}, "trackers": ["mlflow_default"],
     "env_passthrough": ["CUDA_HOME", "NCCL_*"]}

``scheduler`` defaults to ``local_cwd``; ``cfg`` holds the scheduler's run options and is checked
against that scheduler's ``runopts`` before anything is submitted; ``trackers`` lists tracker
connection ids; ``env_passthrough`` names worker variables that jobs of schedulers which inherit the
launcher's environment (local_cwd, slurm) get besides ``torchx_airflow.schedulers.env.BASE_ENV``.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
import re
import signal
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from torchx_airflow_tracker.compat import cached_property

from torchx_airflow.apps import AppHandle
from torchx_airflow.exceptions import TorchXConfigError, TorchXConnectionError
from torchx_airflow.hooks import TORCHX_DEFAULT_CONN_ID
from torchx_airflow.settings.connection import CONN_EXAMPLE, TorchXConnectionSettings
from torchx_airflow.settings.resolve import outage_budget

if TYPE_CHECKING:
    import threading

    from torchx.runner import Runner
    from torchx.specs import AppDef, AppDryRunInfo, AppStatus

    from torchx_airflow.schedulers import SchedulerCredentials, SchedulerSupport


@dataclass
class TorchXDryRun:
    """What ``TorchXHook.dryrun`` prepared, and all ``TorchXHook.schedule`` needs to submit it.

    ``info`` is TorchX's ``AppDryRunInfo`` (its ``request`` is what the scheduler gets); ``secrets``
    are the env values the dry run took out of that request, for ``schedule`` to hand to the job
    another way. Its ``str`` is the request, as ``torchx run --dryrun`` prints it.
    """

    info: AppDryRunInfo
    scheduler: str
    secrets: dict[str, str] = field(default_factory=dict, repr=False)

    def __str__(self) -> str:
        return str(self.info)


@contextlib.contextmanager
def _keep_signal_handlers() -> Iterator[None]:
    """Restore SIGTERM/SIGINT handlers after TorchX code runs.

    TorchX's local scheduler installs its own SIGTERM handler when it is created. In a task process
    that handler would replace Airflow's, which is the one that calls ``on_kill`` to cancel the app.
    """
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # not the main thread: handlers were not touched
            for sig, handler in saved.items():
                if handler is not None and signal.getsignal(sig) is not handler:
                    signal.signal(sig, handler)


_WORKER_TRACKER_ENV = re.compile(r"^TORCHX_(TRACKERS|PARENT_RUN_ID|TRACKER_\w+_CONFIG(FILE)?)$")


@contextlib.contextmanager
def _tracker_environ(trackers: str | None = None) -> Iterator[None]:
    """Hide the worker's own tracker variables from TorchX while an app is dry-run and submitted.

    TorchX's ``Runner.dryrun`` copies ``TORCHX_TRACKERS``, ``TORCHX_TRACKER_*_CONFIG`` and
    ``TORCHX_PARENT_RUN_ID`` from the launching process into every role, and local and Slurm jobs
    inherit the submitting process's environment. A job's trackers are the ones its task configured
    (``trackers``, the role env's ``TORCHX_TRACKERS``), never the worker's.
    """
    saved = {name: value for name, value in os.environ.items() if _WORKER_TRACKER_ENV.match(name)}
    for name in saved:
        del os.environ[name]
    if trackers:
        os.environ["TORCHX_TRACKERS"] = trackers  # so dryrun re-applies the app's own trackers
    try:
        yield
    finally:
        os.environ.pop("TORCHX_TRACKERS", None)
        os.environ.update(saved)


@functools.cache
def _scheduler_factories() -> Mapping[str, Any]:
    """TorchX's scheduler factories, read once per process: reading them scans the entry points of
    every installed distribution (about 10 ms here), and a dry run and a submission each needed them
    twice (the runner, the scheduler check). Entry points do not change while a task runs."""
    from torchx.schedulers import get_scheduler_factories

    return MappingProxyType(get_scheduler_factories())


def _app_trackers(app: AppDef) -> str | None:
    names = {role.env.get("TORCHX_TRACKERS") for role in app.roles}
    return names.pop() if len(names) == 1 else None


class TorchXHook(BaseHook):
    """Dry-run, schedule, watch and cancel TorchX apps on the scheduler a ``torchx`` connection names.

    :param torchx_conn_id: id of a connection of type ``torchx``.
    :param scheduler: overrides the connection's scheduler.
    :param cfg: run options merged over the connection's ``cfg``.

    Example::

        hook = TorchXHook("torchx_default")
        app = build_app_from_component("utils.echo", ["--msg", "hello"])
        dryrun = hook.dryrun(app)
        handle = hook.schedule(dryrun)
        status = hook.wait(handle)
    """

    conn_name_attr = "torchx_conn_id"
    default_conn_name = TORCHX_DEFAULT_CONN_ID
    conn_type = "torchx"
    hook_name = "TorchX"

    def __init__(
        self,
        torchx_conn_id: str = default_conn_name,
        *,
        scheduler: str | None = None,
        cfg: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.torchx_conn_id = torchx_conn_id
        self.scheduler_override = scheduler
        self.cfg_override = dict(cfg or {})

    @cached_property
    def settings(self) -> TorchXConnectionSettings:
        """The connection's settings, parsed and checked (no scheduler is loaded)."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = self.get_connection(self.torchx_conn_id)
        except AirflowNotFoundException as e:
            raise TorchXConnectionError(
                f"Connection {self.torchx_conn_id!r} is not defined. Create a connection of type 'torchx' "
                f"with that id in the UI or as an environment variable, e.g. "
                + CONN_EXAMPLE.format(id=self.torchx_conn_id.upper())
            ) from e
        if conn.conn_type and conn.conn_type != self.conn_type:
            self.log.warning(
                "Connection %s has type %s, not %s; reading its extra as a torchx connection",
                self.torchx_conn_id,
                conn.conn_type,
                self.conn_type,
            )
        return TorchXConnectionSettings.from_extra(self.torchx_conn_id, conn.extra_dejson)

    @property
    def scheduler(self) -> str:
        """The scheduler apps are submitted to: the override, else the connection's."""
        return (self.scheduler_override or self.settings.scheduler).strip()

    @property
    def cfg(self) -> dict[str, Any]:
        """The run options: the connection's ``cfg`` with the override merged over it."""
        return {**self.settings.cfg, **self.cfg_override}

    @cached_property
    def runner(self) -> Runner:
        """The TorchX ``Runner``, created on first use; ``close()`` releases it.

        What ``torchx.runner.get_runner()`` makes, with the scheduler factories read once per process.
        """
        from torchx.runner import Runner

        with _keep_signal_handlers():
            return Runner("torchx", dict(_scheduler_factories()))

    @property
    def scheduler_names(self) -> list[str]:
        """The schedulers TorchX knows here (builtins and ``torchx.schedulers`` entry points)."""
        return list(_scheduler_factories())

    def check_scheduler(self, scheduler: str) -> str:
        """Return ``scheduler`` if TorchX knows it, else raise ``TorchXConfigError`` listing them."""
        known = self.scheduler_names
        if scheduler not in known:
            close = difflib.get_close_matches(scheduler, known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise TorchXConfigError(
                f"Unknown TorchX scheduler {scheduler!r} in {self._where('scheduler', scheduler)}.{hint} "
                f"Set it to one of: {', '.join(known)}."
            )
        return scheduler

    def _where(self, field_name: str, value: Any = None) -> str:
        """Where a scheduler or cfg value came from, for error messages: the task or the connection."""
        if field_name == "scheduler":
            if self.scheduler_override and self.scheduler_override.strip() == value:
                return "the task's 'scheduler'"
            settings = self.__dict__.get("settings")  # never fetch the connection just for a message
            if settings is not None and settings.scheduler != value:
                return "the app handle's scheduler"
            return f"extra 'scheduler' of connection {self.torchx_conn_id!r}"
        if field_name in self.cfg_override and (value is None or self.cfg_override[field_name] == value):
            return "the task's 'cfg'"
        return f"extra 'cfg' of connection {self.torchx_conn_id!r}"

    def run_opts(self, scheduler: str) -> Any:
        """The scheduler's ``runopts``, read once per hook: the operator's dry run and the hook's own
        both check a cfg, and each read builds the scheduler."""
        cache = self.__dict__.setdefault("_run_opts", {})
        if scheduler not in cache:
            cache[scheduler] = self._call(
                lambda: self.runner.scheduler_run_opts(self.check_scheduler(scheduler))
            )
        return cache[scheduler]

    def resolve_cfg(self, scheduler: str, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``cfg`` against the scheduler's run options and fill in defaults.

        Unknown keys, values of the wrong type and missing required options raise
        ``TorchXConfigError`` naming the option, where it was set and what it takes. Strings are
        converted for non-string options where the meaning is certain (``"true"`` for a bool,
        ``"a,b"`` for a list), as on the command line; anything else is refused.
        """
        from torchx.specs import InvalidRunConfigException

        from torchx_airflow.schedulers.run_options import RunOptionValueError, typed_value

        opts = self.run_opts(scheduler)
        known = dict(opts)
        for key in cfg:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise TorchXConfigError(
                    f"Unknown run option(s) {[key]} for scheduler {scheduler!r} "
                    f"({self._where(str(key))}).{hint} Valid options: "
                    f"{', '.join(sorted(known)) or '(none)'}. Remove or rename it in 'cfg'."
                )
        typed: dict[str, Any] = {}
        for key, value in cfg.items():
            try:
                typed[key] = typed_value(key, value, known[key].opt_type)
            except RunOptionValueError as e:
                raise TorchXConfigError(
                    f"Invalid cfg for scheduler {scheduler!r} ({self._where(key, value)}): {e}"
                ) from None
        try:
            return opts.resolve(typed)
        except InvalidRunConfigException as e:
            raise TorchXConfigError(
                f"Invalid cfg for scheduler {scheduler!r}: {e}. Set it in extra 'cfg' of connection "
                f"{self.torchx_conn_id!r} or in the task's 'cfg'. Run options:\n{opts}"
            ) from e

    def _call(self, fn: Any) -> Any:
        with _keep_signal_handlers():
            return fn()

    def support(self, scheduler: str) -> SchedulerSupport:
        """The scheduler layer of ``scheduler`` (one per hook, so what a status query learns, such as
        a Slurm job's work dir, serves the log readers too)."""
        from torchx_airflow.schedulers import support_for

        if scheduler not in self._supports:
            self._supports[scheduler] = support_for(
                self.check_scheduler(scheduler), self.runner, lambda: self.cfg, self._credentials
            )
        return self._supports[scheduler]

    def _credentials(self) -> SchedulerCredentials:
        """The connection's host, password (a bearer token for the scheduler's API, masked at once) and
        Kubernetes kubeconfig."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        from torchx_airflow.schedulers import SchedulerCredentials
        from torchx_airflow.secrets import mask_secret

        try:
            conn = self.get_connection(self.torchx_conn_id)
        except AirflowNotFoundException:  # a hook given its scheduler and cfg only
            return SchedulerCredentials()
        if conn.password:
            mask_secret(conn.password)
        kubeconfig = self.settings.kubeconfig if conn.conn_type == self.conn_type else None
        return SchedulerCredentials(conn.host or None, conn.password or None, kubeconfig)

    @cached_property
    def _supports(self) -> dict[str, SchedulerSupport]:
        return {}

    def dryrun(
        self,
        app: AppDef,
        scheduler: str | None = None,
        cfg: Mapping[str, Any] | None = None,
        parent_run_id: str | None = None,
        secret_env_names: Iterable[str] = (),
        resubmits: bool = False,
    ) -> TorchXDryRun:
        """What would be submitted for ``app``; the hook's scheduler and cfg unless overridden.

        Role env values that are secrets (``secret_env_names``, names Airflow's masker treats as
        sensitive, values holding a masked secret) leave the request where the scheduler would write
        them down (Slurm's batch script); ``schedule`` hands them to the job another way.
        ``resubmits``: the task submits the job again when the infrastructure ends it, so the
        scheduler must not restart it itself (``SchedulerSupport.leave_resubmission_to_task``).
        """
        scheduler = scheduler or self.scheduler
        resolved = self.resolve_cfg(scheduler, self.cfg if cfg is None else cfg)
        try:
            with _tracker_environ(_app_trackers(app)):
                info = self._call(
                    lambda: self.runner.dryrun(app, scheduler, cfg=resolved, parent_run_id=parent_run_id)
                )
        except ValueError as e:  # TorchX's own AppDef checks: no roles, no entrypoint, 0 replicas
            from torchx_airflow.exceptions import TorchXComponentError

            raise TorchXComponentError(f"TorchX refused app {app.name!r}: {e}") from e
        from torchx_airflow.schedulers.env import secret_env_names as find_secrets

        names = set().union(*(find_secrets(role.env, secret_env_names) for role in app.roles))
        support = self.support(scheduler)
        support.check_dryrun(info)
        if resubmits:
            support.leave_resubmission_to_task(info)
        return TorchXDryRun(info, scheduler, support.separate_secrets(info, names))

    def apps_outlive_launcher(self, scheduler: str | None = None) -> bool:
        """Whether apps of ``scheduler`` (default: the hook's) can be waited on by another process."""
        from torchx_airflow.schedulers import apps_outlive_launcher

        return apps_outlive_launcher(scheduler or self.scheduler)

    def infrastructure_reason(self, app_handle: str, state: str, msg: str) -> str | None:
        """Why the app ended for its infrastructure's reasons (``NODE_FAIL``, ``PREEMPTED``...), or
        None when it ended for its own (``SchedulerSupport.infrastructure_reason``)."""
        return self.support(AppHandle.parse(app_handle).scheduler).infrastructure_reason(state, msg)

    def finds_submissions(self, scheduler: str) -> bool:
        """Whether a job submitted with a ``token`` can be found again by it (``find_submission``)."""
        return self.support(scheduler).finds_submissions

    def find_submission(self, scheduler: str, token: str, since: float) -> str | None:
        """The handle of the job submitted with ``schedule(..., token=token)`` at or after ``since``;
        None if the scheduler has none. Raises when the scheduler cannot tell."""
        support = self.support(scheduler)
        app_id = self._call(lambda: support.find_submission(token, since))
        return None if app_id is None else support.handle(app_id)

    def schedule(self, dryrun: TorchXDryRun, token: str | None = None) -> str:
        """Submit a dry-run result; returns the app handle ``scheduler://session/app_id``.

        On schedulers whose jobs inherit the submitting process's environment (local_cwd, slurm) the
        job gets only ``BASE_ENV``, the connection's ``env_passthrough``, the scheduler client's own
        variables and the secrets ``dryrun`` took out of the request, never the worker's
        ``AIRFLOW*`` variables. With ``token`` the job is marked so that ``find_submission`` finds it
        (Slurm: a word in its comment) even if the handle this returns is never recorded.
        """
        from torchx_airflow.schedulers.env import launch_env, swapped_environ

        support = self.support(dryrun.scheduler)
        support.check_request(dryrun.info)
        if token is not None:
            support.stamp(dryrun.info, token)
        with _tracker_environ():
            if support.inherits_launcher_env:
                env = launch_env(os.environ, self.settings.env_passthrough, support.launcher_env_patterns)
                with swapped_environ({**env, **dryrun.secrets}):
                    app_handle = self._call(lambda: self.runner.schedule(dryrun.info))
            else:
                app_handle = self._call(lambda: self.runner.schedule(dryrun.info))
        support.remember_submission(AppHandle.parse(app_handle).app_id, dryrun.info)
        return app_handle

    def statuses(self, app_handles: Iterable[str]) -> dict[str, AppStatus | None]:
        """Status of many apps, one query per scheduler where it can (Slurm: one ``sacct``).

        ``None`` for an app its scheduler does not know; a handle missing from the answer went
        unanswered this time (ask again).
        """
        by_scheduler: dict[str, dict[str, list[str]]] = {}
        for app_handle in app_handles:
            handle = AppHandle.parse(app_handle)
            by_scheduler.setdefault(handle.scheduler, {}).setdefault(handle.app_id, []).append(app_handle)
        answer: dict[str, AppStatus | None] = {}
        for scheduler, handles in by_scheduler.items():
            support = self.support(scheduler)
            statuses = self._call(lambda support=support, handles=handles: support.statuses(list(handles)))
            for app_id, status in statuses.items():
                for app_handle in handles.get(app_id, ()):
                    answer[app_handle] = status
        return answer

    def status(self, app_handle: str) -> AppStatus | None:
        """The app's status, or None if its scheduler does not know it.

        Raises ``LookupError`` when the scheduler left it unanswered (the retry policy asks again).
        """
        answer = self.statuses([app_handle])
        if app_handle not in answer:
            raise LookupError(f"The scheduler gave no status for TorchX app {app_handle}; ask again.")
        return answer[app_handle]

    def accounts_usage(self, scheduler: str) -> bool:
        """Whether ``scheduler`` keeps its own accounting of what apps used (``usage``)."""
        from torchx_airflow.schedulers import support_class

        return support_class(scheduler).accounts_usage

    def usage(self, app_handle: str) -> dict[str, Any] | None:
        """What the ended app used, from its scheduler's own accounting (``SchedulerSupport.usage``:
        Slurm's ``sacct``, local_cwd's process accounting); None when the scheduler keeps none.
        Raises when the accounting cannot be read."""
        parsed = AppHandle.parse(app_handle)
        support = self.support(parsed.scheduler)
        return self._call(lambda: support.usage(parsed.app_id))

    def wait(self, app_handle: str, wait_interval: float = 10) -> AppStatus | None:
        """Block until the app is terminal; None if its scheduler does not know it.

        Failing status queries follow the one retry policy (``torchx_airflow.retry``).
        """
        import time

        from torchx_airflow.retry import StatusPolls

        polls = StatusPolls(self.status, wait_interval, outage_budget(None, self.settings))
        while True:
            status = polls.status(app_handle)
            if status is None or status.is_terminal():
                return status
            time.sleep(wait_interval)

    def cancel(self, app_handle: str) -> None:
        """Ask the scheduler to cancel the app; does nothing if it is unknown or already terminal."""
        handle = str(AppHandle.parse(app_handle))
        status = self.status(handle)
        if status is None or status.is_terminal():
            return
        parsed = AppHandle.parse(handle)
        self._call(lambda: self.support(parsed.scheduler).cancel(parsed.app_id))

    def log_streams(self, app_handle: str) -> tuple[str | None, ...]:
        """The log streams to follow per replica: Slurm keeps stdout and stderr apart, others combine."""
        return self.support(AppHandle.parse(app_handle).scheduler).log_streams()

    def log_lines(
        self,
        app_handle: str,
        role_name: str,
        k: int = 0,
        should_tail: bool = True,
        stream: str | None = None,
        until: threading.Event | None = None,
        poll: float = 1.0,
    ) -> Iterable[str]:
        """Log lines of replica ``k`` of ``role_name``, following the log while ``should_tail``.

        A follower stops when ``until`` is set (the waiting loop sets it once the app is terminal), and
        then never asks the scheduler anything itself; without ``until`` it asks for the app's status
        every ``poll`` seconds. Slurm's files are found through the job's work dir, so any process can
        read them, not only one started in the directory the job was submitted from.
        """
        from torchx_airflow.schedulers.log_files import follow_file

        parsed = AppHandle.parse(app_handle)
        handle, app_id = str(parsed), parsed.app_id
        support = self.support(parsed.scheduler)
        if not support.follows_files(app_id):
            return self._call(lambda: support.log_lines(handle, role_name, k, should_tail, until, poll))
        if until is not None:
            return follow_file(
                lambda ask: support.log_file(app_id, role_name, k, stream, ask=ask),
                until.is_set,
                until.wait,
                tail=should_tail,
                poll=poll,
            )

        def finished() -> bool:
            status = self.status(handle)
            return status is None or status.is_terminal()

        import time

        return follow_file(
            lambda ask: support.log_file(app_id, role_name, k, stream, ask=ask),
            finished,
            time.sleep,
            tail=should_tail,
            poll=poll,
        )

    def close(self) -> None:
        """Release the runner and its schedulers. Local apps still running are terminated."""
        self.__dict__.pop("_supports", None)
        if "runner" in self.__dict__:
            self._call(self.runner.close)
            del self.__dict__["runner"]

    def test_connection(self) -> tuple[bool, str]:
        """Check the scheduler, its ``cfg`` and the tracker connections (without probing them).

        Never raises: a failure is ``(False, message)``. The trackers' own "Test" probes their stores.
        """
        try:
            scheduler = self.check_scheduler(self.scheduler)
            resolved = self.resolve_cfg(scheduler, self.cfg)
            trackers = self._check_trackers()
        except ImportError as e:
            return False, f"Scheduler {self.scheduler!r} needs a package that is not installed: {e}"
        except Exception as e:
            return False, str(e)
        finally:
            self.close()
        tracked = f"; trackers {list(trackers)} are defined" if trackers else ""
        return True, f"Scheduler {scheduler!r} is available and cfg is valid: {resolved}{tracked}"

    def _check_trackers(self) -> tuple[str, ...]:
        """Resolve every tracker connection the ``trackers`` extra names (no store is opened)."""
        from torchx_airflow.hooks.tracker import tracker_hook

        for conn_id in self.settings.trackers:
            try:
                tracker_hook(conn_id).backend()
            except TorchXConnectionError as e:
                raise TorchXConnectionError(
                    f"Connection {self.torchx_conn_id!r}: extra 'trackers' names {conn_id!r}, which is "
                    f"not a usable tracker connection: {e}"
                ) from e
        return self.settings.trackers
