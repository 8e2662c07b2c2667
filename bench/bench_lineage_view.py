"""What one lineage view costs on a tracker store, local and S3, against the walk before it.

The local store (the fsspec store, as ``make up`` configures it) holds 10,000 runs: a DAG run's 4
runs, each with 10 children, each of those with 10 (444 runs within 2 hops, each with Airflow
metadata, one artifact and its source edge), and 9,556 unrelated runs. The view's work after its
metadata-DB queries is measured at depth 3: walking the store (``build_graph``) and drawing the
page.

S3 is moto's server on 127.0.0.1 (``BENCH_LINEAGE_S3=0`` skips it) holding a smaller store of the
same proportions: 2,000 runs, of which a graph of 84 (4 runs, 4 children each, 4 grandchildren
each). Moto answers a LIST page in a time that grows with the bucket (S3 does not): one listing
of the 10,000-run root takes 6 to 11 s there, and the baseline's 444 of them most of an hour; of a
2,000-run root, about 1 s. The S3 store is written locally, then uploaded with one PUT per file,
concurrently.

Baseline, in the same process and interleaved: the walk as it was before the view bounded its cost
(copied below as ``baseline_graph``): every run it meets asks ``descendants()``, which lists the whole
store root, and every run within the depth is drawn. Listings are counted at the store's one listing
primitive (``StoreFiles.names``: a directory, whatever the number of LIST pages), and on S3 also as
ListObjectsV2 requests. The baseline runs once per store (it is the slow side by two orders of
magnitude), the view several times. Targets: locally under 1 s; on moto, where a request's cost is
moto's rather than S3's, at most a tenth of the baseline's time; everywhere one root listing per
view whatever the graph's size.

The DB part of a request is a few bulk queries whatever the number of runs; it is not in these figures.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import counting_mlflow_requests, store_in_moto

DEPTH, LOCAL_REPEATS, S3_REPEATS, BASELINE_REPEATS = 3, 5, 3, 1
TARGET_SECONDS, S3_TARGET_RATIO = 1.0, 0.1
DAG_ID, DAG_RUN = "bench", "manual__1"


@dataclass(frozen=True)
class StoreShape:
    """A store of ``runs`` runs holding a DAG run's ``seeds`` runs, each with ``fanout`` children,
    each of those with ``fanout``; the other runs are unrelated."""

    runs: int
    seeds: int
    fanout: int

    @property
    def graph_runs(self) -> int:
        return self.seeds * (1 + self.fanout + self.fanout**2)

    def graph(self) -> tuple[list[str], list[tuple[str, str]]]:
        """The DAG run's runs, and (child, parent) for the runs below them."""
        seeds = [f"slurm://torchx/seed-{s}" for s in range(self.seeds)]
        edges = []
        for s, seed in enumerate(seeds):
            for c in range(self.fanout):
                child = f"slurm://torchx/child-{s}-{c}"
                edges.append((child, seed))
                edges += [(f"slurm://torchx/grandchild-{s}-{c}-{g}", child) for g in range(self.fanout)]
        return seeds, edges


LOCAL_STORE = StoreShape(runs=10_000, seeds=4, fanout=10)  # a graph of 444
S3_STORE = StoreShape(runs=2_000, seeds=4, fanout=4)  # a graph of 84: 4.2% of the runs, as 444 of 10,000


def make_store(root: str, shape: StoreShape = LOCAL_STORE) -> list[str]:
    """Write a store of that shape at ``root`` (a local directory); returns the DAG run's runs."""
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    store = FsspecStore(root)
    seeds, edges = shape.graph()
    graph_runs = seeds + [child for child, _ in edges]
    for i, run_id in enumerate(graph_runs):
        store.add_metadata(
            run_id, airflow_dag_id=DAG_ID, airflow_run_id=f"manual__{i}", airflow_task_id=f"t{i}"
        )
        store.add_artifact(run_id, "model", f"/models/{i}.pt")
    for child, parent in edges:
        store.add_source(child, parent, "model")
    for i in range(shape.runs - len(graph_runs)):
        store.add_metadata(f"slurm://torchx/unrelated-{i}", lr=0.1)
    store.ensure_indexed()  # a writer's work, once: both walks read an indexed store
    return seeds


# the walk before the view bounded its cost, kept to measure against (reads every run it meets)


class _BaselineWalk:
    def __init__(self, store: Any, depth: int) -> None:
        self.store, self.depth = store, depth
        self.distance: dict[str, int] = {}
        self.edges: dict[tuple[str, str], set[str]] = {}
        self.truncated = False

    def run(self, seeds: list[str]) -> None:
        for run_id in seeds:
            self.distance[run_id] = 0
        self._walk(seeds, up=True)
        self._walk(seeds, up=False)

    def _neighbours(self, run_id: str, up: bool) -> dict[str, tuple[str, ...]]:
        sources = self.store.sources(run_id) if up else self.store.descendants(run_id)
        names: dict[str, set[str]] = {}
        for source in sources:  # one TrackerSource per run and artifact name
            found = names.setdefault(source.source_run_id, set())
            if source.artifact_name:
                found.add(source.artifact_name)
        return {other: tuple(sorted(found)) for other, found in names.items()}

    def _walk(self, start: list[str], up: bool) -> None:
        from torchx_airflow.plugins.walk import parallel_map

        frontier, seen, hops = start, set(start), 0
        while frontier:
            found = parallel_map(lambda r: self._neighbours(r, up), frontier)
            if hops == self.depth:
                self.truncated = self.truncated or any(set(n) - seen for n in found)
                return
            hops += 1
            following: list[str] = []
            for run_id, neighbours in zip(frontier, found, strict=True):
                for other, names in neighbours.items():
                    key = (other, run_id) if up else (run_id, other)
                    self.edges.setdefault(key, set()).update(names)
                    if other not in seen:
                        seen.add(other)
                        following.append(other)
                        self.distance.setdefault(other, -hops if up else hops)
            frontier = following


def baseline_graph(store: Any, seeds: list[Any], depth: int) -> Any:
    """The graph as the view built it before: the walk above, then every run's details."""
    from torchx_airflow.plugins.graph import Edge, LineageGraph, RunNode, _details
    from torchx_airflow.plugins.walk import parallel_map

    walk = _BaselineWalk(store, depth)
    walk.run([seed.run_id for seed in seeds])
    ids = list(walk.distance)
    details = parallel_map(functools.partial(_details, store), ids)
    runs = {
        run_id: RunNode(run_id, walk.distance[run_id], task=task, artifacts=artifacts)
        for run_id, (task, artifacts, *_usage_and_cache) in zip(ids, details, strict=True)
    }
    edges = [Edge(s, t, tuple(sorted(n))) for (s, t), n in sorted(walk.edges.items())]
    return LineageGraph(runs, edges, depth, walk.truncated, max_runs=len(runs))


class Listings:
    """Counts the directories a store lists (and, on S3, the ListObjectsV2 requests), at its two
    listing primitives (``StoreFiles.names`` and, for entries, ``StoreFiles.versioned_names``)."""

    def __init__(self, store: Any) -> None:
        self.root = store.root
        self.directories: list[str] = []
        self.requests = 0
        names, versioned_names = store.files.names, store.files.versioned_names

        def counted(directory: str, hidden: bool = False) -> list[str]:
            self.directories.append(directory)
            return names(directory, hidden=hidden)

        def counted_versioned(directory: str) -> list[tuple[str, Any]]:
            if not store.files.local:  # local disks list through names() above
                self.directories.append(directory)
            return versioned_names(directory)

        store.files.names = counted
        store.files.versioned_names = counted_versioned
        client = getattr(store.fs, "s3", None)
        if client is not None:
            client.meta.events.register("before-call.s3.ListObjectsV2", self._request)

    def _request(self, **_: Any) -> None:
        self.requests += 1

    @contextlib.contextmanager
    def counting(self, into: dict[str, list[int]], key: str) -> Iterator[None]:
        start_dirs, start_requests = len(self.directories), self.requests
        yield
        into.setdefault(f"{key}_root", []).append(self.directories[start_dirs:].count(self.root))
        into.setdefault(f"{key}_dirs", []).append(len(self.directories) - start_dirs)
        into.setdefault(f"{key}_requests", []).append(self.requests - start_requests)


def _forget(store: Any) -> None:
    """What the store object kept from an earlier view, dropped: the view opens a store per page
    (its last root listing, the entries and unindexed runs it read)."""
    store._scanned.clear()
    store._entry_texts.clear()
    if store._listing_cache is not None:
        store._listing_cache = type(store._listing_cache)(store.root)


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(
    store: Any, seed_ids: list[str], repeats: int, baseline_repeats: int = BASELINE_REPEATS
) -> tuple[dict[str, list[float]], dict, int]:
    """Timings of the view (``repeats``) and of the baseline (the first ``baseline_repeats`` rounds),
    interleaved; listings per view; runs the view drew."""
    from torchx_airflow.plugins.graph import AirflowTask, Seed, build_graph
    from torchx_airflow.plugins.render import render_page

    seeds = [
        Seed(r, AirflowTask(DAG_ID, DAG_RUN, f"t{i}", -1, "success"), "SUCCEEDED")
        for i, r in enumerate(seed_ids)
    ]
    listings = Listings(store)
    counts: dict[str, list[int]] = {}
    drawn = []

    def view(build: Callable[[], Any], key: str) -> None:
        _forget(store)
        with listings.counting(counts, key):
            graph = build()
        drawn.append(len(graph.runs))
        render_page(graph, dag_id=DAG_ID, run_id=DAG_RUN, static_url="/s", json_url="/j")

    times: dict[str, list[float]] = {"view": [], "baseline": []}
    for round_index in range(repeats):
        if round_index < baseline_repeats:
            times["baseline"].append(
                _seconds(lambda: view(lambda: baseline_graph(store, seeds, DEPTH), "baseline"))
            )
        times["view"].append(_seconds(lambda: view(lambda: build_graph([(store, seeds)], DEPTH), "view")))
    return times, counts, drawn[-1]


def _time_target(where: str, view: float, base: float) -> tuple[str, bool]:
    if where == "local":
        return f"under {TARGET_SECONDS:g} s", view < TARGET_SECONDS
    ratio = view / base if base else float("inf")
    target = f"<= {S3_TARGET_RATIO:g} of the baseline (moto's request cost is not S3's)"
    return target, ratio <= S3_TARGET_RATIO


def _rows(where: str, shape: StoreShape, times: dict, counts: dict, drawn: int) -> list[dict]:
    view, base = statistics.median(times["view"]), statistics.median(times["baseline"])
    requests = ""
    if counts.get("view_requests", [0])[-1]:
        requests = (
            f"; ListObjectsV2 requests per view: {counts['view_requests'][-1]} "
            f"(baseline {counts['baseline_requests'][-1]})"
        )
    cap = " (its cap)" if drawn < shape.graph_runs else ""
    note = (
        f"view: median of {len(times['view'])} runs, baseline: {len(times['baseline'])} run(s), "
        f"interleaved; {where} fsspec store of {shape.runs:,} runs, a graph of "
        f"{shape.graph_runs} runs within depth {DEPTH}; the view draws {drawn}{cap}, the baseline all; "
        f"directories listed per view: {counts['view_dirs'][-1]} "
        f"(baseline {counts['baseline_dirs'][-1]}){requests}; metadata-DB queries not included"
    )
    target, meets = _time_target(where, view, base)
    root_view, root_base = counts["view_root"][-1], counts["baseline_root"][-1]
    sizes = f"{shape.runs:,}-run {where} store ({shape.graph_runs}-run graph)"
    return [
        {
            "figure": f"lineage view page on a {sizes}",
            "baseline": "the view's walk before its cost was bounded, same store, same run",
            "target": target,
            "value": view,
            "baseline_value": base,
            "ratio": view / base if base else float("inf"),
            "unit": "s",
            "meets_target": meets,
            "note": note,
        },
        {
            "figure": f"full-store listings per lineage view, {sizes}",
            "baseline": "the view's walk before its cost was bounded, same store, same run",
            "target": "1 whatever the graph's size",
            "value": float(root_view),
            "baseline_value": float(root_base),
            "ratio": root_view / root_base if root_base else float("inf"),
            "unit": "listings",
            "meets_target": root_view == 1 and len(set(counts["view_root"])) == 1,
            "note": f"root listings per view, each run: {counts['view_root']} "
            f"(baseline {counts['baseline_root']})",
        },
    ]


@contextlib.contextmanager
def _s3_store(shape: StoreShape, workdir: Path) -> Iterator[tuple[Any, list[str], float]]:
    """A store of that shape in a bucket of moto's S3 server: the store read from there,
    the DAG run's runs, and the upload's seconds (written locally, then uploaded)."""
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    local_root = str(workdir / "s3-store")
    seeds = make_store(local_root, shape)
    with store_in_moto(local_root, workdir) as (url, options, upload):
        yield FsspecStore(url, options), seeds, upload


MLFLOW_STORE = StoreShape(runs=300, seeds=6, fanout=6)  # a graph of 258 runs: the view draws 250
MLFLOW_REPEATS, MLFLOW_BASELINE_REPEATS = 5, 2


def make_mlflow_store(uri: str, experiment: str, shape: StoreShape) -> list[str]:
    """Write a store of that shape in an MLflow experiment; returns the DAG run's runs."""
    from torchx_airflow_tracker.mlflow_store import MlflowStore

    from torchx_airflow.plugins.walk import parallel_map

    store = MlflowStore(uri, experiment)
    seeds, edges = shape.graph()
    graph_runs = seeds + [child for child, _ in edges]
    parent_of = dict(edges)
    unrelated = [f"slurm://torchx/unrelated-{i}" for i in range(shape.runs - len(graph_runs))]
    numbers = {run_id: i for i, run_id in enumerate(graph_runs)}

    def write(run_id: str) -> None:  # a job's writes to its run; runs are written 8 at a time
        if run_id not in numbers:
            store.add_metadata(run_id, lr=0.1)
            return
        i = numbers[run_id]
        airflow = {"airflow_dag_id": DAG_ID, "airflow_run_id": f"manual__{i}", "airflow_task_id": f"t{i}"}
        store.add_metadata(run_id, **airflow)
        store.add_artifact(run_id, "model", f"/models/{i}.pt")
        if run_id in parent_of:
            store.add_source(run_id, parent_of[run_id], "model")

    write(graph_runs[0])  # the experiment and its claims run exist before the writers start
    parallel_map(write, graph_runs[1:] + unrelated)
    return seeds


def mlflow_rows(workdir: Path, shape: StoreShape = MLFLOW_STORE) -> list[dict]:
    """The view on an MLflow store (a new store object per view, as the view makes one per page)
    against the view's walk run by run before ``graph()`` (``baseline_graph``) on the same store."""
    from torchx_airflow_tracker.mlflow_store import MlflowStore

    from tests.services import mlflow_server_process
    from torchx_airflow.plugins.graph import AirflowTask, Seed, build_graph
    from torchx_airflow.plugins.render import render_page

    with mlflow_server_process(workdir, workers=1) as (uri, _):
        start = time.perf_counter()
        seed_ids = make_mlflow_store(uri, "lineage", shape)
        written = time.perf_counter() - start
        seeds = [
            Seed(r, AirflowTask(DAG_ID, DAG_RUN, f"t{i}", -1, "success"), "SUCCEEDED")
            for i, r in enumerate(seed_ids)
        ]
        times: dict[str, list[float]] = {"view": [], "baseline": []}
        requests: dict[str, list[int]] = {"view": [], "baseline": []}
        drawn = []

        def view(kind: str) -> None:
            with counting_mlflow_requests() as made:
                start = time.perf_counter()
                store = MlflowStore(uri, "lineage")
                if kind == "baseline":
                    graph = baseline_graph(store, seeds, DEPTH)
                else:
                    graph = build_graph([(store, seeds)], DEPTH)
                render_page(graph, dag_id=DAG_ID, run_id=DAG_RUN, static_url="/s", json_url="/j")
                times[kind].append(time.perf_counter() - start)
            requests[kind].append(len(made))
            drawn.append(len(graph.runs))

        for round_index in range(MLFLOW_REPEATS):
            if round_index < MLFLOW_BASELINE_REPEATS:
                view("baseline")
            view("view")
    median_view, median_base = statistics.median(times["view"]), statistics.median(times["baseline"])
    pages = -(-shape.runs // 1000)
    sizes = f"MLflow store of {shape.runs} runs ({shape.graph_runs}-run graph)"
    baseline = "the view's walk run by run (before graph()), same store, same run"
    note = (
        f"view: median of {len(times['view'])} runs, baseline: {len(times['baseline'])}, interleaved; "
        f"local mlflow server (SQLite, one worker); the view draws {drawn[-1]} of the graph's "
        f"{shape.graph_runs} runs within depth {DEPTH}; writing the store took {written:.0f} s"
    )
    return [
        {
            "figure": f"lineage view page on an {sizes}",
            "baseline": baseline,
            "target": f"under {TARGET_SECONDS:g} s",
            "value": median_view,
            "baseline_value": median_base,
            "ratio": median_view / median_base if median_base else float("inf"),
            "unit": "s",
            "meets_target": median_view < TARGET_SECONDS,
            "note": note,
        },
        {
            "figure": f"MLflow requests per lineage view, {sizes}",
            "baseline": baseline,
            "target": "<= 2 (experiment lookup, its claims) + 1 per page of 1,000 runs",
            "value": float(requests["view"][-1]),
            "baseline_value": float(requests["baseline"][-1]),
            "ratio": requests["view"][-1] / max(1, requests["baseline"][-1]),
            "unit": "requests",
            "meets_target": max(requests["view"]) <= 2 + pages,
            "note": f"requests per view, each run: {requests['view']} (baseline {requests['baseline']})",
        },
    ]


def run() -> list[dict]:
    """A view's time and root listings on a local and an S3 store, each against the baseline, and
    its time and requests on an MLflow store (``BENCH_LINEAGE_MLFLOW=0`` skips it)."""
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    with tempfile.TemporaryDirectory(prefix="bench-lineage-view-") as tmp:
        local_root = f"{tmp}/store"
        seeds = make_store(local_root, LOCAL_STORE)
        rows = _rows("local", LOCAL_STORE, *measure(FsspecStore(local_root), seeds, LOCAL_REPEATS))
        if os.environ.get("BENCH_LINEAGE_MLFLOW", "1") != "0":
            (Path(tmp) / "mlflow").mkdir()
            rows += mlflow_rows(Path(tmp) / "mlflow")
        if os.environ.get("BENCH_LINEAGE_S3", "1") == "0":
            return rows
        with _s3_store(S3_STORE, Path(tmp)) as (store, s3_seeds, upload):
            s3_rows = _rows("S3 (moto)", S3_STORE, *measure(store, s3_seeds, S3_REPEATS))
        s3_rows[0]["note"] += f"; the store's upload into moto took {upload:.0f} s (not timed in the figures)"
    return rows + s3_rows


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
