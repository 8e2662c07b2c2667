"""local_cwd and local_docker: apps whose state lives in the launching process.

local_cwd: apps are child processes of the launching process, with its environment.

Status is TorchX's own (in-process, no scheduler to ask). The replicas' log files are taken from
the request when the app is submitted, so log readers follow the files themselves and stop when
the waiting loop says the app is over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchx_airflow.schedulers.base import SchedulerSupport

if TYPE_CHECKING:
    from torchx.runner import Runner
    from torchx.specs import AppDryRunInfo

_STREAM_FIELD = {None: "combined", "stdout": "stdout", "stderr": "stderr"}


class LocalDockerSupport(SchedulerSupport):
    """TorchX's ``local_docker`` scheduler: waited on by the process that launched the app."""

    apps_outlive_launcher = False


class LocalSupport(SchedulerSupport):
    """TorchX's ``local_cwd`` scheduler: the job's processes inherit the launcher's environment."""

    apps_outlive_launcher = False
    inherits_launcher_env = True

    def __init__(self, name: str, runner: Runner) -> None:
        super().__init__(name, runner)
        self._log_files: dict[tuple[str, str, int, str | None], str] = {}

    def submitted(self, app_id: str, dryrun_info: AppDryRunInfo) -> None:
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
