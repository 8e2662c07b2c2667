"""The lineage graph of a DAG run built from a real fsspec tracker store: its runs, their distances,
the edges between them named by artifact, what Airflow and the store know of each run, and its bounds."""

from __future__ import annotations

import pytest

from torchx_airflow.plugins.graph import (
    MAX_DEPTH,
    AirflowTask,
    LineageGraph,
    RunNode,
    Seed,
    build_graph,
)
from torchx_airflow.plugins.usage_view import RunUsage

PREPARE, TRAIN, EVALUATE = "slurm://torchx/prepare-1", "slurm://torchx/train-2", "slurm://torchx/eval-3"
RAW = "airflow://ingest/r0/download"  # a tracked Python task of another DAG


def _identity(dag_id: str, run_id: str, task_id: str, **more: object) -> dict[str, object]:
    """The Airflow identity the operator records on a run (``lineage.edges.airflow_metadata``)."""
    return {"airflow_dag_id": dag_id, "airflow_run_id": run_id, "airflow_task_id": task_id, **more}


@pytest.fixture
def pipeline(job):
    """raw -> prepare -(data)-> train -(model, tokenizer)-> evaluate, each recorded by its own job."""
    job(RAW)
    prepared = {"data": "/d/data.parquet"}
    job(PREPARE, sources={RAW: "raw"}, artifacts=prepared, **_identity("p", "r1", "prepare"))
    job(
        TRAIN,
        sources={PREPARE: "data"},
        artifacts={"tokenizer": "/m/tok.json", "model": "/m/model.pt"},
        **_identity("p", "r1", "train", airflow_map_index=2),
    )
    job(EVALUATE, sources={TRAIN: "model"}, **_identity("p", "r1", "evaluate"))
    job(EVALUATE, sources={TRAIN: "tokenizer"})  # a second edge to the same parent, another artifact


def _edges(graph: LineageGraph) -> list[tuple[str, str, list[str]]]:
    return [(e["source"], e["target"], e["artifact_names"]) for e in graph.to_dict()["edges"]]


def test_runs_edges_and_distances_around_one_seed(store, pipeline):
    graph = build_graph([(store, [Seed(TRAIN)])], depth=1)
    assert {run_id: run.distance for run_id, run in graph.runs.items()} == {
        PREPARE: -1,
        TRAIN: 0,
        EVALUATE: 1,
    }
    # two artifacts on one edge are one edge naming both
    assert _edges(graph) == [
        (PREPARE, TRAIN, ["data"]),
        (TRAIN, EVALUATE, ["model", "tokenizer"]),
    ]
    assert [run_id for run_id, run in graph.runs.items() if run.in_dag_run] == [TRAIN]
    assert graph.truncated  # RAW lies beyond depth 1
    assert graph.runs_not_shown == 0 and graph.cut is None


def test_depth_reaches_runs_of_other_dags_and_the_graph_is_whole_within_it(store, pipeline):
    graph = build_graph([(store, [Seed(TRAIN)])], depth=2)
    assert graph.runs[RAW].distance == -2 and not graph.truncated
    assert (RAW, PREPARE, ["raw"]) in _edges(graph)
    raw = graph.runs[RAW]
    assert raw.handle is None and raw.scheduler == "airflow" and raw.task is None  # a Python task


def test_artifacts_are_read_per_run_with_ids_naming_run_and_artifact(store, pipeline):
    graph = build_graph([(store, [Seed(TRAIN)])], depth=1)
    artifacts = graph.to_dict()["artifacts"]
    assert sorted((a["id"], a["path"]) for a in artifacts) == [
        (f"{PREPARE}#data", "/d/data.parquet"),
        (f"{TRAIN}#model", "/m/model.pt"),
        (f"{TRAIN}#tokenizer", "/m/tok.json"),
    ]
    assert graph.runs[TRAIN].to_dict()["artifacts"] == [f"{TRAIN}#model", f"{TRAIN}#tokenizer"]


def test_the_recorded_airflow_identity_labels_runs_of_other_dag_runs(store, pipeline):
    graph = build_graph([(store, [Seed(EVALUATE)])], depth=1)
    train = graph.runs[TRAIN]
    assert not train.in_dag_run
    assert train.task == AirflowTask("p", "r1", "train", map_index=2)
    assert train.label == "train [2]" and train.app_name == "train-2" and train.handle == TRAIN


def test_a_seed_takes_what_airflow_knows_and_keeps_the_attempt_the_store_recorded(store, job):
    job(TRAIN, **_identity("p", "r1", "train", airflow_attempt=2, airflow_attempt_ended_by="NODE_FAIL"))
    seed = Seed(
        TRAIN,
        AirflowTask("p", "r1", "train", state="running"),
        app_state=None,
        links={"airflow": "/dags/p/runs/r1/tasks/train"},
    )
    (node,) = build_graph([(store, [seed])], depth=1).runs.values()
    assert node.in_dag_run and node.distance == 0
    assert node.task is not None and (node.task.state, node.task.attempt) == ("running", 2)
    assert node.label == "train · attempt 2"
    assert node.state == "NODE_FAIL"  # how the infrastructure ended it, before the task's state
    assert node.links == {"airflow": "/dags/p/runs/r1/tasks/train"}
    node.app_state = "SUCCEEDED"
    assert node.state == "SUCCEEDED"


def test_usage_of_a_run_comes_from_its_metadata_and_the_total_counts_only_the_dag_runs_own(store, job):
    usage = {"source": "sacct", "elapsed_s": 60, "totals": {"cpu_hours": 0.5, "gpu_hours": {"a100": 1.0}}}
    cost = {"actual": {"total": 2.5, "currency": "USD"}}
    job(PREPARE, torchx_usage=usage, torchx_cost=cost)
    job(TRAIN, sources={PREPARE: None}, torchx_usage=usage, torchx_cost=cost)
    graph = build_graph([(store, [Seed(TRAIN)])], depth=1)
    assert graph.runs[PREPARE].usage == RunUsage("sacct", 60.0, None, 0.5, {"a100": 1.0}, None, 2.5, "USD")
    total = graph.to_dict()["usage_total"]
    assert total["runs"] == 1 and total["elapsed_s"] == 60 and total["cost"] == {"USD": 2.5}


def test_seeds_in_two_stores_make_one_graph_and_a_run_known_twice_is_one_node(tmp_path, store, pipeline):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    other = FsspecStore(str(tmp_path / "other"))
    other.create_root()
    other.add_source("slurm://torchx/score-9", TRAIN, "model")
    graph = build_graph([(store, [Seed(TRAIN)]), (other, [Seed("slurm://torchx/score-9")])], depth=1)
    assert set(graph.runs) == {PREPARE, TRAIN, EVALUATE, "slurm://torchx/score-9"}
    assert graph.runs[TRAIN].in_dag_run and graph.runs[TRAIN].artifacts  # read once, from the first
    assert (TRAIN, "slurm://torchx/score-9", ["model"]) in _edges(graph)


@pytest.mark.parametrize(("depth", "max_runs"), [(0, 10), (MAX_DEPTH + 1, 10), (1, 0)])
def test_depth_and_max_runs_out_of_bounds_are_refused_naming_the_value(store, depth, max_runs):
    with pytest.raises(ValueError, match=rf"got {max_runs if depth == 1 else depth}"):
        build_graph([(store, [Seed(TRAIN)])], depth=depth, max_runs=max_runs)


def test_max_runs_draws_the_nearest_and_says_how_many_it_left_out(store, pipeline):
    graph = build_graph([(store, [Seed(TRAIN)])], depth=2, max_runs=2)
    # the nearest first (upstream before downstream within a hop): evaluate is found and left out,
    # and raw, two hops up, is found through prepare and left out too
    assert set(graph.runs) == {TRAIN, PREPARE}
    assert graph.runs_not_shown == 2
    assert graph.cut is not None and graph.cut.startswith("At least 2 more runs within depth 2")
    assert all(e.source in graph.runs and e.target in graph.runs for e in graph.edges)


def test_map_text_reaches_every_text_the_graph_shows(store, pipeline):
    graph = build_graph([(store, [Seed(TRAIN, links={"mlflow": "https://h/x"})])], depth=1)
    graph.warnings.append("w")
    shown = graph.map_text(str.upper)
    answer = shown.to_dict()
    assert {run["id"] for run in answer["runs"]} == {PREPARE.upper(), TRAIN.upper(), EVALUATE.upper()}
    assert {(e["source"], e["target"]) for e in answer["edges"]} == {
        (PREPARE.upper(), TRAIN.upper()),
        (TRAIN.upper(), EVALUATE.upper()),
    }
    assert {a["path"] for a in answer["artifacts"]} == {"/D/DATA.PARQUET", "/M/MODEL.PT", "/M/TOK.JSON"}
    assert {name for e in answer["edges"] for name in e["artifact_names"]} == {"DATA", "MODEL", "TOKENIZER"}
    assert shown.runs[TRAIN.upper()].links == {"mlflow": "HTTPS://H/X"}
    assert shown.runs[EVALUATE.upper()].task.task_id == "EVALUATE"  # type: ignore[union-attr]
    assert shown.warnings == ["W"]
    assert graph.runs[TRAIN].links == {"mlflow": "https://h/x"}  # the original is left as it was


def test_hidden_runs_keep_their_place_but_show_nothing_they_made_or_used(store, pipeline):
    graph = build_graph([(store, [Seed(EVALUATE)])], depth=3)
    graph.hide_runs({PREPARE})
    assert PREPARE not in graph.runs
    hidden = graph.runs["hidden:1"]
    assert hidden.hidden and hidden.label == "run in a DAG you cannot see" and hidden.scheduler is None
    assert hidden.artifacts == [] and hidden.task is None
    assert [(e.source, e.target, e.artifact_names) for e in graph.edges] == [
        (RAW, "hidden:1", ()),
        ("hidden:1", TRAIN, ()),  # "data" would tell what the hidden run made
        (TRAIN, EVALUATE, ("model", "tokenizer")),
    ]


def test_a_run_without_airflow_identity_is_labelled_by_its_app_name():
    node = RunNode("local_cwd://torchx/utils.echo-abc", task=None)
    assert node.label == "utils.echo-abc" and node.scheduler == "local_cwd" and node.state is None
