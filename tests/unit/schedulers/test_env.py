"""What a job's environment is made of (torchx_airflow/schedulers/env.py): `env_passthrough`, the launch
environment, the worker's own environment restored, and which variables hold secrets."""

from __future__ import annotations

import json

import pytest
from airflow.sdk import Connection

from torchx_airflow.exceptions import TorchXConnectionError
from torchx_airflow.hooks.torchx import TorchXHook
from torchx_airflow.schedulers.env import (
    BASE_ENV,
    launch_env,
    parse_env_passthrough,
    secret_env_names,
    swapped_environ,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ()),
        ("", ()),
        (["CUDA_HOME", "NCCL_*"], ("CUDA_HOME", "NCCL_*")),
        ("CUDA_HOME, NCCL_*", ("CUDA_HOME", "NCCL_*")),
        (["APP", "AWS_*"], ("APP", "AWS_*")),
    ],
)
def test_env_passthrough_accepts_names_and_prefixes(value, expected):
    assert parse_env_passthrough("tx", value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["AIRFLOW_CONN_DB"], "may not pass 'AIRFLOW_CONN_DB' to jobs"),
        (["airflow__core__fernet_key"], "may not pass 'airflow__core__fernet_key'"),
        (["AIR*"], "may not pass 'AIR*'"),
        (["A*"], "may not pass 'A*'"),
        (["BAD-NAME"], "'BAD-NAME' in extra 'env_passthrough' is not an environment variable name"),
        ([1], "must be a list of environment variable names, got [1]"),
        ({"PATH": 1}, "must be a list of environment variable names"),
    ],
)
def test_env_passthrough_refuses_airflow_names_and_non_names(value, message):
    with pytest.raises(TorchXConnectionError, match="Connection 'tx'") as err:
        parse_env_passthrough("tx", value)
    assert message in str(err.value)


def test_env_passthrough_is_read_from_the_connection_through_get_hook(monkeypatch):
    extra = {"scheduler": "slurm", "env_passthrough": ["NCCL_*"]}
    conn = Connection(conn_id="tx_env", conn_type="torchx", extra=json.dumps(extra))
    monkeypatch.setenv("AIRFLOW_CONN_TX_ENV", conn.as_json())
    hook = conn.get_hook()
    assert isinstance(hook, TorchXHook)
    assert hook.settings.env_passthrough == ("NCCL_*",)
    bad = Connection(
        conn_id="tx_bad", conn_type="torchx", extra=json.dumps({"env_passthrough": ["AIRFLOW_VAR_X"]})
    )
    monkeypatch.setenv("AIRFLOW_CONN_TX_BAD", bad.as_json())
    ok, message = bad.get_hook().test_connection()
    assert not ok and "may not pass 'AIRFLOW_VAR_X' to jobs" in message


def test_launch_env_keeps_base_passthrough_and_scheduler_variables_only():
    worker = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "LC_ALL": "C.UTF-8",
        "AIRFLOW_CONN_DB": "postgres://u:p@db/airflow",
        "AIRFLOW_VAR_TOKEN": "t",
        "AIRFLOW__CORE__FERNET_KEY": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "NCCL_DEBUG": "INFO",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "SBATCH_PARTITION": "gpu",
    }
    env = launch_env(worker, ["NCCL_*", "AIRFLOW*"], ["SLURM_*", "SBATCH_*"])
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "LC_ALL": "C.UTF-8",
        "NCCL_DEBUG": "INFO",
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "SBATCH_PARTITION": "gpu",
    }
    assert {"PATH", "HOME", "LANG", "TMPDIR", "VIRTUAL_ENV"} <= set(BASE_ENV)


def test_launch_env_leaves_behind_a_matched_worker_variable_whose_name_is_no_identifier():
    # a "," or "=" in a name would split srun's --export list into other variables
    worker = {"NCCL_DEBUG": "INFO", "NCCL_A,LD_PRELOAD": "/tmp/x.so", "NCCL_B=C": "1"}
    assert launch_env(worker, ["NCCL_*"]) == {"NCCL_DEBUG": "INFO"}


def test_swapped_environ_restores_the_worker_environment(monkeypatch):
    import os

    monkeypatch.setenv("AIRFLOW_VAR_CANARY", "canary")
    before = dict(os.environ)
    with swapped_environ({"PATH": "/bin"}):
        assert dict(os.environ) == {"PATH": "/bin"}
    assert dict(os.environ) == before


def test_secret_env_names_by_name_by_masked_value_and_by_request():
    from torchx_airflow.secrets import mask_secret

    mask_secret("masked-value-123456")
    env = {
        "API_TOKEN": "t0k",
        "MLFLOW_TRACKING_PASSWORD": "p",
        "TORCHX_TRACKER_AIRFLOW_FSSPEC_CONFIG": "base64:abc-masked-value-123456-def",
        "GIVEN": "v",
        "PLAIN": "hello",
        "EMPTY_SECRET": "",
    }
    assert secret_env_names(env, ["GIVEN", "NOT_IN_ENV"]) == {
        "API_TOKEN",
        "MLFLOW_TRACKING_PASSWORD",
        "TORCHX_TRACKER_AIRFLOW_FSSPEC_CONFIG",
        "GIVEN",
    }
