"""The one rule for a setting's value: the task's, else its connection's, else the site's ``[torchx]``.

>>> resolve("outage_timeout", 30.0, 1800.0)
30.0
"""

from __future__ import annotations

from typing import Any

from torchx_airflow.settings.options import site_value


def resolve(name: str, task_value: Any = None, connection_value: Any = None) -> Any:
    """``task_value`` unless None, else ``connection_value`` unless None, else ``[torchx] name``
    (its default when the Airflow config does not set it). Values are checked where they are given
    (``settings.checks``); this only picks one."""
    for value in (task_value, connection_value):
        if value is not None:
            return value
    return site_value(name)
