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
