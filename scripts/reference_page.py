"""Render docs/reference.md from the code's own tables: the ``[torchx]`` options
(``settings.options.OPTIONS``), the connection form fields (``get_provider_info()``), the operators'
parameters (their signatures and ``:param:`` docstrings) and the environment variables (``ENVIRONMENT``
below, which a test holds against every variable name the code spells).

    python scripts/reference_page.py > docs/reference.md

``tests/unit/test_reference_page.py`` fails when the page and the code disagree.
"""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any

#: Every environment variable the provider or the tracker package sets or reads: name, who sets it,
#: who reads it, what it holds. A test compares the names with those the code spells.
ENVIRONMENT: tuple[tuple[str, str, str, str], ...] = (
    (
        "TORCHX_PLUGINS_SOURCE",
        "the site (the job's environment), for TorchX main",
        "TorchX main's plugin registry in the job; the tracker package's registration module",
        "where TorchX main looks for trackers: `1` only the `torchx_plugins.*` namespace packages, `2` "
        "only entry points, unset or `3` both; the tracker's stores register both ways, once each",
    ),
    (
        "TORCHX_JOB_ID",
        "TorchX, in every role's env (on Kubernetes the provider rewrites it before submitting)",
        "TorchX's `AppRun.run_from_env()` in the job: the tracker run the job writes to",
        "the app handle; on Kubernetes TorchX's own value lacks the namespace, so the provider sets it "
        "to the handle the task waits on, and what the job records joins the task's lineage",
    ),
    (
        "TORCHX_TRACKERS",
        "the task, in every role's env",
        "TorchX's `AppRun.run_from_env()` in the job",
        "the tracker entry points of the task's tracker connections (`airflow_fsspec`, "
        "`airflow_mlflow` or `airflow_stores`); the worker's own value never reaches the job",
    ),
    (
        "TORCHX_TRACKER_<NAME>_CONFIG",
        "the task, in every role's env",
        "the tracker package's stores in the job",
        "each entry point's store config as JSON (a secret in it is masked in every log)",
    ),
    (
        "TORCHX_PARENT_RUN_ID",
        "a job's own code",
        "TorchX's `AppRun`",
        "a parent run TorchX reads itself; the worker's value never reaches the job, and an edge the "
        "job adds this way is not recorded twice",
    ),
    (
        "MLFLOW_TRACKING_URI",
        "the task, with exactly one MLflow tracker",
        "the job's own `mlflow` calls",
        "the MLflow connection's tracking URI, so the job's own calls reach the same server",
    ),
    (
        "MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD",
        "the task, from the MLflow connection",
        "MLflow in the job",
        "the connection's basic-auth user and password (masked in every log)",
    ),
    (
        "DO_NOT_TRACK, MLFLOW_DISABLE_TELEMETRY",
        "the worker's environment",
        "MLflow and other libraries in the job",
        "base variables a local_cwd or Slurm job inherits from its worker, so a deployment that turns "
        "telemetry off turns it off in the jobs too",
    ),
    (
        "TORCHX_AIRFLOW_RESUME_FROM",
        "the task, on a resubmitted job or a sweep's continuing segment",
        "the training script",
        "the path of the ended attempt's `checkpoint` artifact ([Multi-node and preemption](multi-node.md)), "
        "or of the trial's previous segment's ([Sweeps](sweeps.md))",
    ),
    (
        "TORCHX_AIRFLOW_TRIAL",
        "a sweep's segment",
        "the training script",
        "JSON of the trial: `id`, `index`, `params`, `budget`, `rung`, `previous_budget`, and "
        "`bracket` in a Hyperband sweep ([Sweeps](sweeps.md))",
    ),
    (
        "TORCHX_AIRFLOW_ATTEMPT",
        "the task, on a resubmitted job",
        "the training script",
        "the attempt number: `2` for the first resubmission (unset on the first job)",
    ),
    (
        "OPENLINEAGE_PARENT_ID, OPENLINEAGE_ROOT_PARENT_ID",
        "the task, with the `openlineage` extra",
        "openlineage-python integrations in the job",
        "`<namespace>/<job>/<run id>` of the task's and the DAG run's OpenLineage runs",
    ),
    (
        "AIRFLOW__TORCHX__<OPTION>",
        "the deployment",
        "Airflow's config, for every `[torchx]` option on this page",
        "an option of the `[torchx]` section, as any Airflow config option",
    ),
    (
        "AIRFLOW_CONN_<CONN_ID>",
        "the deployment",
        "Airflow, for the `torchx`, `torchx_fsspec` and `mlflow` connections",
        "a connection as JSON or URI, as for any Airflow connection",
    ),
)

#: The operators whose parameters the page lists, in the order it shows them.
OPERATORS = (
    "torchx_airflow.operators.dryrun.TorchXDryRunOperator",
    "torchx_airflow.operators.torchx.TorchXOperator",
    "torchx_airflow.operators.promote.TorchXPromoteOperator",
    "torchx_airflow.sensors.torchx.TorchXAppSensor",
)

HEADER = """\
# Reference

Every `[torchx]` option, connection field, operator parameter and environment variable in one
place. This page is rendered from the code's own tables (`python scripts/reference_page.py >
docs/reference.md`) and a test fails when the two disagree, so what is here is what the code does.
The pages linked from each section explain when to use what.

"""


def _cell(text: str) -> str:
    """Text fit for one markdown table cell: reST roles and literals as markdown, on one line."""
    text = re.sub(r":(?:class|func|meth):`~(?:[\w.]+\.)?(\w+)`", r"`\1`", text)
    text = re.sub(r":(?:mod|class|func|meth):`([\w.]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    return " ".join(text.split()).replace("|", "\\|")


def options_section() -> str:
    from torchx_airflow.settings.options import options_markdown

    return (
        "## `[torchx]` options\n\n"
        "Set in `airflow.cfg` or as `AIRFLOW__TORCHX__<OPTION>`; a task's parameter wins over its "
        "connection's extra, which wins over the option ([Configuration](configuration.md)).\n\n"
        f"{options_markdown()}\n"
    )


def _schema_type(schema: dict[str, Any]) -> str:
    kinds = schema.get("type", "string")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    shown = " or ".join(kind for kind in kinds if kind != "null")
    if "enum" in schema:
        shown += ": " + ", ".join(f"`{value}`" for value in schema["enum"] if value is not None)
    return shown


def connections_section() -> str:
    from torchx_airflow.get_provider_info import get_provider_info

    parts = [
        "## Connection fields\n\n"
        "The fields of each connection type's form; in JSON (`AIRFLOW_CONN_<ID>`, `airflow connections "
        "add --conn-extra`) each extra field is a key of `extra` ([Connections](connections.md)).\n"
    ]
    for connection in get_provider_info()["connection-types"]:
        rows = [
            f"\n### `{connection['connection-type']}` ({connection['hook-name']})\n",
            "| field | form label | type | default | what it sets |",
            "| --- | --- | --- | --- | --- |",
        ]
        behaviour = connection.get("ui-field-behaviour", {})
        for field, label in behaviour.get("relabeling", {}).items():
            hint = behaviour.get("placeholders", {}).get(field, "")
            rows.append(f"| `{field}` (standard) | {_cell(label)} | string | unset | {_cell(hint)} |")
        for name, field in connection["conn-fields"].items():
            default = field["schema"].get("default")
            shown = (
                "unset"
                if default is None
                else f"`{str(default).lower() if isinstance(default, bool) else default}`"
            )
            rows.append(
                f"| `extra.{name}` | {_cell(field['label'])} | {_schema_type(field['schema'])} | {shown} "
                f"| {_cell(field['description'])} |"
            )
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts) + "\n"


def param_docs(cls: type) -> dict[str, str]:
    """``name -> text`` of the ``:param name: text`` entries of ``cls``'s docstring."""
    doc = inspect.getdoc(cls) or ""
    found: dict[str, str] = {}
    for match in re.finditer(r"^:param (\w+): (.*?)(?=^:param |^\S|\Z)", doc, re.M | re.S):
        found[match.group(1)] = match.group(2)
    return found


def _default(parameter: inspect.Parameter) -> str:
    if parameter.name == "deferrable":  # read from the Airflow config when the module is imported
        return "`[operators] default_deferrable`"
    if parameter.default is inspect.Parameter.empty:
        return "required"
    if parameter.default is None:
        return "unset"
    return f"`{parameter.default!r}`"


def operator_parameters(cls: type) -> list[tuple[str, str, str]]:
    """``(name, default, text)`` of each keyword parameter ``cls.__init__`` adds to its base's."""
    docs = param_docs(cls)
    rows = []
    for parameter in inspect.signature(cls.__init__).parameters.values():  # type: ignore[misc]
        if parameter.name == "self" or parameter.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        rows.append((parameter.name, _default(parameter), docs.get(parameter.name, "")))
    return rows


def operators_section() -> str:
    parts = [
        "## Operator parameters\n\n"
        "Each operator's own parameters (`TorchXOperator` also takes every `TorchXDryRunOperator` "
        "parameter; all take Airflow's `BaseOperator` ones). A setting left unset is the connection's, "
        "else the `[torchx]` option's ([Operators, sensor and hooks](operators.md)).\n"
    ]
    for path in OPERATORS:
        module, _, name = path.rpartition(".")
        cls = getattr(__import__(module, fromlist=[name]), name)
        rows = [f"\n### `{name}`\n", "| parameter | default | what it sets |", "| --- | --- | --- |"]
        rows += [
            f"| `{param}` | {_cell(default)} | {_cell(text)} |"
            for param, default, text in operator_parameters(cls)
        ]
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts) + "\n"


def environment_section() -> str:
    rows = [
        "## Environment variables\n",
        "What the provider puts in a job's environment, what it reads, and what the deployment sets "
        "([Security](security.md) says which worker variables a job inherits).\n",
        "| variable | set by | read by | what it holds |",
        "| --- | --- | --- | --- |",
    ]
    for name, setter, reader, text in ENVIRONMENT:
        names = ", ".join(f"`{one.strip()}`" for one in name.split(","))
        rows.append(f"| {names} | {_cell(setter)} | {_cell(reader)} | {_cell(text)} |")
    return "\n".join(rows) + "\n"


def reference_markdown() -> str:
    """The whole of docs/reference.md."""
    return HEADER + options_section() + connections_section() + operators_section() + environment_section()


if __name__ == "__main__":
    sys.stdout.write(reference_markdown())
