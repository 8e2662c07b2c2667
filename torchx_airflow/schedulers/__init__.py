"""What differs per TorchX scheduler, behind one small interface the hook uses.

``support_for(scheduler, runner)`` returns the ``SchedulerSupport`` of a scheduler: the status of
many apps in one query, where an app's logs are and which streams it has, whether its apps outlive
the process that launched them, whether its jobs inherit that process's environment, and how secret
env values reach the job without being written down. Every scheduler without a class of its own
gets the default, which asks TorchX's ``Runner`` one app at a time.

The classes are found by name, as TorchX finds its schedulers: the builtins below, then the entry
point group ``torchx_airflow.schedulers`` (name = the TorchX scheduler's name, value = a
``SchedulerSupport`` subclass), so a site adds or replaces the support of its own scheduler::

    [project.entry-points."torchx_airflow.schedulers"]
    my_cluster = "my_site.torchx:MyClusterSupport"

Importing this package imports no TorchX scheduler: a class's module is imported when first asked.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from torchx_airflow.schedulers.base import SchedulerCredentials, SchedulerSupport

if TYPE_CHECKING:
    from torchx.runner import Runner

__all__ = [
    "ENTRY_POINT_GROUP",
    "SchedulerCredentials",
    "SchedulerSupport",
    "apps_outlive_launcher",
    "support_class",
    "support_for",
]

ENTRY_POINT_GROUP = "torchx_airflow.schedulers"
#: scheduler name -> ``module:Class`` of its support, before the entry points are read.
DEFAULT_SUPPORT_CLASSES: dict[str, str] = {
    "local_cwd": "torchx_airflow.schedulers.local:LocalSupport",
    "local_docker": "torchx_airflow.schedulers.local:LocalDockerSupport",
    "kubernetes": "torchx_airflow.schedulers.kubernetes:KubernetesSupport",
    "slurm": "torchx_airflow.schedulers.slurm:SlurmSupport",
}


@functools.cache
def _support_classes() -> dict[str, str]:
    from importlib.metadata import entry_points

    classes = dict(DEFAULT_SUPPORT_CLASSES)
    classes.update({ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)})
    return classes


@functools.cache
def support_class(scheduler: str) -> type[SchedulerSupport]:
    """The ``SchedulerSupport`` class of ``scheduler`` (the default for a scheduler without one)."""
    path = _support_classes().get(scheduler)
    if path is None:
        return SchedulerSupport
    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, SchedulerSupport)):
        raise TypeError(
            f"{path!r}, the support of scheduler {scheduler!r} (entry point group {ENTRY_POINT_GROUP!r}), "
            "is not a SchedulerSupport subclass. Point the entry point at one."
        )
    return cls


def support_for(
    scheduler: str,
    runner: Runner,
    cfg: Callable[[], Mapping[str, Any]] | None = None,
    credentials: Callable[[], SchedulerCredentials] | None = None,
) -> SchedulerSupport:
    """The ``SchedulerSupport`` of ``scheduler``, asking through ``runner`` where it has to; ``cfg``
    and ``credentials`` give the run options and the connection's credentials of the hook that asks."""
    return support_class(scheduler)(scheduler, runner, cfg, credentials)


def apps_outlive_launcher(scheduler: str) -> bool:
    """Whether apps of ``scheduler`` live on without the process that launched them, so that another
    task, the triggerer or a retry can wait on them (no runner is created to tell)."""
    return support_class(scheduler).apps_outlive_launcher
