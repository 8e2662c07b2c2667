"""Fakes of what Airflow hands a running task, for tests in any tier that drive an operator, a
sensor or the run's pieces in-process: the task instance, the task state store, the task log. Named
as fakes: Airflow's own run them in the e2e tests; here the tests pin what the provider does with them."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any


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
