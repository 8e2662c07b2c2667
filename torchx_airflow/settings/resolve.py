"""The one rule for a setting's value: the task's, else its connection's, else the site's ``[torchx]``.

>>> resolve("outage_timeout", 30.0, 1800.0)
30.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchx_airflow.settings.options import site_value

if TYPE_CHECKING:
    from torchx_airflow.settings.connection import TorchXConnectionSettings


def resolve(name: str, task_value: Any = None, connection_value: Any = None) -> Any:
    """``task_value`` unless None, else ``connection_value`` unless None, else ``[torchx] name``
    (its default when the Airflow config does not set it). Values are checked where they are given
    (``settings.checks``); this only picks one."""
    for value in (task_value, connection_value):
        if value is not None:
            return value
    return site_value(name)


def output_roots(connection: TorchXConnectionSettings | None, *more: str | None) -> tuple[str, ...]:
    """The output roots the deployment sets: the connection's extra ``output_roots``, else ``[torchx]
    output_roots``, then ``more`` (a task's additions: a promotion's ``artifact_roots``, the deprecated
    ``checkpoint_root``). One setting for where outputs may lie: fingerprints, cache output checks,
    resume, promotion and asset events all use it, with the directories the task's own arguments name
    as outputs (``apps.task_output_roots``)."""
    configured = connection.output_roots if connection is not None else None
    roots = configured if configured is not None else (site_value("output_roots") or ())
    return tuple(dict.fromkeys([*roots, *(r for r in more if r)]))


def outage_budget(task_value: float | None, connection: TorchXConnectionSettings | None) -> float:
    """Seconds a wait goes on while its scheduler gives no answer (``retry.StatusOutage``): the task's
    ``outage_timeout``, else its connection's extra, else ``[torchx] outage_timeout``. The one rule of
    every wait: the operator's (in the worker and in the trigger it defers to), the sensor's, the
    hook's own ``wait`` and the lookup of an interrupted submission.

    >>> outage_budget(None, None) == float(site_value("outage_timeout"))
    True
    """
    connection_value = connection.outage_timeout if connection is not None else None
    return float(resolve("outage_timeout", task_value, connection_value))
