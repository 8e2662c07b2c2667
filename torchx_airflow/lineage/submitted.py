"""What a task submitted, kept for comparing runs: XCom ``torchx_app`` of each TorchX task.

The record is the app as the scheduler got it (scheduler, run options, and each role's image,
entrypoint, arguments, replicas, resources and env), JSON-safe and with every secret already
replaced by ``***`` in the task's own process, where the secrets are known: values of env variables
that carry tracker credentials, that Airflow hides by name (``*_PASSWORD``, ``API_KEY``...), or
that hold a secret registered with Airflow's masker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from torchx_airflow.apps import json_safe, summarize_role
from torchx_airflow.secrets import redact_text, should_hide_value_for_key

if TYPE_CHECKING:
    from torchx.specs import AppDef

MASK = "***"


def _env(env: Mapping[str, str], secret_names: set[str]) -> dict[str, str]:
    shown = {}
    for name, value in sorted(env.items()):
        if name in secret_names or should_hide_value_for_key(name):
            shown[name] = MASK
        else:
            shown[name] = redact_text(str(value))
    return shown


def submitted_app(
    app: AppDef,
    scheduler: str,
    cfg: Mapping[str, Any],
    secret_env_names: Iterable[str] = (),
    output_roots: Iterable[str] = (),
) -> dict[str, Any]:
    """The record of ``app`` submitted to ``scheduler`` with run options ``cfg``, secrets masked, and
    where its outputs may lie (``output_roots``: ``TaskRun.output_roots``)."""
    names = set(secret_env_names)
    roles = []
    for role in app.roles:
        summary = summarize_role(role)
        summary.pop("env_names", None)
        summary["args"] = [redact_text(a) for a in summary["args"]]
        summary["env"] = _env(role.env, names)
        roles.append(summary)
    return {
        "scheduler": scheduler,
        "app_name": app.name,
        "cfg": json_safe({k: redact_text(str(v)) if isinstance(v, str) else v for k, v in cfg.items()}),
        "roles": roles,
        # where its artifacts may be promoted from (the deployment's roots, its arguments' outputs)
        "output_roots": [redact_text(root) for root in output_roots],
    }
