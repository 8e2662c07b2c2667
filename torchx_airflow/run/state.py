"""The task's ``task_state_store``: the one rule for when a task has one, and every key kept in it.

Airflow keeps a task instance's state store across its tries and deferrals; what this provider
keeps there is what a later try (or the same try resumed in another process) needs to act as if
nothing had happened. Only a ``durable`` task keeps anything (``TorchXOperator(durable=False)``
keeps nothing, and its retries start afresh). No other module reads the store from the context.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The handle of the task's submitted job (``TorchXOperator.external_id_key``).
HANDLE_KEY = "torchx_app_handle"
#: A submission under way: ``{token, scheduler, since}`` (``run.durable``).
SUBMISSION_KEY = "torchx_submission"
#: The attempts of the task's current job, oldest first (``run.attempts``).
ATTEMPTS_KEY = "torchx_attempts"
#: When the app was submitted: ``{app_handle, at}`` (``policies.cost``).
SUBMITTED_KEY = "torchx_submitted"
#: The cache key of the run the task waits on (``policies.cache``).
CACHE_KEY = "torchx_cache_key"

#: Every key, for the docs and for a person clearing a task's state by hand.
KEYS = (HANDLE_KEY, SUBMISSION_KEY, ATTEMPTS_KEY, SUBMITTED_KEY, CACHE_KEY)


def task_state_store(context: Mapping[str, Any], durable: bool) -> Any:
    """The task's state store, or None: when the task is not ``durable`` or Airflow gives none."""
    return context.get("task_state_store") if durable else None
