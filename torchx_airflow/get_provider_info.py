"""Provider metadata Airflow reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from torchx_airflow import __version__

_STRING = {"type": ["string", "null"]}


def get_provider_info() -> dict[str, Any]:
    """Connection types, hooks, operators, sensors and extra links of the TorchX provider."""
    integration = "PyTorch TorchX"
    return {
        "package-name": "torchx-airflow",
        "name": "PyTorch TorchX",
        "description": "Launch, dry-run and wait on `PyTorch TorchX <https://pytorch.org/torchx>`__ apps "
        "on local processes, Slurm, Kubernetes, AWS Batch and the other TorchX schedulers.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": integration,
                "external-doc-url": "https://pytorch.org/torchx/latest/",
                "tags": ["software"],
            }
        ],
        "hooks": [{"integration-name": integration, "python-modules": ["torchx_airflow.hooks.torchx"]}],
        "operators": [
            {"integration-name": integration, "python-modules": ["torchx_airflow.operators.torchx"]}
        ],
        "sensors": [{"integration-name": integration, "python-modules": ["torchx_airflow.sensors.torchx"]}],
        "extra-links": ["torchx_airflow.links.torchx.TorchXAppLink"],
        "connection-types": [
            {
                "hook-class-name": "torchx_airflow.hooks.torchx.TorchXHook",
                "hook-name": "TorchX",
                "connection-type": "torchx",
                "conn-fields": {
                    "scheduler": {
                        "label": "Scheduler",
                        "schema": {**_STRING, "default": "local_cwd"},
                        "description": "TorchX scheduler: local_cwd, slurm, kubernetes, aws_batch, ...",
                    },
                    "cfg": {
                        "label": "Run options (cfg)",
                        "schema": {"type": ["object", "null"]},
                        "description": 'Scheduler run options as JSON, e.g. {"partition": "gpu"}',
                    },
                    "trackers": {
                        "label": "Tracker connections",
                        "schema": {"type": ["array", "null"], "items": {"type": "string"}},
                        "description": "Ids of the torchx_fsspec / mlflow connections the app tracks to",
                    },
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "login", "password", "port"],
                    "relabeling": {},
                    "placeholders": {},
                },
            }
        ],
    }
