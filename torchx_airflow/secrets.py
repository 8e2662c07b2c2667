"""Keeping secrets out of task logs, dry-run output, rendered fields and XCom.

Airflow's secrets masker redacts every value registered with ``mask_secret`` wherever Airflow
prints it. This module registers the values the provider knows to be secret (passwords from
connections, env values whose names look sensitive, such as ``*_TOKEN`` or ``*_PASSWORD``) and
redacts text that the provider builds itself, such as the scheduler's request.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from airflow.sdk._shared.secrets_masker import redact, should_hide_value_for_key
from airflow.sdk.log import mask_secret

if TYPE_CHECKING:
    from torchx.specs import AppDef

__all__ = ["mask_secret", "mask_sensitive_env", "redact_text", "should_hide_value_for_key"]


def mask_sensitive_env(env: dict[str, str]) -> None:
    """Register the values of env variables whose names look sensitive (``API_KEY``, ``*_SECRET``...)."""
    for name, value in env.items():
        if value and should_hide_value_for_key(name):
            mask_secret(str(value), name)


def _role_envs(app: AppDef | None) -> Iterable[dict[str, str]]:
    return [role.env for role in app.roles] if app is not None else []


def redact_text(text: str, app: AppDef | None = None) -> str:
    """``text`` with every registered secret, and every sensitive env value of ``app``, replaced by ***."""
    for env in _role_envs(app):
        mask_sensitive_env(env)
    redacted: Any = redact(text)
    return str(redacted)
