"""Provider metadata Airflow reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from torchx_airflow import __version__
from torchx_airflow.settings.options import provider_config

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
                    "env_passthrough": {
                        "label": "Env passthrough",
                        "schema": {"type": ["array", "null"], "items": {"type": "string"}},
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
                    "cache": {
                        "label": "Cache runs",
                        "schema": {"type": ["boolean", "null"], "default": False},
                        "description": "Tasks whose inputs match an earlier run that succeeded return its "
                        "result without submitting (a task's cache= wins)",
                    },
                    "cache_ttl": {
                        "label": "Cache record lifetime (s)",
                        "schema": {"type": ["number", "null"], "exclusiveMinimum": 0},
                        "description": "Seconds a cached result is reused (empty: 30 days; a task's "
                        "cache_ttl= wins)",
                    },
                    "cache_scope": {
                        "label": "Cache scope",
                        "schema": {"type": ["string", "null"], "enum": ["dag", "deployment", None]},
                        "description": "dag: cached results only within a DAG; deployment: shared by every "
                        "DAG (empty: [torchx] cache_scope, dag)",
                    },
                    "checkpoint_root": {
                        "label": "Checkpoint root",
                        "schema": _STRING,
                        "description": "Directory (or URL prefix) a resubmitted job may resume from (empty: "
                        "[torchx] checkpoint_root, else the directories the task's arguments name)",
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
                "conn-fields": {
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
                "conn-fields": {
                    "experiment": {
                        "label": "Experiment",
                        "schema": {**_STRING, "default": "torchx"},
                        "description": "MLflow experiment the runs go to (created if missing)",
                    },
                },
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
