"""The credential matrix on local_cwd: a real ``airflow dags test`` run of every way a credential can
be configured (tests/credential_matrix.py), then every place searched for every secret, in clear,
URL-encoded and inside base64 (tests/secret_search.py). Target: 0 found."""

from __future__ import annotations

import pytest

from tests.credential_matrix import (
    SECRETS,
    all_secrets,
    assert_artifact_path_kept_without_user_info,
    assert_env_arrived_intact,
    assert_nothing_found,
    connections,
    expected_states,
    places,
    run_matrix,
)
from tests.openlineage_events import read_events
from tests.secret_search import secret_hits

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def conns(mlflow_uri, s3_endpoint, tmp_path_factory):
    work = tmp_path_factory.mktemp("credential-matrix")
    return connections(
        mlflow_uri, s3_endpoint, tmp_path_factory.mktemp("credential-store"), work / "work"
    ), work


@pytest.fixture(scope="module")
def matrix(airflow_db, conns):
    env, work = conns
    return run_matrix("local", airflow_db, env, work)


def test_every_task_ends_as_its_store_allows(matrix):
    assert matrix.result.states == expected_states(), matrix.result.output[-6000:]


def test_no_secret_in_any_log_xcom_job_output_or_openlineage_event(matrix):
    assert_nothing_found(places(matrix))


def test_the_jobs_get_their_credentials_intact(matrix):
    """What the env carried arrives as it was (a ',' value is not cut into more variables)."""
    assert_env_arrived_intact(matrix)


def test_links_and_paths_shown_to_people_carry_no_user_info(matrix):
    for task_id in ("run_password", "run_uri_http"):
        url = matrix.result.xcom(task_id, key="tracker_url")
        assert url and url.startswith("http://127.0.0.1:") and "@" not in url, (task_id, url)
    assert_artifact_path_kept_without_user_info(matrix)
    events = read_events(matrix.events)
    namespaces = {d["namespace"] for e in events for d in e.get("outputs", []) + e.get("inputs", [])}
    assert "https://models.example" in namespaces, namespaces


def test_the_dry_run_xcom_hides_the_whole_tracker_config(matrix):
    for way in SECRETS.keys() & {"password", "uri_postgresql", "uri_sftp"}:
        request = matrix.result.xcom(f"dryrun_{way}")["request"]
        assert "TORCHX_TRACKER_AIRFLOW_" in request and "base64:" not in request, request


def test_reprs_and_exception_text_hold_no_secret(conns, monkeypatch):
    """In-process: the backends, stores and the error of a store that cannot be opened."""
    from torchx_airflow.exceptions import TorchXError
    from torchx_airflow.hooks.tracker import trackers_for

    env, _ = conns
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    texts: dict[str, str] = {}
    for way in ("password", "uri_http", "options_s3"):
        trackers = trackers_for([f"cred_{way}"])
        trackers.check()
        texts[f"repr {way}"] = f"{trackers!r} {trackers.backends!r} {trackers.stores!r}"
    for way in ("uri_https", "uri_postgresql", "uri_mysql", "uri_sftp", "options_sftp"):
        trackers = trackers_for([f"cred_{way}"])
        texts[f"repr {way}"] = f"{trackers!r} {trackers.backends!r}"
        with pytest.raises(TorchXError) as raised:  # cannot be opened, or did not answer in time
            trackers.check_within(5, f"cred_{way}")
        texts[f"exception {way}"] = str(raised.value)  # the cause's own text: task logs, masked there
    from torchx_airflow_tracker.mlflow_store import MlflowStore

    texts["repr MlflowStore postgresql"] = repr(
        MlflowStore(f"postgresql://u:{SECRETS['uri_postgresql']}@db/x")
    )
    assert secret_hits(all_secrets(), {k: v.encode() for k, v in texts.items()}) == []
