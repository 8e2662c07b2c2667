"""A hostile store writer against the cache, through real DAG runs (``airflow dags test``) on local_cwd,
with an fsspec store and a real MLflow server (the ``tx_cache`` pipeline of test_cache_dags.py): a
genuine record of another DAG, copied under this DAG's key, is a miss and the step's job runs; paths a
job plants as artifacts (``/dev/zero``, a FIFO, a loopback HTTP URL) are never read, and the next step
runs its job uncached; two deployment keys give a step with a secret two keys, and share no hit even
on a key without one; an untouched record still hits.

The forged record (a rewritten result, the signature kept) is test_cache_dags.py's. A checkpoint
rewritten by another writer needs a job the infrastructure ended, which local_cwd never reports (a
job there SUCCEEDED, FAILED or was CANCELLED): that attack is tested through the operator with a
named fake scheduler (tests/unit/policies/test_resubmission.py).
"""

from __future__ import annotations

import json

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.mlflow_store import MlflowStore

from tests.integration.test_cache_dags import STEPS, Pipeline, first_run, task_seconds
from tests.services import recording_http_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]
#: the suite's deployment key (tests/conftest.py) and another deployment's
OURS = "test-deployment-cache-key-0123456789abcdef"
THEIRS = "another-deployment-cache-key-fedcba9876543210"


@pytest.fixture(scope="module")
def pipeline(run_dag, tmp_path_factory, mlflow_uri):
    return first_run(run_dag, tmp_path_factory.mktemp("hostile"), mlflow_uri)


def _hits(result) -> dict[str, bool]:
    return {step: result.xcom(step)["cache_hit"] for step in STEPS}


def _stores(pipe: Pipeline) -> tuple[FsspecStore, MlflowStore]:
    return FsspecStore(str(pipe.root)), MlflowStore(pipe.mlflow_uri, "cache")


def test_another_dags_record_is_never_a_hit_not_even_copied_under_this_dags_key(pipeline):
    """``tx_cache_other`` runs the same steps: its keys are its own (the DAG scope enters them), so
    it submits every job; A's genuine, signed record of ``b`` copied under B's key by a writer with
    the stores' credentials is ignored with a warning: never A's result."""
    pipe, first = pipeline
    other, ran = pipe.run(dag_id="tx_cache_other")
    assert other.states == {"a": "success", "b": "success", "c": "success"}, other.output[-4000:]
    assert ran == ["a", "b", "c"]  # A's records were there: none is B's
    assert _hits(other) == {"a": False, "b": False, "c": False}
    for step in STEPS:
        assert other.xcom(step)["cache_key"] != first.xcom(step)["cache_key"]
    assert first.xcom("a")["app_handle"] not in other.output

    ours, theirs = first.xcom("b")["cache_key"], other.xcom("b")["cache_key"]
    for store in _stores(pipe):
        store.cache_records.put(theirs, store.cache_records.get(ours))  # signed, but DAG A's
    again, ran = pipe.run(dag_id="tx_cache_other")
    assert again.states == {"a": "success", "b": "success", "c": "success"}, again.output[-4000:]
    # the copy is ignored; B's own record (the MLflow server still holds it: a write adds a record
    # there) is the hit, never A's result
    assert ran == [] and _hits(again) == {"a": True, "b": True, "c": True}
    assert f"Cache record {theirs} in" in again.output and "it is the record of another key" in again.output
    assert again.xcom("b")["app_handle"] == other.xcom("b")["app_handle"] != first.xcom("b")["app_handle"]
    alone, ran = pipe.run(dag_id="tx_cache_other", trackers=("cache_fs",))  # where the copy replaced it
    assert alone.states == {"a": "success", "b": "success", "c": "success"}, alone.output[-4000:]
    assert ran == ["b"]  # b's job ran again; its output is as it was, so c hits
    assert _hits(alone) == {"a": True, "b": False, "c": True}
    assert first.xcom("b")["app_handle"] not in json.dumps(alone.xcom("c"))


@pytest.fixture
def loopback_url():
    """A URL on an HTTP server on loopback (reachable from the task and its job), and the requests it saw."""
    with recording_http_server() as served:
        yield served


@pytest.mark.parametrize(
    ("planted", "refused"),
    [
        ("/dev/zero", "is under /proc, /sys or /dev: never read"),
        # beside a's output file, which b's arguments name (the file, never its directory)
        ("fifo", "lies outside the task's output roots"),
        ("http", "is not under a configured tracker store: not read"),
    ],
)
def test_a_path_a_job_plants_is_never_read_and_the_next_step_runs_its_job(
    pipeline, loopback_url, planted, refused
):
    """``a``'s job records an artifact at a path of its choosing: ``a``'s record holds it unread (None,
    never checked), ``b`` (whose key holds its parent's artifacts) refuses to read it, runs its job
    uncached, and the run ends in bounded time; the HTTP server sees no request."""
    pipe, _ = pipeline
    url, requests = loopback_url
    result, ran = pipe.run(a_hostile=url if planted == "http" else planted)
    assert result.states == {"a": "success", "b": "success", "c": "success"}, result.output[-4000:]
    assert ran == ["a", "b"]  # a: its env changed; b: not cached; c: b's output is as it was
    path = result.xcom("a")["artifacts"]["planted"]["path"]
    assert path == (url if planted == "http" else planted) or planted == "fifo" and path.endswith(".fifo")
    record = FsspecStore(str(pipe.root)).cache_records.get(result.xcom("a")["cache_key"])
    assert path in record["outputs"] and record["outputs"][path] is None  # recorded, never read
    assert result.xcom("b").get("cache_hit", False) is False and "cache_key" not in result.xcom("b")
    assert f"{path!r} {refused}" in result.output
    assert "Not caching this run: its cache key could not be computed" in result.output
    assert "did not finish within" not in result.output  # refused at once, not given up on
    assert requests == []  # not a HEAD, not a GET
    seconds = task_seconds(result)
    print(f"task seconds with a planted {planted}: {seconds}")


def test_two_deployment_keys_share_no_hit_and_an_untouched_record_still_hits(pipeline):
    """The same pipeline under another deployment's key, on the same stores: ``a``'s secret enters its
    key as an HMAC under the deployment's key, so ``a``'s key differs; ``c`` holds no secret, so its
    key is the same, and this deployment's record of it does not verify there: every step runs (and
    ``c``'s newest record is now the other deployment's). Back under this deployment's key, the
    untouched records of ``a`` and ``b`` hit; for ``c`` the other deployment's record is ignored (it
    does not verify) and this deployment's own, which the MLflow server still holds, hits."""
    pipe, first = pipeline
    keys = {step: first.xcom(step)["cache_key"] for step in STEPS}
    theirs, ran = pipe.run(env={"AIRFLOW_VAR_TORCHX_CACHE_KEY": THEIRS})
    assert theirs.states == {"a": "success", "b": "success", "c": "success"}, theirs.output[-4000:]
    assert ran == ["a", "b", "c"]
    assert _hits(theirs) == {"a": False, "b": False, "c": False}
    assert theirs.xcom("a")["cache_key"] != keys["a"]  # the secret's digest differs
    assert theirs.xcom("c")["cache_key"] == keys["c"]  # no secret, same parent output: the same key ...
    assert f"Cache record {keys['c']} in" in theirs.output  # ... but not the same signer
    assert "signature does not verify under this deployment's cache key" in theirs.output

    ours, ran = pipe.run(env={"AIRFLOW_VAR_TORCHX_CACHE_KEY": OURS})
    assert ours.states == {"a": "success", "b": "success", "c": "success"}, ours.output[-4000:]
    assert ran == []
    assert _hits(ours) == {"a": True, "b": True, "c": True}
    assert ours.xcom("c")["cached_from"] == first.xcom("c")["app_handle"]
    assert ours.xcom("a")["cached_from"] == first.xcom("a")["app_handle"]
    assert ours.xcom("b")["cached_from"] == first.xcom("b")["app_handle"]
    assert f"Cache record {keys['c']} in" in ours.output and "signature does not verify" in ours.output
