"""One store's walk from a DAG run's runs, on a real fsspec store: both ways, bounded in depth and in
runs, ending on cycles, from the store's one-listing graph read once per walk."""

from __future__ import annotations

import threading

import pytest

from torchx_airflow.plugins.walk import Walk, parallel_map


@pytest.fixture
def reader(store):
    return store


def _chain(job, length: int) -> list[str]:
    """Runs r0 -> r1 -> ... recorded by their jobs, each naming the artifact it took."""
    runs = [f"slurm://torchx/r{i}" for i in range(length)]
    job(runs[0])
    for parent, child in zip(runs, runs[1:], strict=False):
        job(child, sources={parent: f"out-of-{parent[-2:]}"})
    return runs


def _walk(reader, seeds, depth: int, budget: int = 100) -> Walk:
    walk = Walk(reader, depth, budget)
    walk.run(seeds)
    return walk


def test_both_ways_from_the_middle_up_to_depth_and_says_there_is_more(reader, job):
    runs = _chain(job, 7)
    walk = _walk(reader, [runs[3]], depth=2)
    assert walk.distance == {runs[3]: 0, runs[2]: -1, runs[4]: 1, runs[1]: -2, runs[5]: 2}
    assert set(walk.edges) == {(runs[i], runs[i + 1]) for i in range(1, 5)}
    assert walk.edges[(runs[2], runs[3])] == {"out-of-r2"}
    assert walk.truncated and walk.cut == set()


def test_a_graph_exactly_as_deep_as_the_walk_is_not_truncated(reader, job):
    runs = _chain(job, 3)
    walk = _walk(reader, [runs[1]], depth=1)
    assert set(walk.distance) == set(runs) and not walk.truncated


def test_a_cycle_ends_the_walk_and_each_run_is_admitted_once(reader, job):
    a, b, c = "slurm://torchx/a", "slurm://torchx/b", "slurm://torchx/c"
    job(a, sources={c: "loop"})
    job(b, sources={a: None})
    job(c, sources={b: None})
    job(c, sources={c: "self"})  # a run that names itself as its source
    walk = _walk(reader, [a], depth=10)
    assert walk.distance == {a: 0, c: -1, b: 1}
    assert set(walk.edges) == {(c, a), (a, b), (b, c), (c, c)}
    assert walk.edges[(c, a)] == {"loop"} and not walk.truncated


def test_the_budget_admits_the_nearest_runs_and_counts_the_rest(reader, job):
    seed = "slurm://torchx/seed"
    job(seed)
    children = [f"slurm://torchx/child-{i}" for i in range(5)]
    for child in children:
        job(child, sources={seed: "model"})
        job(f"{child}-eval", sources={child: None})
    walk = _walk(reader, [seed], depth=2, budget=3)
    assert walk.distance == {seed: 0, children[0]: 1, children[1]: 1}
    # found and left out: the other children, and the children of the admitted ones; the children of
    # the ones left out are never read, so not counted
    assert walk.cut == {*children[2:], f"{children[0]}-eval", f"{children[1]}-eval"}
    assert all(source in walk.distance and target in walk.distance for source, target in walk.edges)


def test_seeds_over_the_budget_are_cut_and_duplicate_seeds_count_once(reader, job):
    runs = _chain(job, 4)
    walk = _walk(reader, [runs[0], runs[0], runs[1], runs[2]], depth=1, budget=2)
    assert walk.distance == {runs[0]: 0, runs[1]: 0}
    assert walk.cut == {runs[2]}


def test_a_store_with_a_whole_graph_is_listed_once_per_walk(store, job):
    _chain(job, 3)
    snapshots: list[object] = []
    graph = store.graph

    def counted_graph(*args, **kwargs):
        snapshots.append(args)
        return graph(*args, **kwargs)

    store.graph = counted_graph
    _walk(store, ["slurm://torchx/r1"], depth=5)
    assert len(snapshots) == 1


def test_parallel_map_reads_the_first_alone_then_overlaps_the_rest_in_order():
    started = threading.Barrier(3, timeout=10)  # three reads must be under way at once to pass it
    finished = {item: threading.Event() for item in "123"}
    first_thread = []

    def read(item: str) -> str:
        if item == "0":  # alone, in the caller's thread: it imports what a store's read needs once
            first_thread.append(threading.current_thread())
            return "read-0"
        started.wait()
        after = str(int(item) + 1)  # the reads finish last to first: the answer must not follow that
        if after in finished:
            assert finished[after].wait(10)
        finished[item].set()
        return f"read-{item}"

    assert parallel_map(read, ["0", "1", "2", "3"]) == ["read-0", "read-1", "read-2", "read-3"]
    assert first_thread == [threading.current_thread()]
    assert parallel_map(str.upper, ["x"]) == ["X"]
