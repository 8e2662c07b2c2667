"""
### A platform team's policy: every job labelled with its team, a line when each task ends

Two policies written in this DAG file join the task's run with `policies=[...]`, beside the
built-in ones (caching, cost, resubmission):

- `TeamLabel` adds `TEAM={{ params.team }}` to every role's env in `prepare`. What a policy
  prepares is what is submitted, and what the cache key, the cost estimate and an approval are
  taken from: `team=ml` again is a cache hit, `team=research` is a run of its own.
- `NotifyOnClose` writes one line when the task's execution ends, whatever ended it (a result,
  a cache hit, the app's failure, a kill, a timeout): where a team would post to its chat.

`train` is cached (`cache=True`): it needs the deployment's cache key (`[torchx] cache_key_secret`,
see the caching page) and a tracker on its connection. Trigger it with `{"team": "research"}` to
see the label change, or `{"fail": true}` to see the line of a failed task.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, Param

from torchx_airflow.operators.torchx import TorchXOperator
from torchx_airflow.run.points import RunPolicy

JOB_SCRIPT = str(Path(__file__).parent / "jobs" / "hello.py")


class TeamLabel(RunPolicy):
    """Label every role of the app with its team: ``TEAM`` in its env (``team`` is templated)."""

    name = "team-label"

    def __init__(self, team: str) -> None:
        self.team = team

    def prepare(self, run: Any, *, app: Any, **kwargs: Any) -> Any:
        team = run.render(self.team)
        for role in app.roles:
            role.env["TEAM"] = team
        return app


class NotifyOnClose(RunPolicy):
    """One line when the task's execution ends: its outcome, or the error that ended it."""

    name = "notify"

    def closed(self, run: Any, *, result: Any = None, error: Any = None, **kwargs: Any) -> None:
        if error is not None:
            outcome = f"failed: {type(error).__name__}"
        elif result.get("cache_hit"):
            outcome = f"cache hit of {result['cached_from']}"
        else:
            outcome = f"{result['state']} as {result['app_handle']}"
        team = run.app.roles[0].env.get("TEAM")
        run.log.info("[notify] %s.%s for team %s: %s", run.ti.dag_id, run.task_id, team, outcome)


with DAG(
    dag_id="torchx_team_policy",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["torchx", "example"],
    params={
        "team": Param("ml", type="string", description="The team the job runs for"),
        "fail": Param(False, type="boolean", description="Make the job fail"),
    },
) as dag:
    dag.doc_md = __doc__

    train = TorchXOperator(
        task_id="train",
        component="utils.python",
        # one string, split as a shell would: the job gets --fail only when params.fail is true
        component_args=f"--script {shlex.quote(JOB_SCRIPT)} -- --name policies --steps 2"
        + " {{ '--fail' if params.fail }}",
        cache=True,
        policies=[TeamLabel("{{ params.team }}"), NotifyOnClose()],
        poll_interval=1,
    )
