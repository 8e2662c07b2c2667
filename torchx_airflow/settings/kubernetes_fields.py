"""The ``torchx`` connection's Kubernetes fields: what the connection form asks of a Kubernetes user.

``namespace``, ``queue``, ``service_account`` and ``priority_class`` are TorchX's ``kubernetes`` run
options, given their own form fields: they fill the connection's ``cfg`` (a ``cfg`` key of the same
name and another value is refused, naming both). ``kubeconfig`` is the kubeconfig file the provider's
Kubernetes client reads (instead of ``KUBECONFIG``), or ``in-cluster`` for the service account of the
pod the worker runs in. Each is refused on a connection whose scheduler is not ``kubernetes``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torchx_airflow.exceptions import TorchXConnectionError
from torchx_airflow.schedulers.base import IN_CLUSTER

#: The form fields that are TorchX ``kubernetes`` run options (cfg keys of the same name).
CFG_FIELDS = ("namespace", "queue", "service_account", "priority_class")
#: Every Kubernetes form field.
FIELDS = (*CFG_FIELDS, "kubeconfig")


def parse_kubernetes_fields(
    conn_id: str, scheduler: str, cfg: Mapping[str, Any], get: Callable[[str], Any]
) -> tuple[dict[str, Any], str | None]:
    """``(cfg with the fields merged in, kubeconfig)`` of a connection's extra (``get(key)``)."""
    given = {name: _text(conn_id, name, get(name)) for name in FIELDS}
    given = {name: value for name, value in given.items() if value is not None}
    if given and scheduler != "kubernetes":
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: extra {', '.join(map(repr, given))} "
            f"{'is a setting' if len(given) == 1 else 'are settings'} of the kubernetes scheduler, but the "
            f"connection's scheduler is {scheduler!r}. Set extra 'scheduler' to \"kubernetes\", or remove "
            f"{'it' if len(given) == 1 else 'them'}."
        )
    merged = dict(cfg)
    for name in CFG_FIELDS:
        if name not in given:
            continue
        if name in merged and merged[name] != given[name]:
            raise TorchXConnectionError(
                f"Connection {conn_id!r}: extra {name!r} is {given[name]!r} but extra 'cfg' says "
                f"{name}={merged[name]!r}. Keep one of them."
            )
        merged[name] = given[name]
    return merged, given.get("kubeconfig")


def _text(conn_id: str, name: str, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: extra {name!r} must be a string, got {value!r}. "
            f'Write it as e.g. {{"{name}": "{_EXAMPLES[name]}"}}.'
        )
    text = value.strip()
    if name == "kubeconfig" and text != IN_CLUSTER and not text.startswith(("/", "~")):
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: extra 'kubeconfig' must be an absolute path to a kubeconfig file "
            f"or {IN_CLUSTER!r} (the pod's service account), got {value!r}. Write it as e.g. "
            '"/etc/airflow/kubeconfig".'
        )
    return text


_EXAMPLES = {
    "namespace": "training",
    "queue": "default",
    "service_account": "torchx-jobs",
    "priority_class": "high",
    "kubeconfig": "/etc/airflow/kubeconfig",
}
