"""Every bad input is a named error: the table of what a user may type wrong and what they are told.

Each row gives a bad value and two fragments the message must hold: the value as shown, and the
fix. Connection rows are tried twice, the ways Airflow and the provider meet them: "Test" through
``Connection.get_hook().test_connection()`` (the UI's, REST API's and CLI's path) must answer
``(False, message)``, and the provider's own path before submission (the hook's dry run, the
task's tracker set) must raise the same error. No message may show a secret.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from airflow.sdk import Connection
from torchx.schedulers import get_scheduler_factories

from torchx_airflow.apps import build_app_from_component, normalize_component_args
from torchx_airflow.exceptions import TorchXInputError
from torchx_airflow.hooks.torchx import TorchXHook
from torchx_airflow.hooks.tracker import trackers_for
from torchx_airflow.schedulers.run_options import RunOptionValueError, typed_value

SECRET = "Bad-Input-Secret-7731"
# An int run option in this TorchX: aws_batch's priority in the release; main moved aws_batch out of
# the builtins, and its kubernetes scheduler has int options.
INT_SCHEDULER, INT_OPTION = (
    ("aws_batch", "priority")
    if "aws_batch" in get_scheduler_factories()
    else ("kubernetes", "reserved_millicpu")
)
CONN_ID = "bad_input_conn"
TX, FS, ML = "torchx", "torchx_fsspec", "mlflow"


def row(conn_type: str, fields: dict[str, Any], shown: str, fix: str, id: str):  # noqa: A002
    return pytest.param(conn_type, fields, shown, fix, id=f"{conn_type}-{id}")


CONNECTION_ROWS = [
    # every type: an extra key it does not have (a typo would silently mean the default)
    row(TX, {"extra": {"schedular": "slurm"}}, "'schedular'", "did you mean 'scheduler'?", "extra-key"),
    row(
        FS,
        {"extra": {"root": "/r", "storage_option": {}}},
        "'storage_option'",
        "'storage_options'?",
        "extra-key",
    ),
    row(ML, {"host": "http://m", "extra": {"experimnet": "x"}}, "'experimnet'", "'experiment'?", "extra-key"),
    # torchx: scheduler
    row(
        TX,
        {"extra": {"scheduler": 3}},
        "3 is not of type",
        "Write it as: TorchX scheduler",
        "scheduler-not-str",
    ),
    row(TX, {"extra": {"scheduler": "slurmm"}}, "'slurmm'", "Did you mean 'slurm'?", "scheduler-typo"),
    # torchx: cfg as a whole
    row(
        TX,
        {"extra": {"cfg": "{not json"}},
        "'{not json'",
        'Write it as: Scheduler run options as JSON, e.g. {"',
        "cfg-json",
    ),
    row(TX, {"extra": {"cfg": ["a"]}}, "['a']", 'e.g. {"partition": "gpu"}', "cfg-not-object"),
    row(TX, {"extra": {"cfg": {"log_dri": "/tmp"}}}, "['log_dri']", "Did you mean 'log_dir'?", "cfg-key"),
    row(
        TX,
        {"extra": {"scheduler": "kubernetes", "cfg": {}}},
        "Required run option: queue",
        "Set it in extra 'cfg' of connection",
        "cfg-required-missing",
    ),
    # torchx: each value type of the run options
    row(TX, {"extra": {"cfg": {"prepend_cwd": "maybe"}}}, "'maybe'", "Write true or false", "bool-word"),
    row(TX, {"extra": {"cfg": {"prepend_cwd": 1}}}, "got 1 (int)", "Write true or false", "bool-number"),
    row(
        TX,
        {"extra": {"scheduler": INT_SCHEDULER, "cfg": {"queue": "q", INT_OPTION: "high"}}},
        "'high'",
        "JSON number, e.g. 4",
        "int-word",
    ),
    row(
        TX,
        {"extra": {"scheduler": INT_SCHEDULER, "cfg": {"queue": "q", INT_OPTION: 1.5}}},
        "got 1.5 (float)",
        "JSON number, e.g. 4",
        "int-fraction",
    ),
    row(
        TX,
        {"extra": {"scheduler": "local_docker", "cfg": {"copy_env": [1, 2]}}},
        "[1, 2]",
        'e.g. ["A", "B"] or "A,B"',
        "list-items",
    ),
    row(
        TX,
        {"extra": {"scheduler": "local_docker", "cfg": {"env": "A=1"}}},
        "'A=1'",
        '"KEY:value,OTHER:value"',
        "dict-string",
    ),
    row(
        TX,
        {"extra": {"scheduler": "slurm", "cfg": {"partition": 5}}},
        "got 5 (int)",
        'JSON string, e.g. "5"',
        "str-number",
    ),
    # torchx: trackers
    row(
        TX,
        {"extra": {"trackers": "[oops"}},
        "'[oops'",
        "Write it as: Ids of the torchx_fsspec",
        "trackers-json",
    ),
    row(
        TX,
        {"extra": {"trackers": {"a": 1}}},
        "{'a': 1}",
        "Write it as: Ids of the torchx_fsspec",
        "trackers-object",
    ),
    # torchx: prices
    row(TX, {"extra": {"prices": "{cpu"}}, "'{cpu'", 'e.g. {"cpu_hour": 0.05', "prices-json"),
    row(TX, {"extra": {"prices": [0.05]}}, "[0.05] is not of type", 'e.g. {"cpu_hour"', "prices-not-object"),
    row(TX, {"extra": {"prices": {"cpu_hours": 1}}}, "'cpu_hours'", "Did you mean 'cpu_hour'?", "prices-key"),
    row(TX, {"extra": {"prices": {"cpu_hour": -1}}}, "got -1", "0 or more", "prices-negative"),
    row(TX, {"extra": {"prices": {"cpu_hour": "5"}}}, "got '5'", "a number", "prices-text"),
    row(
        TX,
        {"extra": {"prices": {"gpu_hour": {"a100": True}}}},
        "'gpu_hour.a100' must be a price",
        "got True",
        "prices-gpu-bool",
    ),
    row(
        TX,
        {"extra": {"prices": {"currency": "EUR"}}},
        "has no price",
        "'cpu_hour', 'gpu_hour'",
        "prices-none",
    ),
    row(
        TX, {"extra": {"prices": {"cpu_hour": 1, "currency": 3}}}, "got 3", 'such as "USD"', "prices-currency"
    ),
    # torchx: cache defaults
    row(
        TX,
        {"extra": {"cache": "yes"}},
        "'yes' is not of type 'boolean'",
        "Write it as: Tasks whose",
        "cache-not-bool",
    ),
    row(
        TX,
        {"extra": {"cache_ttl": -5}},
        "-5 is less than",
        "Write it as: Seconds a cached",
        "cache_ttl-negative",
    ),
    row(
        TX,
        {"extra": {"infrastructure_retries": "x"}},
        "'x' is not of type",
        "resubmitted",
        "infrastructure_retries-text",
    ),
    # torchx: numbers that are not finite (JSON's Infinity and NaN parse as floats)
    row(TX, {"extra": {"outage_timeout": "inf"}}, "got 'inf'", "e.g. 1800", "outage_timeout-inf"),
    row(TX, {"extra": {"outage_timeout": float("nan")}}, "got nan", "e.g. 1800", "outage_timeout-nan"),
    row(TX, {"extra": {"cache_ttl": float("inf")}}, "got inf", "e.g. 604800", "cache_ttl-inf"),
    # torchx_fsspec: root
    row(FS, {"extra": {}}, "got None", "AIRFLOW_CONN_TORCHX_FSSPEC_DEFAULT=", "root-missing"),
    row(FS, {"extra": {"root": 5}}, "5 is not of type", "s3://bucket/prefix", "root-not-str"),
    row(FS, {"extra": {"root": "runs/here"}}, "'runs/here'", "Give an absolute path", "root-relative"),
    row(FS, {"extra": {"root": "s4://b/runs"}}, "'s4'", "Did you mean 's3'?", "root-protocol"),
    # torchx_fsspec: storage_options (the value may hold credentials: never shown)
    row(
        FS,
        {"extra": {"root": "/data/runs", "storage_options": '{"secret": "' + SECRET}},
        "extra 'storage_options' is not valid JSON",
        'Write it as: fsspec options as JSON, e.g. {"endpoint_url"',
        "options-json",
    ),
    row(
        FS,
        {"extra": {"root": "/data/runs", "storage_options": [SECRET]}},
        "extra 'storage_options': the value does not match type ['object', 'null']",
        'Write it as: fsspec options as JSON, e.g. {"endpoint_url"',
        "options-not-object",
    ),
    # torchx_fsspec: login/password per protocol
    row(
        FS,
        {"extra": {"root": "/data/runs"}, "password": SECRET},
        "protocol 'file'",
        "Clear them",
        "file-password",
    ),
    row(
        FS,
        {"extra": {"root": "s3://b/runs"}, "login": "AKIAEXAMPLE"},
        "the login is set and the password is empty",
        "Set the password too",
        "s3-key-only",
    ),
    row(
        FS,
        {"extra": {"root": "s3://b/runs", "storage_options": {"key": "K"}}, "login": "L", "password": SECRET},
        "storage_options' key 'key'",
        "Keep one of them",
        "s3-key-twice",
    ),
    row(
        FS,
        {"extra": {"root": "abfs://c/runs", "storage_options": {"account_key": SECRET}}, "password": SECRET},
        "key 'account_key'",
        "Keep one of them",
        "abfs-secret-twice",
    ),
    # mlflow: host and port
    row(ML, {}, "got an empty host", "AIRFLOW_CONN_MLFLOW_DEFAULT=", "host-empty"),
    row(ML, {"host": "http//mlflow"}, "'http//mlflow'", "e.g. http://mlflow:5000", "host-typo"),
    row(ML, {"host": "ftp://mlflow"}, "scheme 'ftp'", "Use one of", "host-scheme"),
    row(ML, {"host": "mlflow:5000", "port": 5001}, "port field is 5001", "Keep one of them", "port-twice"),
    row(
        ML,
        {"host": "http://mlflow:5000", "port": 5001},
        "port field is 5001",
        "Put the port in the URI",
        "port-unused",
    ),
    row(ML, {"host": "mlflow", "port": 70000}, "port 70000", "from 1 to 65535", "port-range"),
    # mlflow: experiment, login/password
    row(
        ML,
        {"host": "http://m", "extra": {"experiment": 5}},
        "5 is not of type",
        "Write it as: MLflow experiment",
        "exp",
    ),
    row(
        ML,
        {"host": "http://m:5000", "password": SECRET},
        "the password is set and the login is empty",
        "Set the login too",
        "password-only",
    ),
    row(
        ML,
        {"host": "sqlite:////tmp/m.db", "login": "u", "password": SECRET},
        "'sqlite:////tmp/m.db' is not an http(s) URI",
        "Clear them",
        "auth-on-sqlite",
    ),
]


def _connection(conn_type: str, fields: dict[str, Any]) -> Connection:
    extra = fields.get("extra")
    return Connection(
        conn_id=CONN_ID,
        conn_type=conn_type,
        host=fields.get("host"),
        port=fields.get("port"),
        login=fields.get("login"),
        password=fields.get("password"),
        extra=json.dumps(extra) if extra is not None else None,
    )


def _before_submission(conn_type: str) -> None:
    """What the operator does with the connection before it submits anything."""
    if conn_type != "torchx":
        trackers_for([CONN_ID])
        return
    hook = TorchXHook(CONN_ID)
    trackers_for(hook.settings.trackers)
    hook.dryrun(build_app_from_component("utils.echo", ["--msg", "never submitted"]))


def _assert_named(message: str, shown: str, fix: str) -> None:
    assert shown in message, message
    assert fix in message, message
    assert SECRET not in message, message


@pytest.mark.parametrize(("conn_type", "fields", "shown", "fix"), CONNECTION_ROWS)
def test_bad_connection_fails_test_with_the_value_and_the_fix(conn_type, fields, shown, fix):
    conn = _connection(conn_type, fields)
    ok, message = conn.test_connection()  # Connection.get_hook(), then the hook's test_connection()
    assert ok is False
    _assert_named(message, shown, fix)
    assert f"'{CONN_ID}'" in message or "Required run option" in message


@pytest.mark.parametrize(("conn_type", "fields", "shown", "fix"), CONNECTION_ROWS)
def test_bad_connection_raises_before_submission(monkeypatch, conn_type, fields, shown, fix):
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", _connection(conn_type, fields).as_json())
    with pytest.raises(TorchXInputError) as err:
        _before_submission(conn_type)
    _assert_named(str(err.value), shown, fix)
    assert f"'{CONN_ID}'" in str(err.value)


def test_a_tracker_the_torchx_connection_names_is_checked_by_test(monkeypatch):
    conn = _connection("torchx", {"extra": {"trackers": ["no_such_tracker_conn"]}})
    ok, message = conn.test_connection()
    assert not ok
    _assert_named(message, "'no_such_tracker_conn'", "Create a connection of type")
    assert f"Connection '{CONN_ID}': extra 'trackers' names 'no_such_tracker_conn'" in message


# A run option type that no scheduler of this TorchX release declares (float), and the other types
# directly: the converter the hook uses for every scheduler's options.
RUN_OPTION_ROWS = [
    pytest.param(float, "half", "'half'", "e.g. 0.5", id="float-word"),
    pytest.param(float, True, "got True (bool)", "e.g. 0.5", id="float-bool"),
    pytest.param(int, True, "got True (bool)", "e.g. 4", id="int-bool"),
    pytest.param(bool, "", "got ''", "Write true or false", id="bool-empty"),
    pytest.param(bool, ["yes"], "['yes']", "Write true or false", id="bool-list"),
    pytest.param(list[str], {"a": "b"}, "{'a': 'b'}", '"A,B"', id="list-object"),
    pytest.param(dict[str, str], {"A": 1}, "{'A': 1}", '{"KEY": "value"}', id="dict-values"),
    pytest.param(str, ["gpu"], "['gpu']", "JSON string", id="str-list"),
]


@pytest.mark.parametrize(("opt_type", "value", "shown", "fix"), RUN_OPTION_ROWS)
def test_run_option_value_of_the_wrong_type(opt_type, value, shown, fix):
    with pytest.raises(RunOptionValueError) as err:
        typed_value("opt", value, opt_type)
    _assert_named(str(err.value), shown, fix)
    assert "run option 'opt'" in str(err.value)


COMPONENT_ROWS = [
    pytest.param(
        "utils.echo", '--msg "unclosed', "'--msg \"unclosed'", "Close the quote", id="args-unbalanced-quote"
    ),
    pytest.param("utils.echo", "--msg trailing\\", "'--msg trailing\\\\'", "Close the", id="args-escape"),
    pytest.param("utils.echo", b"--msg", "b'--msg'", "Pass them as on the torchx", id="args-bytes"),
    pytest.param("utils.echo", {"msg": "hi"}, "{'msg': 'hi'}", "Pass them as", id="args-object"),
    pytest.param("utils.echo", ["--msg", None], "None", "Pass every argument as a string", id="args-item"),
    pytest.param("utils.echo", ["--nope"], "['--nope']", "Fix them to match its usage", id="args-unknown"),
    pytest.param("utils.ech0", [], "'utils.ech0'", "`torchx builtins` lists them", id="component-unknown"),
    pytest.param("", [], "got ''", "Use a builtin such as 'utils.python'", id="component-empty"),
    pytest.param(5, [], "got 5", "Use a builtin such as 'utils.python'", id="component-not-str"),
]


@pytest.mark.parametrize(("component", "component_args", "shown", "fix"), COMPONENT_ROWS)
def test_bad_component_or_arguments(component, component_args, shown, fix):
    with pytest.raises(TorchXInputError) as err:
        build_app_from_component(component, normalize_component_args(component_args))
    _assert_named(str(err.value), shown, fix)


# Operator parameters (the operator's own checks; rows for the errors it raises today): each is
# raised by the constructor or on the way to the dry run, before anything is submitted.
OPERATOR_ROWS = [
    pytest.param({}, "got component=None", "give exactly one of 'component'", id="no-component-no-app"),
    pytest.param({"component_args": '--msg "x'}, "'--msg \"x'", "Close the quote", id="component_args-quote"),
    pytest.param({"tracker_conn_ids": 5}, "got 5", '["torchx_fsspec_default"', id="tracker_conn_ids-int"),
    pytest.param({"cfg": {"prepend_cwd": "maybe"}}, "the task's 'cfg'", "Write true or false", id="cfg-bool"),
    pytest.param({"scheduler": "slurmm"}, "the task's 'scheduler'", "Did you mean 'slurm'?", id="scheduler"),
    pytest.param({"poll_interval": 0}, "got 0", "positive, finite number of seconds", id="poll_interval"),
    pytest.param({"max_log_lines": -1}, "got -1", "0 or more", id="max_log_lines"),
    pytest.param(
        {"max_cost": 0}, "max_cost must be a positive number, got 0", "max_cost=25.0", id="max_cost"
    ),
    pytest.param(
        {"expected_duration": "1h"},
        "got '1h'",
        "expected_duration=timedelta(hours=2)",
        id="expected_duration",
    ),
    pytest.param({"infrastructure_retries": -1}, "got -1", "Give e.g. 3", id="infrastructure_retries"),
    pytest.param({"cache_ignore_args": "--out"}, "got '--out'", '["--out=*", "-v"', id="cache_ignore_args"),
    pytest.param({"cache_ttl": 0}, "got 0", "cache_ttl=timedelta(days=7)", id="cache_ttl"),
    # numbers that are not finite: a wait that ends at once or never, a result kept forever
    pytest.param(
        {"tracker_timeout": float("nan")}, "got nan", "tracker_timeout=60", id="tracker_timeout-nan"
    ),
    pytest.param({"poll_interval": float("inf")}, "got inf", "poll_interval=60", id="poll_interval-inf"),
    pytest.param({"outage_timeout": float("inf")}, "got inf", "Give e.g. 1800", id="outage_timeout-inf"),
    pytest.param({"cache_ttl": float("inf")}, "got inf", "cache_ttl=604800", id="cache_ttl-inf"),
    pytest.param({"cache_ttl": "1e308x"}, "got '1e308x'", "cache_ttl=604800", id="cache_ttl-text"),
    pytest.param({"tracker_timeout": "soon"}, "got 'soon'", "tracker_timeout=60", id="tracker_timeout-text"),
    pytest.param({"max_cost": float("inf")}, "got inf", "max_cost=25.0", id="max_cost-inf"),
    pytest.param({"cache": "false"}, "got 'false'", "cache=False, without quotes", id="cache-string"),
    # env names: a ',' or '=' would split srun's --export list into other variables
    pytest.param({"env": {"A,LD_PRELOAD": "x"}}, "'A,LD_PRELOAD'", "Rename it", id="env-name-comma"),
    pytest.param({"env": {"K=V": "x"}}, "'K=V'", "Rename it", id="env-name-equals"),
    pytest.param({"env": {"1ST": "x"}}, "'1ST'", "not starting with a digit", id="env-name-digit"),
    pytest.param(
        {"cache": True, "wait_for_completion": False},
        "cache=True needs wait_for_completion=True",
        "Set wait_for_completion=True, or cache=False",
        id="cache-without-wait",
    ),
]


def test_a_number_given_as_a_string_is_that_number():
    from torchx_airflow.operators.torchx import TorchXOperator

    op = TorchXOperator(
        task_id="strings",
        component="utils.echo",
        tracker_conn_ids=[],
        tracker_timeout="60",
        poll_interval="2.5",
        outage_timeout="1800",
        cache_ttl="604800",
    )
    numbers = (op.tracker_timeout, op.poll_interval, op.outage_timeout, op.policy_settings.cache_ttl)
    assert numbers == (60.0, 2.5, 1800.0, 604800.0)
    assert all(type(v) is float for v in numbers)


@pytest.mark.parametrize("option", ["poll_interval", "tracker_timeout", "outage_timeout", "cache_ttl"])
@pytest.mark.parametrize("text", ["inf", "nan", "-inf"])
def test_a_site_option_that_is_not_finite_is_refused_naming_it(monkeypatch, option, text):
    from torchx_airflow.exceptions import TorchXConfigError
    from torchx_airflow.settings.resolve import resolve

    monkeypatch.setenv(f"AIRFLOW__TORCHX__{option.upper()}", text)
    with pytest.raises(TorchXConfigError, match=rf"\[torchx\] {option}.*finite number.*got {text}"):
        resolve(option)


def test_a_bad_env_name_in_an_appdef_role_is_refused_before_the_dry_run():
    from torchx.specs import AppDef, Role

    from torchx_airflow.operators.torchx import TorchXOperator

    role = Role(name="trainer", image="/tmp", entrypoint="true", env={"OK": "1", "NCCL,X": "1"})
    op = TorchXOperator(task_id="bad_role_env", app=AppDef(name="a", roles=[role]), tracker_conn_ids=[])
    with pytest.raises(TorchXInputError) as err:
        op.build_app()
    _assert_named(str(err.value), "the env of role 'trainer': 'NCCL,X'", "Rename it")


@pytest.mark.parametrize(("kwargs", "shown", "fix"), OPERATOR_ROWS)
def test_bad_operator_parameter(kwargs, shown, fix):
    from torchx_airflow.operators.torchx import TorchXOperator

    if kwargs:
        kwargs = {"component": "utils.echo", "tracker_conn_ids": [], **kwargs}
    with pytest.raises(TorchXInputError) as err:
        op = TorchXOperator(task_id="bad_param", **kwargs)
        op.hook.dryrun(op.build_app())
    _assert_named(str(err.value), shown, fix)
