"""`make up` records the ports it started a home with (scripts/airflow-stack.sh, stack/settings), so a
service started again later (`make start SERVICE=api-server`, which passes no port) serves where it
did: run for real on a stack of its own, on ports other than the defaults."""

from __future__ import annotations

import subprocess

import pytest

from tests.polling import wait_until
from tests.stack import SCRIPT, AirflowStack

pytestmark = pytest.mark.integration


def test_a_service_started_again_without_ports_serves_on_the_ports_up_recorded(tmp_path):
    dags, home = tmp_path / "dags", tmp_path / "home"
    dags.mkdir()
    home.mkdir()
    stack = AirflowStack(home, dags)
    with stack.running():
        assert f"AIRFLOW_PORT:={stack.port}" in (stack.home / "stack" / "settings").read_text()
        # as `make stop|start SERVICE=api-server` run it: none of the stack's ports in the environment
        bare = {k: v for k, v in stack.env.items() if k not in ("AIRFLOW_PORT", "AIRFLOW_LOG_PORT")}
        for command in ("stop", "start"):
            subprocess.run(
                ["bash", str(SCRIPT), command, "api-server"],
                env=bare, cwd=stack.home, check=True, capture_output=True, timeout=120,
            )  # fmt: skip
        wait_until(stack._healthy, f"the API server answering on {stack.port} again", 240, interval=1)
