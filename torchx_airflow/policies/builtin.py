"""The built-in policies of every ``TorchXOperator``, from the task's settings: one factory.

``TorchXOperator`` hands its policy settings over as given; ``builtin_settings`` checks them when
the DAG file is parsed (``TorchXConfigError`` naming the value and the fix), and ``task_policies``
builds, for each execution, the built-ins (``cache``, ``cost``, ``resubmission``) followed by the
task's own ``policies``, in the order their ``after`` declare (``run.points``). The built-ins are
peers of a DAG author's policies: the same points, the same ``run``; what they share is on the run
(``run.attempts``, ``run.result_fields``), and the one order they need is declared (``cost`` after
``cache``: a cache hit submits nothing, so there is no estimate to refuse or approve).

Importing this module imports none of the policies: a DAG file pays for them when a task runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from torchx_airflow.settings import checks

if TYPE_CHECKING:
    from torchx_airflow.run.points import RunPolicy

#: The built-ins' names (``RunPolicy.name``), in the order they are built.
BUILTIN = ("cache", "cost", "resubmission")


@dataclass(frozen=True)
class BuiltinSettings:
    """A task's settings of its built-in policies, checked (None: the connection's, else the site's)."""

    cache: bool | None = None
    cache_ignore_args: tuple[str, ...] = ()
    cache_ttl: float | None = None
    cache_scope: str | None = None
    max_cost: float | None = None
    expected_duration: float | None = None
    infrastructure_retries: int | None = None
    checkpoint_artifact: str = "checkpoint"
    checkpoint_root: str | None = None


def builtin_settings(
    task_id: str,
    wait_for_completion: bool,
    *,
    cache: Any = None,
    cache_ignore_args: Any = None,
    cache_ttl: float | timedelta | None = None,
    cache_scope: Any = None,
    max_cost: Any = None,
    expected_duration: timedelta | float | None = None,
    infrastructure_retries: Any = None,
    checkpoint_artifact: Any = "checkpoint",
    checkpoint_root: Any = None,
) -> BuiltinSettings:
    """The settings as ``TorchXOperator`` was given them, checked and normalised (seconds as floats)."""
    where = f"Task {task_id!r}"
    expected, max_cost = checks.check_cost_params(task_id, expected_duration, max_cost)
    return BuiltinSettings(
        cache=checks.check_cache(cache, wait_for_completion, where),
        cache_ignore_args=checks.check_ignore_args(cache_ignore_args, where),
        cache_ttl=checks.check_ttl(cache_ttl, where),
        cache_scope=checks.check_cache_scope(cache_scope, where),
        max_cost=max_cost,
        expected_duration=expected,
        infrastructure_retries=checks.check_infrastructure_retries(infrastructure_retries, where),
        checkpoint_artifact=checks.check_checkpoint_artifact(checkpoint_artifact, where),
        checkpoint_root=checks.check_checkpoint_root(checkpoint_root, where),
    )


def task_policies(
    settings: BuiltinSettings, cache_salt: str, own: Sequence[RunPolicy], where: str
) -> tuple[RunPolicy, ...]:
    """One execution's policies: the built-ins with ``settings`` (``cache_salt`` as rendered), then
    the task's ``own``, in the order their ``after`` declare."""
    from torchx_airflow.policies.cache.policy import CachePolicy
    from torchx_airflow.policies.cost.policy import CostPolicy
    from torchx_airflow.policies.resubmission import ResubmissionPolicy
    from torchx_airflow.run.points import in_order

    builtin: list[RunPolicy] = [
        CachePolicy(
            settings.cache,
            str(cache_salt or ""),
            settings.cache_ignore_args,
            settings.cache_ttl,
            scope=settings.cache_scope,
        ),
        CostPolicy(settings.max_cost, settings.expected_duration),
        ResubmissionPolicy(
            settings.infrastructure_retries, settings.checkpoint_artifact, settings.checkpoint_root
        ),
    ]
    return in_order([*builtin, *own], where)
