"""The operators in-process: bad input is refused before submission, AppDefs are templated. The
sensor on real finished local_cwd apps is in tests/unit/sensors/test_torchx_sensor.py."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException
from torchx.components.utils import echo, python

from tests.dags.torchx_test_dags import HELLO
from tests.fakes import TI
from torchx_airflow.exceptions import (
    TorchXComponentError,
    TorchXConfigError,
)
from torchx_airflow.operators.torchx import TorchXDryRunOperator, TorchXOperator
from torchx_airflow.sensors.torchx import TorchXAppSensor


def _execute(op):
    ti = TI()
    try:
        return op.execute({"ti": ti}), ti
    except Exception as e:
        e.ti = ti  # type: ignore[attr-defined]
        raise


def test_component_and_app_are_mutually_exclusive():
    with pytest.raises(TorchXComponentError, match="give exactly one of 'component'"):
        TorchXOperator(task_id="t")
    with pytest.raises(TorchXComponentError, match="give exactly one of 'component'"):
        TorchXOperator(task_id="t", component="utils.echo", app=echo(msg="x"))


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"component": "utils.nope"}, "Unknown or invalid TorchX component 'utils.nope'"),
        ({"component": "utils.echo", "component_args": ["--no-such-flag"]}, "do not parse for component"),
        ({"component": "utils.echo", "component_args": [{"a": 1}]}, "component_args item {'a': 1}"),
        ({"component": "utils.echo", "scheduler": "nope_sched"}, "Unknown TorchX scheduler 'nope_sched'"),
        ({"component": "utils.echo", "cfg": {"bogus": 1}}, "Unknown run option(s) ['bogus']"),
        ({"app": echo(msg="x", num_replicas=0)}, "TorchX refused app"),
    ],
)
def test_bad_input_fails_before_anything_is_submitted(kwargs, fragment):
    op = TorchXOperator(task_id="t", **kwargs)
    with pytest.raises((TorchXComponentError, TorchXConfigError)) as err:
        _execute(op)
    assert fragment in str(err.value)
    assert isinstance(err.value, AirflowFailException)  # no retry burns on bad input
    assert err.value.ti.pushed == {}  # type: ignore[attr-defined]


def test_bad_component_args_show_the_component_usage():
    op = TorchXDryRunOperator(task_id="t", component="utils.echo", component_args="--msgg hi")
    with pytest.raises(TorchXComponentError) as err:
        _execute(op)
    assert "['--msgg', 'hi']" in str(err.value)
    assert "usage:" in str(err.value)


def test_local_cwd_without_waiting_is_refused():
    op = TorchXOperator(task_id="t", component="utils.echo", wait_for_completion=False)
    with pytest.raises(
        TorchXConfigError, match="wait_for_completion=False cannot be used with scheduler 'local_cwd'"
    ):
        _execute(op)


def test_appdef_args_env_and_entrypoint_are_templated_on_a_copy():
    app = python("--lr", "{{ params.lr }}", script="{{ params.script }}")
    app.roles[0].env["RUN"] = "{{ run_id }}"
    op = TorchXDryRunOperator(task_id="t", app=app)
    op.render_template_fields({"params": {"lr": 0.25, "script": HELLO}, "run_id": "r1"})

    role = op.app.roles[0]
    assert role.args[-3:] == [HELLO, "--lr", "0.25"]
    assert role.env["RUN"] == "r1"
    assert app.roles[0].args[-1] == "{{ params.lr }}"  # the DAG file's AppDef is untouched


def test_dry_run_of_an_appdef_summarizes_it():
    op = TorchXDryRunOperator(task_id="t", app=echo(msg="hi", num_replicas=2), env={"MODE": "test"})
    summary, ti = _execute(op)
    (role,) = summary["roles"]
    assert role["num_replicas"] == 2
    assert role["args"] == ["hi"]
    assert "MODE" in role["env_names"]
    assert ti.pushed == {}


def test_template_fields_cover_the_documented_inputs():
    assert {"component", "component_args", "app", "scheduler", "cfg", "env"} <= set(
        TorchXOperator.template_fields
    )
    assert "app_handle" in TorchXAppSensor.template_fields
