"""A DAG author's policies through real DAG runs (``airflow dags test``) on local_cwd, with a real
fsspec tracker store: the example DAG dags/torchx_team_policy.py, whose ``TeamLabel`` adds
``TEAM={{ params.team }}`` in ``prepare`` and whose ``NotifyOnClose`` writes a line in ``closed``.

team=ml runs; team=ml again is a cache hit (no job); team=research runs again and its job sees
TEAM=research; a run whose app fails is closed with its error. Each execution writes its line once.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def team_runs(run_dag, tmp_path_factory):
    store = tmp_path_factory.mktemp("team-store")
    env = {
        "AIRFLOW_CONN_TORCHX_DEFAULT": json.dumps(
            {"conn_type": "torchx", "extra": {"scheduler": "local_cwd", "trackers": ["team_fs"]}}
        ),
        "AIRFLOW_CONN_TEAM_FS": json.dumps({"conn_type": "torchx_fsspec", "extra": {"root": str(store)}}),
    }

    def run(**conf):
        return run_dag("torchx_team_policy", conf=conf, env=env, dags_folder=REPO / "dags")

    return [run(team="ml"), run(team="ml"), run(team="research"), run(team="ml", fail=True)]


def _notify_lines(output: str) -> list[str]:
    """The policy's lines in a run's task log, without the logger's suffix."""
    found = re.findall(r"\[notify\] (.*?)(?: \[airflow\.task[^\]]*\].*)?$", output, re.M)
    return [line.strip() for line in found]


def test_a_policy_in_the_dag_file_labels_the_job_and_the_label_is_in_the_cache_key(team_runs):
    ml, again, research, _ = team_runs
    for result in (ml, again, research):
        assert result.returncode == 0, result.output[-4000:]
        assert result.states == {"train": "success"}
    first, hit, other = (r.xcom("train") for r in (ml, again, research))
    assert "running for team ml" in ml.output and first["cache_hit"] is False
    assert hit["cache_hit"] is True and hit["cached_from"] == first["app_handle"]
    assert "running for team" not in again.output and "Submitted TorchX app" not in again.output
    assert other["cache_hit"] is False and other["cache_key"] != first["cache_key"]
    assert "running for team research" in research.output
    submitted = research.xcom("train", key="torchx_app")
    assert "TEAM" in json.dumps(submitted)  # the record of what was submitted names the label


def test_closed_is_heard_once_per_execution_whatever_ended_it(team_runs):
    ml, again, research, failed = team_runs
    assert _notify_lines(ml.output) == [
        f"torchx_team_policy.train for team ml: SUCCEEDED as {ml.xcom('train')['app_handle']}"
    ]
    assert _notify_lines(again.output) == [
        f"torchx_team_policy.train for team ml: cache hit of {ml.xcom('train')['app_handle']}"
    ]
    assert len(_notify_lines(research.output)) == 1 and "for team research: SUCCEEDED" in research.output
    assert failed.returncode != 0 and failed.states == {"train": "failed"}
    assert _notify_lines(failed.output) == [
        "torchx_team_policy.train for team ml: failed: TorchXAppFailedError"
    ]
