"""One description per connection type of its extra fields: the form Airflow's UI shows and the check
every connection's extra passes before anything is used.

``CONN_FIELDS[conn_type]`` maps each extra to its label, JSON schema and description.
``get_provider_info()`` puts it in ``conn-fields`` (the UI renders the form from it), and
``validate_extra`` checks an extra against the same schemas with ``jsonschema``: every bad field is
named in one error, with its fix, before the connection's parsers run (they keep the checks a schema
cannot say: scheduler names, environment variable names, price tables).

What the form or an ``AIRFLOW_CONN_*`` variable may store is read first as the parsers always
have: ``extra__<conn_type>__<key>`` keys, ``""`` for an empty field, JSON text for an object or a list,
``"a,b"`` for a list of names, ``"true"``/``"false"`` for a boolean.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

_STRING = {"type": ["string", "null"]}
_NAMES = {"type": ["array", "null"], "items": {"type": "string"}}

CONN_FIELDS: dict[str, dict[str, dict[str, Any]]] = {
    "torchx": {
        "scheduler": {
            "label": "Scheduler",
            "schema": {**_STRING, "default": "local_cwd"},
            "description": "TorchX scheduler: local_cwd, local_docker, slurm, kubernetes, ...",
        },
        "cfg": {
            "label": "Run options (cfg)",
            "schema": {"type": ["object", "null"]},
            "description": 'Scheduler run options as JSON, e.g. {"partition": "gpu"}',
        },
        "trackers": {
            "label": "Tracker connections",
            "schema": _NAMES,
            "description": "Ids of the torchx_fsspec / mlflow connections the app tracks to, as a JSON "
            'list (["torchx_fsspec_default", "mlflow_default"]) or comma-separated',
        },
        "env_passthrough": {
            "label": "Env passthrough",
            "schema": _NAMES,
            "description": "Worker variables local_cwd and Slurm jobs may inherit besides "
            'the base ones: names or patterns, e.g. ["CUDA_HOME", "NCCL_*"]',
        },
        "outage_timeout": {
            "label": "Scheduler outage timeout (s)",
            "schema": {"type": ["number", "null"], "exclusiveMinimum": 0},
            "description": "Seconds a wait goes on while the scheduler does not answer "
            "(empty: [torchx] outage_timeout, 600)",
        },
        "infrastructure_retries": {
            "label": "Infrastructure retries",
            "schema": {"type": ["integer", "null"], "minimum": 0},
            "description": "Times a job ended by a node failure or a preemption is resubmitted "
            "without using the task's retries (empty: [torchx] infrastructure_retries, 3)",
        },
        "prices": {
            "label": "Price table",
            "schema": {"type": ["object", "null"]},
            "description": 'Prices for usage and max_cost, e.g. {"cpu_hour": 0.05, '
            '"gpu_hour": {"a100": 2.5, "default": 1.0}, "mem_gb_hour": 0.005, "currency": "USD"}',
        },
        "cost_approval_timeout": {
            "label": "Cost approval timeout (s)",
            "schema": {"type": ["number", "null"], "exclusiveMinimum": 0},
            "description": "Ask an approver (Airflow's Required Actions) before submitting a run whose "
            "estimate is over its max_cost, waiting this many seconds; no answer rejects it "
            "(empty: over max_cost fails)",
        },
        "cost_approvers": {
            "label": "Cost approvers",
            "schema": {"type": ["array", "string", "null"]},
            "description": "Who may approve a run over its max_cost: Airflow user ids, as a JSON list "
            '(["alice", "bob"], or [{"id": "7", "name": "alice"}]) or comma-separated (empty: any user '
            "who may act on the task, but the requester)",
        },
        "cost_self_approval": {
            "label": "Requester may approve",
            "schema": {"type": ["boolean", "null"], "default": False},
            "description": "Let the user who triggered the DAG run approve their own run over its "
            "max_cost (default: no)",
        },
        "cache": {
            "label": "Cache runs",
            "schema": {"type": ["boolean", "null"], "default": False},
            "description": "Tasks whose inputs match an earlier run that succeeded return its "
            "result without submitting (a task's cache= wins)",
        },
        "cache_ttl": {
            "label": "Cache record lifetime (s)",
            "schema": {"type": ["number", "null"], "exclusiveMinimum": 0},
            "description": "Seconds a cached result is reused (empty: 30 days; a task's cache_ttl= wins)",
        },
        "cache_scope": {
            "label": "Cache scope",
            "schema": {"type": ["string", "null"], "enum": ["dag", "deployment", None]},
            "description": "dag: cached results only within a DAG; deployment: shared by every "
            "DAG (empty: [torchx] cache_scope, dag)",
        },
        "output_roots": {
            "label": "Output roots",
            "schema": {"type": ["array", "string", "null"]},
            "description": "Directories or URL prefixes the jobs write their outputs under, as a JSON "
            'list (["/shared/runs", "s3://ml/models"]) or comma-separated: where paths read back from '
            "a tracker store may lie (empty: [torchx] output_roots; the directories the task's "
            "arguments name as outputs count too)",
        },
        "checkpoint_root": {
            "label": "Checkpoint root (deprecated)",
            "schema": _STRING,
            "description": "Deprecated: set output_roots. A directory (or URL prefix) added to the output "
            "roots a resumed job's checkpoint may lie under",
        },
        # Kubernetes (settings.kubernetes_fields): the four run options fill cfg
        "namespace": {
            "label": "Namespace (kubernetes)",
            "schema": _STRING,
            "description": "Kubernetes namespace of the Volcano Jobs (empty: cfg, else default)",
        },
        "queue": {
            "label": "Volcano queue (kubernetes)",
            "schema": _STRING,
            "description": "Volcano queue the jobs are submitted to (checked before submitting)",
        },
        "service_account": {
            "label": "Service account of the jobs (kubernetes)",
            "schema": _STRING,
            "description": "Service account of the jobs' pods (empty: the namespace's default)",
        },
        "priority_class": {
            "label": "Priority class (kubernetes)",
            "schema": _STRING,
            "description": "PriorityClass of the jobs' pods (empty: none)",
        },
        "kubeconfig": {
            "label": "Kubeconfig (kubernetes)",
            "schema": _STRING,
            "description": "Path of the kubeconfig the worker and triggerer use, or in-cluster "
            "(the pod's service account); empty: KUBECONFIG, ~/.kube/config, else in-cluster",
        },
    },
    "torchx_fsspec": {
        "root": {
            "label": "Root URL",
            "schema": _STRING,
            "description": "Where runs are stored: a path, file://, s3://bucket/prefix, memory://",
        },
        "storage_options": {
            "label": "Storage options",
            "schema": {"type": ["object", "null"]},
            "description": 'fsspec options as JSON, e.g. {"endpoint_url": "http://minio:9000"}',
        },
    },
    "mlflow": {
        "experiment": {
            "label": "Experiment",
            "schema": {**_STRING, "default": "torchx"},
            "description": "MLflow experiment the runs go to (created if missing)",
        },
    },
}

#: Extras that may hold credentials: an error names the field and the rule, never the value.
SECRET_FIELDS = frozenset({("torchx_fsspec", "storage_options")})


def _types(schema: Mapping[str, Any]) -> set[str]:
    kind = schema.get("type", [])
    return {kind} if isinstance(kind, str) else set(kind)


def _as_stored(schema: Mapping[str, Any], value: Any) -> Any:
    """A value as the form or a variable stores it, read as the schema's type where it says one."""
    if value == "":
        return None
    if not isinstance(value, str):
        return value
    kinds, text = _types(schema), value.strip()
    if kinds & {"object", "array"} and text[:1] in ("{", "["):
        return json.loads(text)  # a JSONDecodeError is the field's error
    if "array" in kinds and "string" not in kinds and schema.get("items") == {"type": "string"}:
        return [name.strip() for name in text.split(",") if name.strip()]
    if "boolean" in kinds and text.lower() in ("true", "false"):
        return text.lower() == "true"
    if kinds & {"number", "integer"} and "string" not in kinds:
        try:
            return int(text) if text.lstrip("-").isdigit() else float(text)
        except ValueError:
            return value  # the schema names the type it wanted
    return value


def validate_extra(conn_id: str, conn_type: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` checked against ``CONN_FIELDS[conn_type]``, each field read as the schema's type (see
    the module's docstring); returns the fields by name as stored (``""`` as None) for the parsers.
    Raises ``TorchXConnectionError`` naming every bad field and its fix (an unknown key, a value its
    schema refuses, JSON that does not parse)."""
    from jsonschema import Draft202012Validator

    # here, not at module level: get_provider_info imports this module while Airflow loads providers
    from torchx_airflow.exceptions import TorchXConnectionError

    fields = CONN_FIELDS[conn_type]
    values: dict[str, Any] = {}
    problems: list[str] = []
    for raw_key, raw_value in extra.items():
        key = str(raw_key).removeprefix(f"extra__{conn_type}__")
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            problems.append(
                f"extra {raw_key!r} is not a field of a {conn_type!r} connection: {hint}rename or remove it"
            )
            continue
        secret = (conn_type, key) in SECRET_FIELDS
        shown = "" if secret else f": {raw_value!r}"
        field = fields[key]
        try:
            value = _as_stored(field["schema"], raw_value)
        except json.JSONDecodeError as e:
            reason = "" if secret else f" ({e})"
            problems.append(
                f"extra {key!r} is not valid JSON{reason}{shown}. Write it as: {field['description']}"
            )
            continue
        errors = sorted(Draft202012Validator(field["schema"]).iter_errors(value), key=lambda e: e.path)
        if errors:
            error = errors[0]
            rule = (
                f"the value does not match {error.validator} {error.validator_value!r}"
                if secret
                else error.message
            )
            problems.append(f"extra {key!r}: {rule}. Write it as: {field['description']}")
            continue
        values[key] = None if raw_value == "" else raw_value  # the parsers read the stored forms
    if problems:
        known = ", ".join(map(repr, fields))
        raise TorchXConnectionError(
            f"Connection {conn_id!r} has {len(problems)} bad extra field(s) (the fields of a {conn_type!r} "
            f"connection are {known}):\n" + "\n".join(f"- {problem}" for problem in problems)
        )
    return values
