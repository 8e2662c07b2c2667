"""The comparison view's rows, columns and page, from literal inputs: flattened parameters, the
columns that differ, sorting with missing values, the diff, axis ticks at round values, and a page that
escapes what jobs wrote."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest

from torchx_airflow.plugins.compare import (
    Comparison,
    app_params,
    comparison_json,
    fill_comparison,
    rendered_params,
)
from torchx_airflow.plugins.compare_render import nice_ticks, render_compare_page, render_curves

APP = {
    "scheduler": "slurm",
    "cfg": {"partition": "gpu"},
    "roles": [
        {
            "name": "trainer",
            "image": "/envs/train",
            "entrypoint": "torchrun",
            "args": ["train.py", "--lr", "0.1"],
            "num_replicas": 2,
            "resource": {"cpu": 4, "gpu": 1, "memMB": 8000, "capabilities": {}, "devices": {}},
            "env": {"SEED": "1", "API_KEY": "***"},
        }
    ],
}


def test_a_submitted_app_flattens_to_named_parameters():
    assert app_params(APP) == {
        "scheduler": "slurm",
        "cfg.partition": "gpu",
        "image": "/envs/train",
        "entrypoint": "torchrun",
        "args": "train.py --lr 0.1",
        "replicas": "2",
        "resource.cpu": "4",
        "resource.gpu": "1",
        "resource.memMB": "8000",
        "env.SEED": "1",
        "env.API_KEY": "***",
    }
    two_roles = {**APP, "roles": [APP["roles"][0], {**APP["roles"][0], "name": "reader", "args": []}]}
    assert app_params(two_roles)["reader.args"] == "" and "trainer.image" in app_params(two_roles)
    assert app_params({"roles": "junk", "cfg": [1]}) == {}


def test_rendered_fields_flatten_too():
    fields = {"component": "dist.ddp", "component_args": ["-j", "1x2", "--", "--lr", "a b"], "env": {"X": 1}}
    assert rendered_params(fields) == {
        "component": "dist.ddp",
        "component_args": "-j 1x2 -- --lr 'a b'",
        "env.X": "1",
    }


def _comparison(results: list[dict], store) -> Comparison:
    instances = [
        SimpleNamespace(run_id="r1", map_index=i, state="success", try_number=1, duration=2.0)
        for i in range(len(results))
    ]
    xcoms = {("r1", "train", i): pushed for i, pushed in enumerate(results)}
    rendered = {("r1", i): {"tracker_conn_ids": ["fs"]} for i in range(len(results))}
    comparison = Comparison("d", "train", "r1", [])
    fill_comparison(comparison, instances, xcoms, rendered, "/torchx", lambda conn_ids: store)
    return comparison


def test_rows_columns_sorting_and_diff(tmp_path):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    store = FsspecStore(str(tmp_path / "store"))
    for i, loss in enumerate((0.3, 0.1)):
        store.add_metadata(f"local_cwd://torchx/t-{i}", loss=loss)
    seeds = [{**APP, "roles": [{**APP["roles"][0], "env": {"SEED": str(i)}}]} for i in range(3)]
    results = [
        {
            "torchx_run_id": f"local_cwd://torchx/t-{i}",
            "return_value": {"state": "SUCCEEDED"},
            "torchx_app": app,
        }
        for i, app in enumerate(seeds[:2])
    ]
    results.append({})  # a task that never submitted: a row without run or metrics
    comparison = _comparison(results, store)
    assert comparison.differing_params == ["env.SEED"]
    data = comparison_json(comparison, sort="metric:loss", diff=("r1/0", "r1/1"))
    assert [run["key"] for run in data["runs"]] == ["r1/1", "r1/0", "r1/2"]  # no value: last
    assert data["runs"][0]["metrics"] == {"loss": 0.1} and data["runs"][2]["metrics"] == {}
    assert data["runs"][2]["params"] == {"env.SEED": None}
    descending = comparison_json(comparison, sort="metric:loss", order="desc")
    assert [run["key"] for run in descending["runs"]] == ["r1/0", "r1/1", "r1/2"]
    lines = {line["name"]: line for line in data["diff"]["lines"]}
    assert lines["env.SEED"] == {"name": "env.SEED", "a": "0", "b": "1", "same": False}
    assert lines["image"]["same"]


def test_the_page_escapes_what_jobs_wrote(tmp_path):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    store = FsspecStore(str(tmp_path / "store"))
    evil = '<script>alert("x")</script>'
    app = {**APP, "roles": [{**APP["roles"][0], "args": [evil]}]}
    other = {**APP, "roles": [{**APP["roles"][0], "args": ["fine"]}]}
    store.add_metadata("local_cwd://torchx/e", **{evil: 1.0})
    results = [
        {"torchx_run_id": "local_cwd://torchx/e", "torchx_app": app},
        {"torchx_run_id": "local_cwd://torchx/f", "torchx_app": other},
    ]
    data = comparison_json(_comparison(results, store), diff=("r1/0", "r1/1"))
    page = render_compare_page(data, static_url="/s", json_url="/j", query={})
    assert evil not in page and "&lt;script&gt;" in page


def test_curves_scale_to_the_plot_and_a_single_point_is_a_dot():
    svg = render_curves({"a": [[1, 1.0], [3, 0.5]], "b": [[2, 0.75]]}, {"a": "[0]", "b": "[1]"}, "loss")
    assert svg.count("<polyline") == 2 and svg.count("<circle") == 1
    assert 'points="64.0,14.0 744.0,264.0"' in svg  # first point top-left, last bottom-right
    assert "No selected run" in render_curves({}, {}, "loss")


@pytest.mark.parametrize(
    ("low", "high"),
    [(0.1234, 0.9876), (0.2513, 0.3379), (1e-5, 3.2e-5), (-3, 7), (0.5, 0.5), (0, 0), (1, 243), (12.5, 12.7)],
)
def test_ticks_are_round_values_that_cover_the_range(low, high):
    ticks = nice_ticks(low, high)
    assert 3 <= len(ticks) <= 8 and ticks[0] <= low and ticks[-1] >= high
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert min(abs(mantissa - m) for m in (1, 2, 5, 10)) < 1e-6  # 1, 2 or 5 times a power of ten
    for tick in ticks:
        assert abs(tick / step - round(tick / step)) < 1e-6  # on the step's grid, from zero
        assert len(repr(tick).rstrip("0")) <= 9  # printed short: no 0.30000000000000004


def test_the_comparison_plot_labels_round_ticks():
    svg = render_curves({"a": [[1, 0.2513], [7, 0.3379]]}, {"a": "[0]"}, "loss")
    labels = re.findall(r'class="tick"[^>]*>([^<]*)<', svg)
    assert labels[:6] == ["0.24", "0.26", "0.28", "0.3", "0.32", "0.34"]
    assert labels[6:] == ["0", "2", "4", "6", "8"]


def test_sort_keys_order_numbers_texts_and_runs():
    from torchx_airflow.plugins.compare import _sort_key

    values = ["10", "2", "b", "a", 0.5, True, ("r", 10), ("r", 2)]
    assert sorted(values, key=_sort_key) == [0.5, True, "2", "10", "a", "b", ("r", 2), ("r", 10)]


def _curves(store, run_id: str, **series: list[list[float]]) -> None:
    store.add_metadata(run_id, torchx_metrics={"final": {}, "series": series})


def test_curves_are_read_for_the_selected_runs_and_the_drawn_metric_only(tmp_path, monkeypatch):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins import compare

    store = FsspecStore(str(tmp_path / "store"))
    results = []
    for i in range(3):
        run_id = f"local_cwd://torchx/c-{i}"
        _curves(store, run_id, loss=[[1, 1.0 + i], [2, 0.5]], acc=[[1, 0.1 * i]])
        results.append({"torchx_run_id": run_id})
    fetched: list[tuple[str, tuple[str, ...] | None]] = []

    def counting(tracker, run_id, names=None):
        fetched.append((run_id, tuple(names) if names is not None else None))
        return compare_metric_series(tracker, run_id, names)

    compare_metric_series = compare.metric_series
    monkeypatch.setattr(compare, "metric_series", counting)
    data = comparison_json(_comparison(results, store), show=["r1/1"], metric="loss")
    assert data["series_metrics"] == ["acc", "loss"] and data["metric"] == "loss"
    assert data["series"] == {"r1/1": {"loss": [[1, 2.0], [2, 0.5]]}}
    assert fetched == [("local_cwd://torchx/c-1", ("loss",))]  # one run, one curve
    assert (data["curves_not_selected"], data["selected_not_plotted"]) == (2, [])
    page = render_compare_page(data, static_url="/s", json_url="/j", query={})
    assert "Curves of 2 other runs were not read: tick Plot on them" in page


def test_selected_runs_over_the_limit_are_named_as_not_drawn(tmp_path, monkeypatch):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.plugins import compare

    monkeypatch.setattr(compare, "MAX_CURVES", 2)
    store = FsspecStore(str(tmp_path / "store"))
    results = []
    for i in range(3):
        _curves(store, f"local_cwd://torchx/s-{i}", loss=[[1, float(i)]])
        results.append({"torchx_run_id": f"local_cwd://torchx/s-{i}"})
    data = comparison_json(_comparison(results, store), show=["r1/0", "r1/1", "r1/2"])
    assert sorted(data["series"]) == ["r1/0", "r1/1"] and data["selected_not_plotted"] == ["r1/2"]
    page = render_compare_page(data, static_url="/s", json_url="/j", query={})
    assert "1 selected runs are not drawn: the plot takes at most 2 at once (r1/2)" in page


@pytest.mark.parametrize("root", ["local", "memory"])
def test_a_store_entry_over_the_bound_is_not_read_and_the_page_says_so(tmp_path, monkeypatch, root):
    """A job's entry of 9 MiB: the view reads none of it past the bound (8 MiB), keeps the run's
    other metrics, and names what it left out."""
    import uuid

    from torchx_airflow_tracker.fsspec_store import FsspecStore
    from torchx_airflow_tracker.read_limits import ENTRY_BYTES, ReadLimits
    from torchx_airflow_tracker.store_files import StoreFiles

    url = str(tmp_path / "store") if root == "local" else f"memory://cmp-{uuid.uuid4().hex}"
    writer = FsspecStore(url)
    writer.add_metadata("local_cwd://torchx/big", loss=0.25)
    writer.add_metadata("local_cwd://torchx/big", junk="x" * (9 << 20), accuracy=0.9)
    reads: list[int | None] = []
    real_read = StoreFiles.read
    monkeypatch.setattr(
        StoreFiles,
        "read",
        lambda self, path, max_bytes=None: reads.append(max_bytes) or real_read(self, path, max_bytes),
    )
    reader = FsspecStore(url)
    reader.limits = ReadLimits.for_readers()
    data = comparison_json(_comparison([{"torchx_run_id": "local_cwd://torchx/big"}], reader))
    assert data["runs"][0]["metrics"] == {"loss": 0.25}  # the oversized entry's accuracy is not read
    assert reads and None not in reads and max(reads) <= ENTRY_BYTES  # every entry read bounded
    (warning,) = data["warnings"]
    assert warning.startswith("r1 [0]: not read in full (")
    assert f"over {ENTRY_BYTES} bytes (one entry's bound)" in warning
    assert "not read in full" in render_compare_page(data, static_url="/s", json_url="/j", query={})


EXTREMES = [(1.7e308, -1.7e308), (0.0, 5e-324), (1.7e308, 1.7e308), (-5e-324, 5e-324), (1e-310, 3e-310)]


@pytest.mark.parametrize(("low", "high"), EXTREMES)
def test_ticks_of_finite_extremes_cover_the_range_without_failing(low, high):
    """A float's largest and smallest values: no round step spans them, the axis is their range."""
    ticks = nice_ticks(low, high)
    assert ticks and all(math.isfinite(t) for t in ticks)
    assert ticks[0] <= min(low, high) and ticks[-1] >= max(low, high)


@pytest.mark.parametrize(("low", "high"), EXTREMES)
def test_a_plot_of_finite_extremes_places_every_point_inside_it(low, high):
    svg = render_curves({"a": [[0, low], [1, high]], "b": [[10**400, 0.5], [2, high]]}, {}, "loss")
    coords = [
        float(c) for pair in re.findall(r'points="([^"]*)"', svg) for p in pair.split() for c in p.split(",")
    ]
    assert len(coords) == 6  # b's step of 400 digits cannot be placed: left out
    assert all(0 <= c <= 760 for c in coords), svg


def test_layout_sweep_without_a_dag_run_is_a_clear_400():
    """The comparison routes on their own app (the lineage view's read checks and DB session stood
    in for): a sweep is one DAG run's, so the per-DAG route says where to ask instead."""
    import contextlib

    from airflow.api_fastapi.common.db.common import _get_session
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from torchx_airflow.plugins.compare_routes import add_compare_routes

    app = FastAPI()
    limiter = SimpleNamespace(slot=contextlib.nullcontext)
    add_compare_routes(app, [], limiter, lambda text: text)
    app.dependency_overrides[_get_session] = lambda: None
    with TestClient(app) as client:
        for path in ("/compare/d", "/api/compare/d"):
            reply = client.get(path, params={"task_id": "sweep", "layout": "sweep"})
            assert reply.status_code == 400, reply.text
            assert "layout=sweep" in reply.text and "/compare/d/<run_id>?task_id=sweep" in reply.text
