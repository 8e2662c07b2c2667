"""Which upstream runs become a task's parents, on a real DAG object with Airflow's state and XCom
answers stood in for (the integration tests run the same through real DAG runs)."""

from __future__ import annotations

import pendulum
import pytest
from airflow.sdk import DAG, BaseOperator, TaskGroup

from torchx_airflow.apps import airflow_run_id
from torchx_airflow.lineage.edges import _states_by_task, airflow_metadata, parent_runs
from torchx_airflow.lineage.keys import XCOM_LINEAGE_PARENTS, XCOM_RUN_ID

RUN = "manual__1"


class Noop(BaseOperator):
    def execute(self, context):
        return None


class FakeTI:
    """Answers get_task_states and xcom_pull like the Task SDK does, from fixed tables."""

    def __init__(
        self, task, states: dict[str, str], run_ids: dict[tuple[str, int], str], named: dict | None = None
    ) -> None:
        self.task = task
        self.named = named or {}  # task id -> its XCom XCOM_LINEAGE_PARENTS
        self.dag_id = task.dag_id
        self.run_id = RUN
        self.task_id = task.task_id
        self.map_index = -1
        self.try_number = 2
        self.states = states
        self.run_ids = run_ids
        self.state_calls = 0

    def get_task_states(self, dag_id, task_ids, run_ids):
        self.state_calls += 1
        assert run_ids == [RUN]
        return {
            RUN: {k: v for k, v in self.states.items() if k.rpartition("_")[0] in task_ids or k in task_ids}
        }

    def xcom_pull(self, task_ids, key, map_indexes=None):
        if key == XCOM_LINEAGE_PARENTS:
            assert isinstance(task_ids, str) and map_indexes == -1
            return self.named.get(task_ids)
        assert key == XCOM_RUN_ID
        (task_id,) = task_ids
        found = sorted((i, v) for (t, i), v in self.run_ids.items() if t == task_id)
        if map_indexes is not None:
            found = [(i, v) for i, v in found if i in map_indexes]
        return [v for _, v in found]


@pytest.fixture
def dag():
    with DAG("d", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        prepare = Noop(task_id="prepare")
        args = Noop(task_id="args")
        train = Noop(task_id="train")  # mapped in the tables below: train_0, train_1, train_2
        with TaskGroup("grp") as grp:
            a = Noop(task_id="a")
            b = Noop(task_id="b")
            a >> b
        skipped = Noop(task_id="skipped")
        failed_plain = Noop(task_id="failed_plain")
        helper = Noop(task_id="helper")
        join = Noop(task_id="join")
        prepare >> args >> train >> join
        prepare >> grp >> join
        prepare >> skipped >> join
        prepare >> failed_plain >> join
        prepare >> helper >> join
    return dag


def test_parents_are_the_nearest_tracked_successful_ancestors(dag):
    join = dag.get_task("join")
    states = {
        "prepare": "success",
        "args": "success",
        "train_0": "success",
        "train_1": "success",
        "train_2": "failed",
        "grp.a": "success",
        "grp.b": "success",
        "skipped": "skipped",
        "failed_plain": "failed",
        "helper": "success",
    }
    run_ids = {
        ("prepare", -1): "local_cwd://t/prepare-1",
        ("train", 0): "local_cwd://t/train-0",
        ("train", 1): "local_cwd://t/train-1",
        ("train", 2): "local_cwd://t/train-2",  # pushed, then the task was marked failed
        ("grp.b", -1): "local_cwd://t/b",
        ("skipped", -1): "local_cwd://t/should-not-appear",
        ("helper", -1): airflow_run_id("d", RUN, "helper"),
    }
    ti = FakeTI(join, states, run_ids)
    parents = parent_runs({"ti": ti, "task": join})
    assert sorted(parents) == sorted(
        ["local_cwd://t/train-0", "local_cwd://t/train-1", "local_cwd://t/b", "airflow://d/manual__1/helper"]
    )
    # grp.a is behind the tracked grp.b, prepare behind tracked runs or failed/skipped tasks: not parents.


def test_lineage_flows_through_untracked_tasks_and_stops_at_failed_ones(dag):
    train = dag.get_task("train")
    ti = FakeTI(
        train, {"args": "success", "prepare": "success"}, {("prepare", -1): "local_cwd://t/prepare-1"}
    )
    assert parent_runs({"ti": ti, "task": train}) == ["local_cwd://t/prepare-1"]
    ti = FakeTI(train, {"args": "failed", "prepare": "success"}, {("prepare", -1): "local_cwd://t/prepare-1"})
    assert parent_runs({"ti": ti, "task": train}) == []


def test_a_task_without_upstreams_has_no_parents_and_asks_nothing(dag):
    prepare = dag.get_task("prepare")
    ti = FakeTI(prepare, {}, {})
    assert parent_runs({"ti": ti, "task": prepare}) == []
    assert ti.state_calls == 0


def test_mapped_states_are_split_back_by_task_id():
    states = {
        "train": "success",
        "train_1": "failed",
        "train_x": "success",
        "train_2_3": "success",
        "t_2": "up",
    }
    assert _states_by_task(states, ["train", "train_2"]) == {
        "train": {-1: "success", 1: "failed"},
        "train_2": {3: "success"},
    }


def test_airflow_metadata_describes_the_task_instance(dag):
    join = dag.get_task("join")
    ti = FakeTI(join, {}, {})

    class Run:
        logical_date = None
        run_after = pendulum.datetime(2026, 5, 1, tz="UTC")

    md = airflow_metadata({"ti": ti, "task": join, "dag_run": Run()})
    assert md == {
        "airflow_dag_id": "d",
        "airflow_run_id": RUN,
        "airflow_task_id": "join",
        "airflow_map_index": -1,
        "airflow_try_number": 2,
        "airflow_logical_date": "2026-05-01T00:00:00+00:00",
        "airflow_upstream_task_ids": ["failed_plain", "grp.b", "helper", "skipped", "train"],
    }
    assert airflow_run_id("d", "r", "t", 3) == "airflow://d/r/t/3"


def test_edges_are_named_by_the_parent_artifacts_the_app_names():
    import uuid

    from torchx.specs import AppDef, Role
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.lineage.edges import artifact_labels, record_run

    store = FsspecStore(f"memory://labels-{uuid.uuid4().hex}")
    prepare, other, child = (
        "local_cwd://torchx/prepare-1",
        "local_cwd://torchx/other-2",
        "local_cwd://torchx/t-3",
    )
    store.add_artifact(prepare, "data", "/out/run-1/data.csv")
    store.add_artifact(prepare, "stats", "s3://bucket/stats.json")
    store.add_artifact(other, "model", "/out/run-1/data.csv.bak")  # named only as part of a longer path
    role = Role(
        "train",
        image="i",
        entrypoint="bash",
        args=["-c", "torchrun train.py --data '/out/run-1/data.csv' --out /out/run-1/t"],
        env={"STATS_URL": "s3://bucket/stats.json"},
    )
    labels = artifact_labels(store, [prepare, other], AppDef("t", roles=[role]))
    assert labels == {prepare: ["data", "stats"]}

    record_run([store], child, [prepare, other], {"airflow_task_id": "t"}, labels)
    assert sorted((s.source_run_id, s.artifact_name) for s in store.sources(child)) == [
        (other, None),  # its artifact cannot be told: the edge stays without a name
        (prepare, "data"),
        (prepare, "stats"),
    ]


def test_an_untracked_task_that_names_each_map_indexs_parents_is_followed_for_that_index_only(dag):
    """A sweep's plan names each segment's previous segment: that one is the parent, not every run
    behind the plan; an index it names None for (a first rung) looks further up; a task that names
    nothing for this task is passed through as before."""
    train = dag.get_task("train")
    named = {"args": {"train": [["local_cwd://t/seg-a"], None, []], "other": [["x"]]}}
    states = {"args": "success", "prepare": "success"}
    prepare_run = {("prepare", -1): "local_cwd://t/prepare-1"}
    ti = FakeTI(train, states, prepare_run, named)
    ti.map_index = 0
    assert parent_runs({"ti": ti, "task": train}) == ["local_cwd://t/seg-a"]
    ti.map_index = 1
    assert parent_runs({"ti": ti, "task": train}) == ["local_cwd://t/prepare-1"]
    ti.map_index = 2
    assert parent_runs({"ti": ti, "task": train}) == []
    ti.map_index = 0
    ti.named = {"args": {"other": [["x"]]}}
    assert parent_runs({"ti": ti, "task": train}) == ["local_cwd://t/prepare-1"]
