"""What a ``torchx`` connection says, parsed and checked without loading any TorchX scheduler.

Connection extra (all optional)::

    {"scheduler": "slurm", "cfg": {"partition": "gpu", "time": "01:00:00"}, "trackers": ["mlflow_default"],
     "env_passthrough": ["CUDA_HOME", "NCCL_*"], "outage_timeout": 1800, "infrastructure_retries": 3,
     "prices": {"cpu_hour": 0.05, "gpu_hour": {"a100": 2.5, "default": 1.0}, "mem_gb_hour": 0.005},
     "cache": true, "cache_ttl": 604800, "cache_scope": "dag"}

``outage_timeout``: seconds a wait on this connection's scheduler goes on while the scheduler gives
no answer (a task's own ``outage_timeout`` wins; unset: ``[torchx] outage_timeout``, 600 s).
``infrastructure_retries``: how many times a job that a node failure or a preemption ended is
resubmitted within the task's try (a task's own wins; unset: ``[torchx] infrastructure_retries``, 3;
see ``torchx_airflow.policies.resubmission``).
``prices``: the price table that turns a run's usage into a cost (``torchx_airflow.policies.cost.pricing``).
``cost_approval_timeout``: seconds an approver is given to let a run over its ``max_cost`` be submitted
(``torchx_airflow.policies.cost.approval``; unset: such a run fails before submitting);
``cost_approvers``: the Airflow users who may approve it (unset: anyone who may act on the task);
``cost_self_approval``: whether the user who triggered the DAG run may approve their own (default false).
``cache``: whether the connection's tasks are cached (``policies.cache``) unless a task says
otherwise (default false); ``cache_ttl``: seconds a cache record is used (a task's own wins; default
30 days); ``cache_scope``: ``dag`` (hits only within a DAG) or ``deployment`` (a task's own wins;
unset: ``[torchx] cache_scope``, ``dag``). ``output_roots``: the directories (or URL prefixes) the
jobs write their outputs under (unset: ``[torchx] output_roots``; ``settings.resolve.output_roots``);
``checkpoint_root``: deprecated, one more root for resumed jobs' checkpoints. ``namespace``,
``queue``, ``service_account``, ``priority_class`` and ``kubeconfig``: the Kubernetes form fields
(``settings.kubernetes_fields``).

Also the parsers other connection types share: a JSON-object extra, the list of known extra keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torchx_airflow.exceptions import TorchXConnectionError
from torchx_airflow.schedulers.env import parse_env_passthrough
from torchx_airflow.settings import checks
from torchx_airflow.settings.conn_fields import validate_extra
from torchx_airflow.settings.extras import parse_bool, parse_json_object, split_list
from torchx_airflow.settings.kubernetes_fields import CFG_FIELDS, parse_kubernetes_fields
from torchx_airflow.settings.prices import PriceTable

DEFAULT_SCHEDULER = "local_cwd"
CONN_EXAMPLE = 'AIRFLOW_CONN_{id}=\'{{"conn_type": "torchx", "extra": {{"scheduler": "local_cwd"}}}}\''


@dataclass(frozen=True)
class TorchXConnectionSettings:
    """What a ``torchx`` connection says: the scheduler, its run options and the tracker connections."""

    scheduler: str = DEFAULT_SCHEDULER
    cfg: dict[str, Any] = field(default_factory=dict)
    trackers: tuple[str, ...] = ()
    env_passthrough: tuple[str, ...] = ()
    outage_timeout: float | None = None
    infrastructure_retries: int | None = None
    prices: PriceTable | None = None
    cost_approval_timeout: float | None = None
    cost_approvers: tuple[dict[str, str], ...] = ()
    cost_self_approval: bool = False
    cache: bool = False
    cache_ttl: float | None = None
    cache_scope: str | None = None
    output_roots: tuple[str, ...] | None = None
    checkpoint_root: str | None = None  # deprecated: an output root of resumed jobs' checkpoints
    #: the Kubernetes form fields (``settings.kubernetes_fields``): the four run options are in ``cfg``
    namespace: str | None = None
    queue: str | None = None
    service_account: str | None = None
    priority_class: str | None = None
    kubeconfig: str | None = None

    @classmethod
    def from_extra(cls, conn_id: str, extra: Mapping[str, Any]) -> TorchXConnectionSettings:
        """Parse a connection's extra; UI-prefixed keys (``extra__torchx__cfg``) are accepted too."""

        values = validate_extra(conn_id, "torchx", extra)  # the form's schemas, every bad field named
        get = values.get

        scheduler = get("scheduler")
        if scheduler is not None and not isinstance(scheduler, str):
            raise TorchXConnectionError(
                f"Connection {conn_id!r}: extra 'scheduler' must be a scheduler name such as "
                f"'local_cwd' or 'slurm', got {scheduler!r}. Write it as a JSON string, "
                'e.g. {"scheduler": "slurm"}.'
            )
        scheduler = (scheduler or "").strip() or DEFAULT_SCHEDULER
        cfg = parse_json_object(conn_id, "cfg", get("cfg"), '{"partition": "gpu", "time": "01:00:00"}')
        cfg, kubeconfig = parse_kubernetes_fields(conn_id, scheduler, cfg, get)
        return cls(
            scheduler=scheduler,
            cfg=cfg,
            **{name: cfg.get(name) for name in CFG_FIELDS},
            kubeconfig=kubeconfig,
            trackers=_parse_trackers(conn_id, get("trackers")),
            env_passthrough=parse_env_passthrough(conn_id, get("env_passthrough")),
            outage_timeout=_checked(
                conn_id,
                checks.check_outage_timeout,
                get("outage_timeout"),
                "Set extra 'outage_timeout' to a number, e.g. 1800.",
            ),
            infrastructure_retries=_checked(
                conn_id,
                checks.check_infrastructure_retries,
                get("infrastructure_retries"),
                "Set extra 'infrastructure_retries' to e.g. 3.",
            ),
            prices=PriceTable.from_extra(conn_id, get("prices")),
            cost_approval_timeout=_seconds(get("cost_approval_timeout")),  # its schema: a positive number
            cost_approvers=_parse_approvers(conn_id, get("cost_approvers")),
            cost_self_approval=parse_bool(conn_id, "cost_self_approval", get("cost_self_approval")),
            cache=parse_bool(conn_id, "cache", get("cache")),
            cache_ttl=_parse_cache_ttl(conn_id, get("cache_ttl")),
            cache_scope=_checked(
                conn_id,
                checks.check_cache_scope,
                get("cache_scope"),
                'Set extra \'cache_scope\' to "dag" or "deployment".',
            ),
            output_roots=_checked(
                conn_id, checks.check_output_roots, get("output_roots"), "Set extra 'output_roots'."
            ),
            checkpoint_root=_checked(
                conn_id, checks.check_checkpoint_root, get("checkpoint_root"), "Set extra 'output_roots'."
            ),
        )


def _seconds(value: Any) -> float | None:
    """A number of seconds the schema already checked, as stored: ``3600`` or the form's ``"3600"``."""
    return None if value is None else float(value)


def _checked(conn_id: str, check: Callable[[Any, str], Any], value: Any, fix: str) -> Any:
    """A connection extra through its setting's check (``settings.checks``): a bad value is the
    connection's error, with ``fix`` added."""
    try:
        return check(value, f"Connection {conn_id!r}")
    except TorchXConnectionError:
        raise
    except Exception as e:  # TorchXConfigError: a connection's is a connection error
        raise TorchXConnectionError(f"{e} {fix}") from None


def _parse_cache_ttl(conn_id: str, value: Any) -> float | None:
    from torchx_airflow.settings.checks import check_ttl

    try:
        return check_ttl(value, f"Connection {conn_id!r}")
    except Exception:  # TorchXConfigError: a connection's is a connection error
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: extra 'cache_ttl' must be a positive number of seconds, got "
            f"{value!r}. Write it as e.g. 604800 (7 days)."
        ) from None


_TRACKERS_EXAMPLE = '["torchx_fsspec_default", "mlflow_default"] or "torchx_fsspec_default,mlflow_default"'


_APPROVERS_EXAMPLE = '["alice", "bob"] or [{"id": "7", "name": "alice"}]'


def _parse_approvers(conn_id: str, value: Any) -> tuple[dict[str, str], ...]:
    """``cost_approvers``: Airflow users as ``{"id", "name"}`` (a plain string is both), from a JSON
    list or a comma-separated string."""
    value = split_list(value, f"Connection {conn_id!r}: extra 'cost_approvers'", _APPROVERS_EXAMPLE)
    approvers = []
    for entry in value or []:
        if isinstance(entry, str) and entry.strip():
            approvers.append({"id": entry.strip(), "name": entry.strip()})
        elif isinstance(entry, Mapping) and all(
            isinstance(entry.get(k), str) and entry[k] for k in ("id", "name")
        ):
            approvers.append({"id": str(entry["id"]), "name": str(entry["name"])})
        else:
            raise TorchXConnectionError(
                f"Connection {conn_id!r}: extra 'cost_approvers' holds {entry!r}, which is no Airflow user. "
                f"Name each by its user id, or as {{'id', 'name'}}: e.g. {_APPROVERS_EXAMPLE}."
            )
    return tuple(approvers)


def _parse_trackers(conn_id: str, value: Any) -> tuple[str, ...]:
    """The ``trackers`` extra: a JSON list of connection ids, or one comma-separated string."""
    if value is None:
        return ()
    value = split_list(value, f"Connection {conn_id!r}: extra 'trackers'", _TRACKERS_EXAMPLE)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: extra 'trackers' must be a list of connection ids, got {value!r}. "
            f"Write it as e.g. {_TRACKERS_EXAMPLE}."
        )
    return tuple(dict.fromkeys(v.strip() for v in value if v.strip()))
