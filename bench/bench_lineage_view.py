"""How fast the lineage view answers a 500-run graph.

A local fsspec tracker store (the store ``make up`` configures first) holds 500 runs in 10 layers of
50, each with two sources in the layer before and one artifact, all in one DAG run. The view's work
after its metadata-DB queries is measured: walking the store from the 500 runs (``build_graph``)
and drawing the page (layout and SVG), and the JSON answer. Baseline, in the same process and
interleaved: the bare reads the graph needs, one run at a time through the store's public API
(``sources``, ``metadata``, ``artifacts``), with no layout and no drawing. Target: under 1 s.

The DB part of a request is four bulk queries (task instances, XComs, rendered fields, the DAG
run) whatever the number of runs; it is not in these figures.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Callable

RUNS, LAYERS, REPEATS = 500, 10, 5
TARGET_SECONDS = 1.0


def _make_store(root: str):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    store = FsspecStore(root)
    per_layer = RUNS // LAYERS
    run_ids = [
        [f"slurm://torchx/{layer * per_layer + i + 1000}" for i in range(per_layer)]
        for layer in range(LAYERS)
    ]
    for layer, runs in enumerate(run_ids):
        for i, run_id in enumerate(runs):
            store.add_metadata(
                run_id,
                airflow_dag_id="bench",
                airflow_run_id="manual__1",
                airflow_task_id=f"step{layer}",
                airflow_map_index=i,
            )
            store.add_artifact(run_id, "model", f"/models/{layer}/{i}.pt")
            if layer:
                for parent in {run_ids[layer - 1][i], run_ids[layer - 1][(i + 1) % per_layer]}:
                    store.add_source(run_id, parent, "model")
    return store, [run_id for runs in run_ids for run_id in runs]


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run() -> list[dict]:
    """Median seconds of the page and of the JSON answer, each against the bare serial reads."""
    from torchx_airflow.plugins.graph import AirflowTask, Seed, build_graph
    from torchx_airflow.plugins.render import render_page

    with tempfile.TemporaryDirectory(prefix="bench-lineage-view-") as root:
        store, run_ids = _make_store(root)
        seeds = [
            Seed(run_id, AirflowTask("bench", "manual__1", f"step{i // 50}", i % 50, "success"), "SUCCEEDED")
            for i, run_id in enumerate(run_ids)
        ]

        def bare_reads() -> None:
            for run_id in run_ids:
                list(store.sources(run_id))
                store.metadata(run_id)
                store.artifacts(run_id)

        def page() -> None:
            graph = build_graph([(store, seeds)], depth=3)
            assert len(graph.runs) == RUNS
            render_page(graph, dag_id="bench", run_id="manual__1", static_url="/s", json_url="/j")

        def answer() -> None:
            json.dumps(build_graph([(store, seeds)], depth=3).to_dict())

        times: dict[str, list[float]] = {"bare": [], "page": [], "json": []}
        for _ in range(REPEATS):  # interleaved, so load on the machine hits all three alike
            times["bare"].append(_seconds(bare_reads))
            times["page"].append(_seconds(page))
            times["json"].append(_seconds(answer))
    bare = statistics.median(times["bare"])
    return [
        _figure("lineage view page, 500-run graph", statistics.median(times["page"]), bare),
        _figure("lineage view JSON, 500-run graph", statistics.median(times["json"]), bare),
    ]


def _figure(name: str, value: float, baseline: float) -> dict:
    return {
        "figure": name,
        "baseline": "the same store reads, one run at a time, no layout or drawing",
        "target": f"under {TARGET_SECONDS:g} s",
        "value": value,
        "baseline_value": baseline,
        "ratio": value / baseline if baseline else float("inf"),
        "unit": "s",
        "meets_target": value < TARGET_SECONDS,
        "note": f"median of {REPEATS} interleaved runs; local fsspec store, {RUNS} runs in {LAYERS} layers, "
        "2 sources and 1 artifact each; metadata-DB queries not included",
    }


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
