"""What the comparison view of a 243-segment sweep costs: 162 trials by successive halving, rungs at
1, 3, 9, 27, 81 and 243 (162 + 54 + 18 + 6 + 2 + 1 segments), laid out as trials x rungs.

The sweep's XComs are those its tasks push (``tests/sweep_xcoms.py``: the real plan operator, each
segment's result as its worker records it, the promotion's result); each segment's run logged its
objective at every epoch it trained into a local fsspec store (one metrics entry each). The view's
work after its metadata-DB queries is measured: the trials and rungs from the XComs
(``sweep_view.fill_sweep``), the per-epoch series of the trial that got furthest from the store
(``read_series``), the JSON form and the page (a curve per trial, the table). Target: under 1 s.

Baseline, interleaved in the same process: the comparison view's other layout over the same
segments, the runs of each of the six rung tasks (rows from the same XComs, each run's final metrics
from the same store, the curves of the first 8 runs of each, the JSON form, the page): what showing
them took before the sweep layout.

The DB part of a request is a few bulk queries whatever the size of the sweep; it is not in the figure.
"""

from __future__ import annotations

import json
import tempfile
from types import SimpleNamespace
from typing import Any

from bench.common import figure, interleaved, median

RUNGS = [1, 3, 9, 27, 81, 243]
REPEATS = 7
TARGET_SECONDS = 1.0
DAG_ID, DAG_RUN = "bench", "manual__1"


def _space() -> list[dict[str, Any]]:
    return [
        {"lr": lr, "width": width, "depth": depth, "dropout": dropout}
        for lr in (0.001, 0.003, 0.01, 0.03, 0.1, 0.3)
        for width in (64, 128, 256)
        for depth in (2, 4, 8)
        for dropout in (0.0, 0.1, 0.3)
    ]


def _loss(params: dict[str, Any], budget: float) -> float:
    return 0.1 + params["dropout"] / 10 + (1 + params["depth"] / 10) / (1 + params["lr"] * 30 * budget)


def sweep() -> tuple[list[Any], dict]:
    """The sweep's segments' task instances and XComs."""
    from tests.sweep_xcoms import simulate_sweep

    instances, xcoms = simulate_sweep(_space(), RUNGS, _loss)
    if len(instances) != 243:
        raise RuntimeError(f"the sweep has {len(instances)} segments, not 243")
    return instances, xcoms


def make_store(root: str, xcoms: dict) -> Any:
    """Each segment's run with the objective at every epoch it trained, as ``MetricsLogger`` leaves it."""
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    store = FsspecStore(root)
    for pushed in xcoms.values():
        result = pushed.get("return_value")
        if isinstance(result, dict) and "sweep_trial" in result:
            trial = result["sweep_trial"]
            epochs = range(int(trial["previous_budget"] or 0) + 1, int(trial["budget"]) + 1)
            series = [[e, _loss(trial["params"], e)] for e in epochs]
            metrics = {"final": {"val_loss": series[-1][1]}, "series": {"val_loss": series}}
            store.add_metadata(pushed["torchx_run_id"], torchx_metrics=metrics, val_loss=series[-1][1])
    return store


def view(instances: list[Any], xcoms: dict, root: str) -> str:
    """The sweep layout: trials x rungs, the furthest trial's series, its JSON form and its page (a
    new store object, as per request)."""
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins.sweep_render import render_sweep_page
    from torchx_airflow.plugins.sweep_view import SweepView, fill_sweep, read_series, sweep_json

    store = FsspecStore(root)
    sweep_view = SweepView(DAG_ID, DAG_RUN, "sweep")
    fill_sweep(sweep_view, instances, xcoms, "/torchx")
    fields = {
        (s.task_id, s.map_index): {"tracker_conn_ids": ["bench_fs"]}
        for t in sweep_view.trials
        for s in t.segments
    }
    read_series(sweep_view, fields, lambda conn_ids: store)
    data = sweep_json(sweep_view)
    if len(data["trials"]) != 162 or not data["promoted"] or len(data["trials"][0]["series"] or ()) != 243:
        raise RuntimeError(f"the sweep view lost trials, the promoted one or its series: {data['warnings']}")
    return render_sweep_page(data, static_url="/torchx/static", json_url="/j", runs_url="/torchx/compare")


def runs_layout(instances: list[Any], xcoms: dict, root: str) -> list[str]:
    """The same segments in the runs layout: one comparison per rung task, JSON and page."""
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins.compare import Comparison, comparison_json, fill_comparison
    from torchx_airflow.plugins.compare_render import render_compare_page

    store = FsspecStore(root)
    pages = []
    for k in range(len(RUNGS)):
        task_id = f"sweep.rung_{k}"
        rows = [
            SimpleNamespace(
                run_id=DAG_RUN, map_index=ti.map_index, state=ti.state, try_number=1, duration=1.0
            )
            for ti in instances
            if ti.task_id == task_id
        ]
        pushed = {(DAG_RUN, task_id, ti.map_index): xcoms[(task_id, ti.map_index)] for ti in rows}
        rendered = {(DAG_RUN, ti.map_index): {"tracker_conn_ids": ["bench_fs"]} for ti in rows}
        comparison = Comparison(DAG_ID, task_id, DAG_RUN, [])
        fill_comparison(comparison, rows, pushed, rendered, "/torchx", lambda conn_ids: store)
        data = comparison_json(comparison)
        pages.append(render_compare_page(data, static_url="/torchx/static", json_url="/j", query={}))
    return pages


def run() -> list[dict]:
    """The sweep layout of 243 segments, against the runs layout of the same segments."""
    instances, xcoms = sweep()
    with tempfile.TemporaryDirectory(prefix="bench-sweep-view-") as tmp:
        root = f"{tmp}/store"
        make_store(root, xcoms)
        times = interleaved(
            {
                "sweep": lambda: view(instances, xcoms, root),
                "runs": lambda: runs_layout(instances, xcoms, root),
            },
            repeat=REPEATS,
        )
    value = median(times["sweep"])
    return [
        figure(
            "comparison view of a 243-segment sweep (162 trials x 6 rungs)",
            "the runs layout of the same 243 segments (one comparison per rung task), same run",
            "under 1 s",
            value,
            median(times["runs"]),
            "s",
            lambda _ratio: value < TARGET_SECONDS,
            f"median of {REPEATS} views, interleaved, on a local store; each view: the trials and rungs "
            "from the segments' and plans' XComs, the furthest trial's per-epoch series (6 segments' "
            "entries), the JSON form and the page (162 curves, the trials x rungs table); the baseline "
            "reads each run's final metrics and 8 curves per rung; metadata-DB queries not included",
        )
    ]


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
