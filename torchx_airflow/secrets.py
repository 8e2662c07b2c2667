"""Keeping secrets out of task logs, dry-run output, rendered fields and XCom.

Airflow's secrets masker redacts every value registered with ``mask_secret`` wherever Airflow
prints it. This module registers the values the provider knows to be secret (passwords from
connections, env values whose names look sensitive, such as ``*_TOKEN`` or ``*_PASSWORD``) and
redacts text that the provider builds itself, such as the scheduler's request.

Only the Task SDK's public ``airflow.sdk.log`` is used (the path apache-airflow-providers-common-compat
also prefers): which names are sensitive is asked of ``redact`` itself rather than of the masker's
private module, so ``[core] sensitive_var_conn_names`` applies as it does everywhere in Airflow.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from airflow.sdk.log import mask_secret, redact

if TYPE_CHECKING:
    from torchx.specs import AppDef

__all__ = ["mask_secret", "mask_sensitive_env", "redact_text", "should_hide_value_for_key"]


def should_hide_value_for_key(name: str) -> bool:
    """Whether Airflow hides a value stored under ``name`` (``API_KEY``, ``*_SECRET``, ``password``...).

    Airflow's function of that name lives in a private module; this one asks the public ``redact``.

    >>> should_hide_value_for_key("MLFLOW_TRACKING_PASSWORD"), should_hide_value_for_key("LR")
    (True, False)
    """
    probe = uuid.uuid4().hex  # matches no registered secret: only the name can make redact hide it
    return redact(probe, name) != probe


def mask_sensitive_env(env: dict[str, str]) -> None:
    """Register the values of env variables whose names look sensitive (``API_KEY``, ``*_SECRET``...)."""
    for name, value in env.items():
        if value:
            mask_secret(str(value), name)  # Airflow masks it only when the name is a sensitive one


def _role_envs(app: AppDef | None) -> Iterable[dict[str, str]]:
    return [role.env for role in app.roles] if app is not None else []


def redact_text(text: str, app: AppDef | None = None) -> str:
    """``text`` with every registered secret, and every sensitive env value of ``app``, replaced by ***."""
    for env in _role_envs(app):
        mask_sensitive_env(env)
    redacted: Any = redact(text)
    return str(redacted)
