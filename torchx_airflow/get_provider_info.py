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
        "hooks": [
            {
                "integration-name": integration,
                "python-modules": ["torchx_airflow.hooks.torchx", "torchx_airflow.hooks.tracker"],
            }
        ],
        "operators": [
            {
                "integration-name": integration,
                "python-modules": ["torchx_airflow.operators.torchx", "torchx_airflow.operators.dryrun"],
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
        "config": _config(),
    }


def _config() -> dict[str, Any]:
    """The ``[torchx]`` section: site-wide defaults that a connection or a task may override."""

    def option(description: str, type_: str, example: str, default: str) -> dict[str, Any]:
        return {
            "description": description,
            "version_added": "0.1.0",
            "type": type_,
            "example": example,
            "default": default,
        }

    return {
        "torchx": {
            "description": "Defaults of the TorchX provider.",
            "options": {
                "outage_timeout": option(
                    "Seconds a wait on a TorchX app goes on while its scheduler gives no answer (a "
                    "controller restart, an API server failing over), counted from the last good "
                    "answer. A torchx connection's extra outage_timeout and a task's outage_timeout "
                    "override it.",
                    "float",
                    "1800",
                    "600",
                ),
                "infrastructure_retries": option(
                    "Times a TorchX job that the infrastructure ended (Slurm NODE_FAIL, PREEMPTED, "
                    "BOOT_FAIL) is resubmitted within the same task try, resuming from its last "
                    "checkpoint, without using the task's retries. A torchx connection's extra "
                    "infrastructure_retries and a task's infrastructure_retries override it; 0 never "
                    "resubmits.",
                    "integer",
                    "5",
                    "3",
                ),
                "poll_interval": option(
                    "Default seconds between status checks of a TorchXOperator's wait (its "
                    "poll_interval parameter overrides it).",
                    "float",
                    "30",
                    "5",
                ),
                "tracker_timeout": option(
                    "Default seconds a TorchXOperator gives its trackers at each step (its "
                    "tracker_timeout parameter overrides it).",
                    "float",
                    "120",
                    "60",
                ),
                "max_log_lines": option(
                    "Default number of last log lines per replica and stream a TorchXOperator prints "
                    "after a deferred wait (its max_log_lines parameter overrides it).",
                    "integer",
                    "5000",
                    "1000",
                ),
                "min_poll_interval": option(
                    "Shortest interval, in seconds, of the triggerer's shared status query: a "
                    "deferred wait with a shorter poll_interval (a sensor with poke_interval=0) "
                    "is polled this often.",
                    "float",
                    "5",
                    "1",
                ),
            },
        }
    }
