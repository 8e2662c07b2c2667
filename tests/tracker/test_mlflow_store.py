"""MLflow store specifics against a real tracking server: one run per TorchX run id however many
ranks race, batched writes, values over MLflow's limits, lineage tags, inline config."""

from __future__ import annotations

import logging
import multiprocessing
import uuid

import pytest
from mlflow.tracking import MlflowClient
from torchx_airflow_tracker.config import TrackerConfigError
from torchx_airflow_tracker.mlflow_store import RUN_ID_TAG, MlflowStore, create

RANKS = 8


def _rank(uri: str, experiment: str, run_id: str, rank: int, start) -> None:
    store = MlflowStore(uri, experiment)
    start.wait()
    store.add_metadata(run_id, **{f"rank{rank}": rank})


def test_ranks_creating_the_run_at_once_get_one_run(mlflow_uri):
    experiment, run_id = f"race-{uuid.uuid4().hex[:6]}", f"slurm://torchx/race-{uuid.uuid4().hex[:6]}"
    MlflowStore(mlflow_uri, experiment).experiment_id  # noqa: B018 - the experiment exists, the run does not
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_rank, args=(mlflow_uri, experiment, run_id, r, start)) for r in range(RANKS)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0

    client = MlflowClient(mlflow_uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'")
    assert len(runs) == 1
    assert runs[0].info.run_name == run_id
    assert MlflowStore(mlflow_uri, experiment).metadata(run_id) == {f"rank{r}": r for r in range(RANKS)}


def test_more_than_a_batch_of_metadata_and_numbers_as_metrics(mlflow_uri):
    store = MlflowStore(mlflow_uri, f"batch-{uuid.uuid4().hex[:6]}")
    run_id = "slurm://torchx/batch-1"
    values = {f"k{i}": i for i in range(250)}
    store.add_metadata(run_id, **values, note="text")
    assert store.metadata(run_id) == {**values, "note": "text"}
    mlflow_run = MlflowClient(mlflow_uri).get_run(store.mlflow_run_id(run_id))
    assert mlflow_run.data.metrics["k249"] == 249.0
    assert "note" not in mlflow_run.data.metrics


def test_values_over_mlflow_limits_are_truncated_with_a_warning(mlflow_uri, caplog):
    store = MlflowStore(mlflow_uri, f"limits-{uuid.uuid4().hex[:6]}")
    run_id = "slurm://torchx/limits-1"
    with caplog.at_level(logging.WARNING):
        store.add_metadata(run_id, huge="x" * 20000, fine=1)
        store.add_artifact(run_id, "model", "/m.pt", {"blob": "y" * 20000})
        store.add_metadata(run_id, **{"weird key: with/колон": 5})
    assert "stored truncated" in caplog.text
    metadata = store.metadata(run_id)
    assert metadata["fine"] == 1
    assert metadata["huge"].startswith("x" * 1000) and metadata["huge"].endswith("[truncated]")
    assert metadata["weird key: with/колон"] == 5  # the key reads back exactly
    assert store.artifacts(run_id)["model"].path == "/m.pt"


def test_lineage_is_one_tag_per_source(mlflow_uri):
    store = MlflowStore(mlflow_uri, f"tags-{uuid.uuid4().hex[:6]}")
    store.add_source("x://s/child", "x://s/parent", "model")
    store.add_source("x://s/child", "x://s/parent", "data")
    tags = MlflowClient(mlflow_uri).get_run(store.mlflow_run_id("x://s/child")).data.tags
    assert len([k for k in tags if k.startswith("torchx.source.")]) == 1
    assert store.run_url("x://s/child").startswith(f"{mlflow_uri}/#/experiments/")


@pytest.mark.parametrize(
    ("config", "fragment"),
    [
        (None, "needs a config"),
        ('{"uri": "x"}', "Unknown key(s) ['uri']"),
        ('{"experiment": "e"}', "missing ['tracking_uri']"),
    ],
)
def test_bad_config(config, fragment):
    with pytest.raises(TrackerConfigError) as err:
        create(config)
    assert fragment in str(err.value)


def test_inline_config_and_default_experiment():
    store = create('{"tracking_uri": "sqlite:////tmp/x.db"}')
    assert (store.tracking_uri, store.experiment) == ("sqlite:////tmp/x.db", "torchx")
