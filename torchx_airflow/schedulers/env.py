"""The environment a job starts with, on schedulers whose jobs inherit the submitting process's.

local_cwd starts replicas with a copy of the launching process's environment, and ``sbatch``
exports the submitting process's environment to the job. In an Airflow worker that environment
holds every ``AIRFLOW_CONN_*``, ``AIRFLOW_VAR_*`` and ``AIRFLOW__*`` (metadata DB URL, JWT secret,
fernet key). The hook therefore submits to those schedulers with a clean environment: the
``BASE_ENV`` variables, the connection's ``env_passthrough`` names, the scheduler client's own
variables, and the secret env values taken out of the scheduler's request. Everything else a job
gets is what its task configured (the role env).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from torchx_airflow.exceptions import TorchXConnectionError
from torchx_airflow.schedulers.base import environ_subset

#: What every job may inherit from the worker: where programs and the home directory are, the
#: locale, the time zone, the scratch directory, the active Python environment, and the worker's
#: telemetry opt-outs (a site that turned MLflow's usage telemetry off turns it off in its jobs).
BASE_ENV: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "TERM",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "DO_NOT_TRACK",
    "MLFLOW_DISABLE_TELEMETRY",
)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")
# os.environ is process-wide: one submission at a time may swap it.
_ENVIRON_LOCK = threading.Lock()


def parse_env_passthrough(conn_id: str, value: Any) -> tuple[str, ...]:
    """The ``env_passthrough`` extra of a ``torchx`` connection: variable names (a trailing ``*``
    matches a prefix), as a list or one comma-separated string. ``AIRFLOW*`` names are refused."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TorchXConnectionError(
            f"Connection {conn_id!r}: extra 'env_passthrough' must be a list of environment variable "
            f'names, got {value!r}. Write it as e.g. ["CUDA_HOME", "NCCL_*"].'
        )
    names = tuple(dict.fromkeys(v.strip() for v in value if v.strip()))
    for name in names:
        if not _NAME.match(name):
            raise TorchXConnectionError(
                f"Connection {conn_id!r}: {name!r} in extra 'env_passthrough' is not an environment "
                "variable name. Use names such as 'CUDA_HOME', or a prefix ending in '*' such as 'NCCL_*'."
            )
        upper = name.upper()
        if upper.startswith("AIRFLOW") or (upper.endswith("*") and "AIRFLOW".startswith(upper[:-1])):
            raise TorchXConnectionError(
                f"Connection {conn_id!r}: extra 'env_passthrough' may not pass {name!r} to jobs: the "
                "worker's AIRFLOW* variables hold connections, variables and Airflow's own secrets. "
                "Remove it; give a job what it needs through the task's 'env' or a tracker connection."
            )
    return names


def launch_env(
    environ: Mapping[str, str], passthrough: Iterable[str] = (), scheduler_patterns: Iterable[str] = ()
) -> dict[str, str]:
    """The part of ``environ`` a job may inherit: ``BASE_ENV``, ``passthrough`` and the scheduler
    client's own variables; never an ``AIRFLOW*`` one."""
    env = environ_subset(environ, (*BASE_ENV, *passthrough, *scheduler_patterns))
    # a worker variable matched by a prefix ("NCCL_*") whose name is no identifier (a "," or "=" in it
    # would split srun's --export list) stays behind
    return {
        name: value
        for name, value in env.items()
        if not name.upper().startswith("AIRFLOW") and _NAME.match(name) and not name.endswith("*")
    }


@contextlib.contextmanager
def swapped_environ(env: Mapping[str, str]) -> Iterator[None]:
    """Run the block with ``os.environ`` holding exactly ``env``; the old one is back afterwards.

    TorchX's local and Slurm schedulers read the launching process's environment while they submit
    (``os.environ.copy()``, ``subprocess.run`` without ``env=``): this is the one way to hand them
    another one through TorchX's public ``Runner.schedule``. Kept as short as the submission.
    """
    with _ENVIRON_LOCK:
        saved = dict(os.environ)
        try:
            os.environ.clear()
            os.environ.update(env)
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


def secret_env_names(env: Mapping[str, str], extra: Iterable[str] = ()) -> set[str]:
    """Names in ``env`` whose values are secrets: ``extra``, names Airflow's secrets masker treats as
    sensitive (``*_PASSWORD``, ``*_TOKEN``...), values holding a secret the masker knows (a tracker
    config with a connection's password in it) and values with a URL password
    (``DATABASE_URL=postgresql://user:pw@db/x``)."""
    from torchx_airflow.secrets import redact_text, should_hide_value_for_key, uri_secrets

    names = {name for name in extra if name in env}
    for name, value in env.items():
        text = str(value)
        if value and (should_hide_value_for_key(name) or uri_secrets(text) or redact_text(text) != text):
            names.add(name)
    return names
