"""TorchX's own readers list exactly the runs ours list, on stores the provider wrote: TorchX 0.7's
and main's FsspecTracker, and TorchX 0.7's MLflowTracker (TorchX main has no MLflow tracker). The
store's internal state (cache records, the MLflow claims that keep one run per id, a losing rank's
run) is never a run to any of them."""

from __future__ import annotations

import uuid

from mlflow.tracking import MlflowClient
from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.mlflow_store import REGISTRY_RUN_NAME, REGISTRY_TAG, MlflowStore

from tests.tracker.torchx_readers import torchx_mlflow_reads, torchx_reads

RUN = "slurm://torchx/train-1"
CHILD = "slurm://torchx/eval-1"


def _record(store, key: str) -> None:
    store.add_metadata(RUN, lr=0.1)
    store.cache_records.put(key, {"app_handle": RUN, "result": {"state": "SUCCEEDED"}, "big": "x" * 20_000})
    assert store.cache_records.get(key) is not None


def test_torchxs_fsspec_reader_sees_the_runs_and_no_cache_record(tmp_path):
    key = uuid.uuid4().hex * 2
    store = FsspecStore(str(tmp_path / "store"))
    _record(store, key)
    read = torchx_reads(tmp_path / "store", [], [RUN], None)
    assert read["run_ids"] == [RUN]
    assert read["metadata"][RUN] == {"lr": 0.1}


def test_a_run_id_too_long_for_a_file_name_is_listed_by_torchx_as_an_alias_that_opens_it(tmp_path):
    """A run id over 155 bytes cannot be a directory's base32 name (255 bytes at most), so its
    directory is named for its digest. TorchX's reader, which takes a run id from a directory's name,
    lists that alias: TorchX's reader, and this store, open the run through it, and this store lists
    the id itself."""
    from torchx_airflow_tracker.store_layout import LONG_ID_PREFIX

    long_id = "airflow://" + "d" * 250 + "/run/train/0"
    store = FsspecStore(str(tmp_path / "store"))
    store.add_metadata(long_id, lr=0.1)
    store.add_source(long_id, RUN, "data")
    assert list(store.run_ids()) == [long_id]
    (alias,) = torchx_reads(tmp_path / "store", [], [], None)["run_ids"]
    assert alias.startswith(LONG_ID_PREFIX) and alias == store.alias(long_id)
    read = torchx_reads(tmp_path / "store", [], [alias], None)
    assert read["metadata"][alias] == {"lr": 0.1}
    assert read["sources"][alias] == [[RUN, "data"]]
    assert store.metadata(alias) == {"lr": 0.1}
    assert store.alias(RUN) == RUN  # an id that fits a name is its own


def test_torchxs_mlflow_reader_lists_exactly_our_runs(mlflow_uri):
    """Runs with metadata, an artifact and a source, a cache record, the claims run, and the run of a
    rank that lost its claim: TorchX's MLflowTracker lists the two TorchX runs our store lists, and
    finds each by its name in the run ours resolves. Before the claims run had an experiment of its
    own, TorchX listed ``.torchx-claims`` as a third run."""
    key, experiment = uuid.uuid4().hex * 2, f"agree-{uuid.uuid4().hex[:8]}"
    store = MlflowStore(mlflow_uri, experiment=experiment)
    _record(store, key)
    store.add_artifact(RUN, "model", "/models/m.pt")
    loser = MlflowStore(mlflow_uri, experiment=experiment)
    loser._claimed = lambda _run_id, runs=None: (
        None
    )  # searched before the winner's run had its tag: it races, loses
    loser.add_metadata(RUN, rank=1)
    store.add_source(CHILD, RUN, "model")

    client = MlflowClient(mlflow_uri)
    claims_run = client.get_experiment(store.experiment_id).tags[REGISTRY_TAG]
    assert client.get_run(claims_run).info.run_name == REGISTRY_RUN_NAME  # the claims were made
    ours = MlflowStore(mlflow_uri, experiment=experiment)
    read = torchx_mlflow_reads(mlflow_uri, experiment, [RUN, CHILD])
    assert read["run_ids"] == sorted(ours.run_ids()) == sorted([RUN, CHILD]), read
    assert read["mlflow_ids"] == {run: ours.mlflow_run_id(run) for run in (RUN, CHILD)}
    assert ours.metadata(RUN) == {"lr": 0.1, "rank": 1}
