"""What one comparison view costs for 50 runs on a local fsspec store.

The store holds 1,000 runs: the 50 runs of a sweep, each with a metrics entry as
``torchx_airflow_tracker.metrics`` writes it (three curves of 200 points, three final metrics) and
the provider's metadata (Airflow context, usage, cost), and 950 unrelated runs. The view's work after
its metadata-DB queries is measured: building the 50 rows from their XComs and rendered fields
(``fill_comparison``), reading every run's final metrics, the curves of the 8 runs plotted, the
JSON form, and drawing the page. Target: under 1 s.

Baseline, interleaved in the same process: what a script does without the view, reading the same
50 runs' metadata one after the other with TorchX's own ``FsspecTracker``.

The DB part of a request is four bulk queries whatever the number of rows; it is not in the figure.
"""

from __future__ import annotations

import json
import tempfile
from types import SimpleNamespace
from typing import Any

from bench.common import figure, interleaved, median

RUNS, UNRELATED, POINTS, REPEATS = 50, 950, 200, 5
TARGET_SECONDS = 1.0
DAG_ID, DAG_RUN, TASK_ID = "bench", "manual__1", "train"


def _app(i: int) -> dict[str, Any]:
    return {
        "scheduler": "slurm",
        "app_name": "train",
        "cfg": {"partition": "gpu", "time": "01:00:00"},
        "roles": [
            {
                "name": "trainer",
                "image": "/shared/envs/train",
                "entrypoint": "torchrun",
                "args": ["--nnodes", "1", "train.py", "--lr", str(0.001 * (i + 1)), "--epochs", "200"],
                "num_replicas": 1,
                "resource": {"cpu": 8, "gpu": 1, "memMB": 32000, "capabilities": {}, "devices": {}},
                "env": {"SEED": str(i), "WANDB_API_KEY": "***", "TORCHX_TRACKERS": "airflow_fsspec"},
            }
        ],
    }


def make_store(root: str) -> list[str]:
    """The store: the sweep's runs with metrics and provider metadata, and unrelated runs."""
    from torchx.tracker.api import AppRun
    from torchx_airflow_tracker.fsspec_store import FsspecStore
    from torchx_airflow_tracker.metrics import MetricsLogger

    store = FsspecStore(root)
    handles = [f"slurm://torchx/train-{i}" for i in range(RUNS)]
    for i, handle in enumerate(handles):
        store.add_metadata(handle, airflow_dag_id=DAG_ID, airflow_run_id=DAG_RUN, airflow_task_id=TASK_ID)
        logger = MetricsLogger(AppRun(handle, [store]), rank=0)
        for step in range(1, POINTS + 1):  # the curves, as the job's last write left them
            for name in ("train_loss", "val_loss", "accuracy"):
                logger.series.setdefault(name, []).append((step, 1.0 / (step + i)))
        logger.log(POINTS + 1, train_loss=0.01, val_loss=0.02, accuracy=0.9)
        logger.log_final(test_loss=0.02 + i / 1000, test_accuracy=0.9, epochs=200)
        store.add_metadata(handle, torchx_usage={"source": "sacct", "elapsed_s": 60.0}, torchx_cost={})
    for i in range(UNRELATED):
        store.add_metadata(f"slurm://torchx/unrelated-{i}", lr=0.1)
    return handles


def _inputs(handles: list[str]) -> tuple[list[Any], dict, dict]:
    """What the view's DB queries return for the sweep: task instances, XComs, rendered fields."""
    instances = [
        SimpleNamespace(run_id=DAG_RUN, map_index=i, state="success", try_number=1, duration=61.0)
        for i in range(RUNS)
    ]
    usage = {
        "source": "sacct",
        "elapsed_s": 60.0,
        "totals": {"cpu_hours": 0.13, "gpu_hours": {"a100": 0.017}},
    }
    xcoms = {
        (DAG_RUN, TASK_ID, i): {
            "torchx_run_id": handle,
            "return_value": {
                "state": "SUCCEEDED",
                "usage": usage,
                "cost": {"actual": {"total": 0.05, "currency": "USD"}},
            },
            "torchx_app": _app(i),
        }
        for i, handle in enumerate(handles)
    }
    rendered = {
        (DAG_RUN, i): {
            "component": "dist.ddp",
            "component_args": ["--lr", str(0.001 * (i + 1))],
            "tracker_conn_ids": ["bench_fs"],
        }
        for i in range(RUNS)
    }
    return instances, xcoms, rendered


def view(root: str, handles: list[str]) -> str:
    """One view: rows, metrics, curves of 8 runs, JSON, page (a new store object, as per request)."""
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins.compare import Comparison, comparison_json, fill_comparison
    from torchx_airflow.plugins.compare_render import render_compare_page

    store = FsspecStore(root)
    instances, xcoms, rendered = _inputs(handles)
    comparison = Comparison(DAG_ID, TASK_ID, DAG_RUN, [])
    fill_comparison(comparison, instances, xcoms, rendered, "/torchx", lambda conn_ids: store)
    data = comparison_json(comparison, sort="metric:test_loss")
    assert len(data["runs"]) == RUNS and len(data["series"]) == 8, data["warnings"]
    return render_compare_page(data, static_url="/torchx/static", json_url="/torchx/api/compare", query={})


def baseline(root: str, handles: list[str]) -> None:
    """The same runs' metadata read one by one with TorchX's FsspecTracker."""
    import fsspec
    from torchx.tracker.backend.fsspec import FsspecTracker

    tracker = FsspecTracker(fsspec.filesystem("file"), root)
    for handle in handles:
        tracker.metadata(handle)


def run() -> list[dict]:
    """The view for 50 runs on a 1,000-run local store, against reading their metadata with TorchX."""
    with tempfile.TemporaryDirectory(prefix="bench-compare-view-") as tmp:
        root = f"{tmp}/store"
        handles = make_store(root)
        times = interleaved(
            {"view": lambda: view(root, handles), "torchx": lambda: baseline(root, handles)}, repeat=REPEATS
        )
    value = median(times["view"])
    return [
        figure(
            f"comparison view of {RUNS} runs on a local store of {RUNS + UNRELATED} runs",
            f"TorchX FsspecTracker.metadata() of the {RUNS} runs, one by one",
            "under 1 s",
            value,
            median(times["torchx"]),
            "s",
            lambda _ratio: value < TARGET_SECONDS,
            f"median of {REPEATS} views, interleaved; each view: {RUNS} rows built from their XComs and "
            f"rendered fields, {RUNS} final-metrics reads, the curves of 8 runs (3 curves of {POINTS} points "
            "each), the JSON form and the page; metadata-DB queries not included",
        )
    ]


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row))
