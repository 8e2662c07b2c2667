"""``@task.torchx`` as Airflow sees it: registered through the provider, its return-value contract,
its arguments, and what importing it costs a DAG file. Real runs are in tests/integration and
tests/slurm."""

from __future__ import annotations

import json
import subprocess
import sys

import pendulum
import pytest
from airflow.sdk import DAG, task
from torchx import specs

from tests.conftest import AIRFLOW
from torchx_airflow.decorators.torchx import _TorchXDecoratedOperator, app_from_return, torchx_task
from torchx_airflow.exceptions import TorchXComponentError, TorchXInputError
from torchx_airflow.operators.torchx import TorchXOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def test_task_torchx_is_the_providers_decorator():
    assert task.torchx is torchx_task


def test_airflow_lists_the_decorator():
    out = subprocess.run(
        [AIRFLOW, "providers", "get", "torchx-airflow", "--full", "-o", "json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "torchx_airflow.decorators.torchx.torchx_task" in out


def test_importing_the_decorator_loads_no_scheduler_or_backend_library():
    code = (
        "import json, sys\n"
        "from airflow.sdk import task\n"
        "import torchx_airflow.decorators.torchx\n"
        "task.torchx\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    modules = json.loads(out.strip().splitlines()[-1])
    heavy = ("torchx.schedulers.", "torchx.runner", "torchx.specs", "mlflow", "s3fs", "docker", "torch.")
    assert [m for m in modules if m.startswith(heavy) or m == "torch"] == []


def test_an_appdef_is_run_as_the_operators_app():
    app = specs.AppDef(name="x", roles=[specs.Role(name="r", image="", entrypoint="python")])
    assert app_from_return(app, "t") == (None, None, app)


@pytest.mark.parametrize(
    ("returned", "component", "args"),
    [
        (("utils.echo", ["--msg", "hi"]), "utils.echo", ["--msg", "hi"]),
        (["utils.echo", ("--msg", "hi")], "utils.echo", ["--msg", "hi"]),
        ((" utils.echo ", "--msg hi"), "utils.echo", "--msg hi"),  # one string, split by the operator
        (("dist.ddp", []), "dist.ddp", []),
    ],
)
def test_a_component_and_its_arguments(returned, component, args):
    assert app_from_return(returned, "t") == (component, args, None)


@pytest.mark.parametrize(
    "returned",
    [
        None,
        "utils.echo --msg hi",
        {"component": "utils.echo"},
        ("utils.echo",),
        ("utils.echo", ["--msg"], "extra"),
        ("", ["--msg", "hi"]),
        (3, ["--msg", "hi"]),
        ("utils.echo", {"msg": "hi"}),
    ],
)
def test_anything_else_is_refused_naming_the_value_and_the_fix(returned):
    with pytest.raises(TorchXComponentError) as err:
        app_from_return(returned, "train")
    message = str(err.value)
    assert repr(returned) in message and "'train'" in message
    assert "Return a torchx.specs.AppDef, or a (component, args) pair" in message
    assert isinstance(err.value, TorchXInputError)  # fails at once, without retries


@pytest.mark.parametrize("field", ["component", "component_args", "app"])
def test_the_app_fields_are_not_decorator_arguments(field):
    with DAG("tf_unit_fields", schedule=None, start_date=START), pytest.raises(TorchXComponentError) as err:

        @task.torchx(**{field: "utils.echo"})
        def train():
            return ("utils.echo", [])

        train()
    assert repr([field]) in str(err.value) and "the decorated function returns the app" in str(err.value)


def test_decorated_task_is_a_torchx_operator_with_its_parameters():
    with DAG("tf_unit", schedule=None, start_date=START):

        @task.torchx(
            torchx_conn_id="my_torchx",
            tracker_conn_ids=["mlflow_default"],
            scheduler="slurm",
            cfg={"partition": "debug"},
            env={"A": "1"},
            deferrable=True,
            durable=False,
            poll_interval=2,
        )
        def train(lr: float) -> specs.AppDef:
            return ("utils.echo", ["--msg", str(lr)])

        op = train(0.1).operator
    assert isinstance(op, TorchXOperator) and isinstance(op, _TorchXDecoratedOperator)
    assert op.task_id == "train" and op.custom_operator_name == "@task.torchx"
    assert op.torchx_conn_id == "my_torchx"
    assert (op.tracker_conn_ids, op.scheduler) == (["mlflow_default"], "slurm")
    assert (op.cfg, op.env, op.deferrable, op.durable, op.poll_interval) == (
        {"partition": "debug"},
        {"A": "1"},
        True,
        False,
        2,
    )
    assert op.multiple_outputs is False  # the XCom is the operator's result dict, not unrolled
    assert {"op_args", "op_kwargs", "component", "component_args", "app", "env"} <= set(op.template_fields)
    assert list(op.op_args) == [0.1]


def test_bad_operator_arguments_fail_at_parse_time_as_for_the_operator():
    with DAG("tf_unit_bad", schedule=None, start_date=START), pytest.raises(Exception, match="poll_interval"):

        @task.torchx(poll_interval=0)
        def train():
            return ("utils.echo", [])

        train()


def test_mapped_decorated_task_expands_over_the_function_arguments():
    with DAG("tf_unit_mapped", schedule=None, start_date=START) as dag:

        @task.torchx(poll_interval=1)
        def train(lr: float):
            return ("utils.echo", ["--msg", str(lr)])

        train.expand(lr=[0.1, 0.4])
    mapped = dag.get_task("train")
    assert mapped.operator_class is _TorchXDecoratedOperator
    assert mapped.partial_kwargs["poll_interval"] == 1
