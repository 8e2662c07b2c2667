"""Provider metadata Airflow reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from torchx_airflow import __version__
from torchx_airflow.settings.conn_fields import CONN_FIELDS
from torchx_airflow.settings.options import provider_config


def get_provider_info() -> dict[str, Any]:
    """Connection types, hooks, operators, sensors and extra links of the TorchX provider."""
    integration = "PyTorch TorchX"
    return {
        "package-name": "torchx-airflow",
        "name": "PyTorch TorchX",
        "description": "Launch, dry-run and wait on `PyTorch TorchX <https://pytorch.org/torchx>`__ apps "
        "on local processes, Docker, Slurm, Kubernetes and every other scheduler the installed TorchX has.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": integration,
                "external-doc-url": "https://pytorch.org/torchx/latest/",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": integration,
                "python-modules": ["torchx_airflow.hooks.torchx", "torchx_airflow.hooks.tracker"],
            }
        ],
        "operators": [
            {
                "integration-name": integration,
                "python-modules": [
                    "torchx_airflow.operators.torchx",
                    "torchx_airflow.operators.dryrun",
                    "torchx_airflow.operators.promote",
                ],
            }
        ],
        "task-decorators": [{"name": "torchx", "class-name": "torchx_airflow.decorators.torchx.torchx_task"}],
        "sensors": [{"integration-name": integration, "python-modules": ["torchx_airflow.sensors.torchx"]}],
        "triggers": [{"integration-name": integration, "python-modules": ["torchx_airflow.triggers.torchx"]}],
        "extra-links": [
            "torchx_airflow.links.torchx.TorchXAppLink",
            "torchx_airflow.links.torchx.TorchXTrackerLink",
        ],
        "connection-types": [
            {
                "hook-class-name": "torchx_airflow.hooks.torchx.TorchXHook",
                "hook-name": "TorchX",
                "connection-type": "torchx",
                "conn-fields": CONN_FIELDS["torchx"],
                # host and password reach the scheduler's API (SchedulerCredentials): Kubernetes only
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "login", "port"],
                    "relabeling": {"host": "API server (kubernetes)", "password": "Token (kubernetes)"},
                    "placeholders": {
                        "host": "empty: the kubeconfig's server, e.g. https://10.0.0.1:6443",
                        "password": "empty: the kubeconfig's user or the pod's service account",
                    },
                },
            },
            {
                "hook-class-name": "torchx_airflow.hooks.tracker.TorchXFsspecHook",
                "hook-name": "TorchX tracker store (fsspec)",
                "connection-type": "torchx_fsspec",
                "conn-fields": CONN_FIELDS["torchx_fsspec"],
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "port"],
                    "relabeling": {"login": "Access key / user name", "password": "Secret key / password"},
                    "placeholders": {
                        "login": "optional: s3 key, abfs account name, sftp user name",
                        "password": "optional: s3 secret, abfs account key, sftp password",
                    },
                },
            },
            {
                "hook-class-name": "torchx_airflow.hooks.tracker.MlflowTrackerHook",
                "hook-name": "MLflow",
                "connection-type": "mlflow",
                "conn-fields": CONN_FIELDS["mlflow"],
                "ui-field-behaviour": {
                    "hidden-fields": ["schema"],
                    "relabeling": {"host": "Tracking URI", "login": "Username", "password": "Password"},
                    "placeholders": {
                        "host": "http://mlflow:5000 or sqlite:////data/mlflow.db",
                        "login": "optional: basic-auth user",
                        "password": "optional: basic-auth password",
                    },
                },
            },
        ],
        "config": provider_config(),
    }
