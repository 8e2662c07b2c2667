"""What differs per TorchX scheduler, behind one small interface the hook uses.

``support_for(scheduler, runner)`` returns the ``SchedulerSupport`` of a scheduler: the status of
many apps in one query, whether an app is known, where an app's logs are and which streams it has,
whether its jobs inherit the launching process's environment, and how secret env values reach the
job without being written down. Slurm has its own module; every other scheduler gets the default,
which asks TorchX's ``Runner`` one app at a time.

Importing this package imports no TorchX scheduler: each module imports what it needs when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchx_airflow.schedulers.base import SchedulerSupport

if TYPE_CHECKING:
    from torchx.runner import Runner

__all__ = ["SchedulerSupport", "support_for"]


def support_for(scheduler: str, runner: Runner) -> SchedulerSupport:
    """The ``SchedulerSupport`` of ``scheduler``, asking through ``runner`` where it has to."""
    if scheduler == "slurm":
        from torchx_airflow.schedulers.slurm import SlurmSupport

        return SlurmSupport(scheduler, runner)
    if scheduler == "local_cwd":
        from torchx_airflow.schedulers.local import LocalSupport

        return LocalSupport(scheduler, runner)
    return SchedulerSupport(scheduler, runner)
