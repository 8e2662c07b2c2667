"""local_cwd and local_docker: apps whose state lives in the launching process.

local_cwd: apps are child processes of the launching process, with its environment.

Status is TorchX's own (in-process, no scheduler to ask). The replicas' log files are taken from
the request when the app is submitted, so log readers follow the files themselves and stop when
the waiting loop says the app is over. The replica processes are reaped by
``schedulers.processes.ProcessWatch``, which keeps their wall and CPU time (``usage``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from torchx_airflow.schedulers.base import SchedulerSupport
from torchx_airflow.schedulers.processes import ProcessWatch

if TYPE_CHECKING:
    from torchx.runner import Runner
    from torchx.specs import AppDryRunInfo

log = logging.getLogger(__name__)

_STREAM_FIELD = {None: "combined", "stdout": "stdout", "stderr": "stderr"}
PROCESS_BASIS = {
    "cpu": "CPU time the replica processes used (user + system, with the children they waited for)",
    "gpu": "requested GPUs x elapsed",
    "mem": "requested memory x elapsed",
}


def _torchx_replicas(runner: Runner, scheduler: str, app_id: str) -> list[tuple[str, int, Any]]:
    """``(role, replica id, Popen)`` of every replica TorchX's local scheduler started for ``app_id``.

    TorchX keeps them in its scheduler (``_apps[app_id].role_replicas``) and offers no public way to
    them; when that changes, there are none and the usage falls back to the requested resources.
    """
    scheduler_instance = getattr(runner, "_scheduler_instances", {}).get(scheduler)
    app = getattr(scheduler_instance, "_apps", {}).get(app_id)
    replicas = getattr(app, "role_replicas", {})
    return [(role, r.replica_id, r.proc) for role, rs in replicas.items() for r in rs if hasattr(r, "proc")]


class LocalDockerSupport(SchedulerSupport):
    """TorchX's ``local_docker`` scheduler: waited on by the process that launched the app."""

    apps_outlive_launcher = False


class LocalSupport(SchedulerSupport):
    """TorchX's ``local_cwd`` scheduler: the job's processes inherit the launcher's environment."""

    apps_outlive_launcher = False
    inherits_launcher_env = True
    accounts_usage = True

    def __init__(self, name: str, runner: Runner, *args: Any, **kwargs: Any) -> None:
        super().__init__(name, runner, *args, **kwargs)
        self._log_files: dict[tuple[str, str, int, str | None], str] = {}
        self._processes = ProcessWatch()

    def remember_submission(self, app_id: str, dryrun_info: AppDryRunInfo) -> None:
        try:
            for role, replica, proc in _torchx_replicas(self.runner, self.name, app_id):
                self._processes.watch(app_id, role, replica, proc)
        except Exception as e:  # never fails a submission: the usage falls back to the request
            log.warning("Not accounting the processes of %s: %s: %s", app_id, type(e).__name__, e)
        for role, replicas in getattr(dryrun_info.request, "role_params", {}).items():
            for k, params in enumerate(replicas):
                for stream, attr in _STREAM_FIELD.items():
                    path = getattr(params, attr, None)
                    if path:
                        self._log_files[(app_id, role, k, stream)] = path

    def follows_files(self, app_id: str) -> bool:
        return any(key[0] == app_id for key in self._log_files)

    def log_file(self, app_id: str, role: str, k: int, stream: str | None, ask: bool = True) -> str | None:
        return self._log_files.get((app_id, role, k, stream))

    def usage(self, app_id: str) -> dict[str, Any] | None:
        """Wall time and CPU time of each replica process (``source: process``); None
        for an app whose processes this support did not start (nothing to account)."""
        if not self._processes.watches(app_id):
            return None
        replicas = self._processes.replicas(app_id)
        known = [r for r in replicas if r["cpu_time_s"] is not None]
        usage: dict[str, Any] = {
            "source": "process",
            "elapsed_s": max((r["wall_s"] for r in known), default=None),
            "cpu_time_s": round(sum(r["cpu_time_s"] for r in known), 3),
            "replicas": replicas,
            "basis": dict(PROCESS_BASIS),
        }
        if len(known) < len(replicas):
            usage["unaccounted_replicas"] = len(replicas) - len(known)
        return usage
