"""Timing helpers shared by the benchmarks: interleaved repetitions, medians, the figure format.

A figure compares a candidate with its baseline measured in the same run, alternating the two so
that whatever else the machine does at that moment weighs on both alike::

    times = interleaved({"ours": lambda: ours.run_ids(parent_run_id=p),
                         "torchx": lambda: theirs.run_ids(parent_run_id=p)}, repeat=15)
    row = figure("fsspec run_ids(parent)", "TorchX FsspecTracker", "<= 0.1",
                 median(times["ours"]), median(times["torchx"]), "s", lambda r: r <= 0.1)
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

Figure = dict[str, Any]
MAX_ERROR_NOTE = 400
UPLOAD_BATCH = 64  # concurrent PUTs into moto
FIELDS = ("figure", "baseline", "target", "value", "baseline_value", "ratio", "unit", "meets_target", "note")


def interleaved(
    candidates: Mapping[str, Callable[[], object]],
    repeat: int,
    warmup: int = 1,
    setup: Callable[[], object] | None = None,
) -> dict[str, list[float]]:
    """Wall times (s) of each candidate, ``repeat`` rounds, the candidates alternating within a round.

    The order inside a round flips every round, so neither side always runs first. ``setup`` runs
    before each timed call, untimed (e.g. to give each call a fresh run id).
    """
    names = list(candidates)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(warmup + repeat):
        order = names if round_index % 2 == 0 else names[::-1]
        for name in order:
            if setup is not None:
                setup()
            start = time.perf_counter()
            candidates[name]()
            elapsed = time.perf_counter() - start
            if round_index >= warmup:
                times[name].append(elapsed)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def figure(
    name: str,
    baseline: str,
    target: str,
    value: float,
    baseline_value: float,
    unit: str,
    meets: Callable[[float], bool],
    note: str = "",
) -> Figure:
    """One row of the table; ``ratio`` is ``value / baseline_value`` and ``meets`` judges the ratio."""
    ratio = value / baseline_value if baseline_value else float("inf")
    return {
        "figure": name,
        "baseline": baseline,
        "target": target,
        "value": value,
        "baseline_value": baseline_value,
        "ratio": ratio,
        "unit": unit,
        "meets_target": bool(meets(ratio)),
        "note": note,
    }


def error_row(module: str, error: BaseException) -> Figure:
    """The row a benchmark module that raised is reported as."""
    return {
        "figure": f"{module}: failed",
        "baseline": "",
        "target": "",
        "value": float("nan"),
        "baseline_value": float("nan"),
        "ratio": float("nan"),
        "unit": "",
        "meets_target": False,
        "note": f"{type(error).__name__}: {str(error)[:MAX_ERROR_NOTE]}",
    }


@contextlib.contextmanager
def store_in_moto(local_root: str, workdir: Path) -> Iterator[tuple[str, dict[str, str], float]]:
    """A store written locally, copied into a bucket of moto's S3 server (started here, stopped on
    exit): yields its URL, its storage options and the upload's seconds.

    One concurrent PUT per file (``fs.pipe``): ``fs.put`` looks each destination up first, and every
    lookup lists the growing bucket on moto.
    """
    import fsspec

    from tests.services import moto_s3_server

    root = Path(local_root)
    files = {
        f"bench/store/{path.relative_to(root).as_posix()}": path.read_bytes()
        for path in root.rglob("*")
        if path.is_file()
    }
    with moto_s3_server(workdir) as endpoint:
        options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
        fs = fsspec.filesystem("s3", **options)
        fs.mkdir("bench")
        start = time.perf_counter()
        fs.pipe(files, batch_size=UPLOAD_BATCH)
        yield "s3://bench/store", options, time.perf_counter() - start


@contextlib.contextmanager
def counting_mlflow_requests() -> Iterator[list[tuple[str, float]]]:
    """The HTTP requests MLflow's client makes in the block, from any thread: (the endpoint's last
    path part, seconds), in the order they ended."""
    from mlflow.utils import rest_utils  # noqa: TID251 - the requests the client makes are counted

    requests: list[tuple[str, float]] = []
    real_request = rest_utils.http_request

    def counting(*args: Any, **kwargs: Any) -> Any:
        endpoint = str(kwargs.get("endpoint") or args[1]).rsplit("/", 1)[-1]
        start = time.perf_counter()
        try:
            return real_request(*args, **kwargs)
        finally:
            requests.append((endpoint, time.perf_counter() - start))

    rest_utils.http_request = counting
    try:
        yield requests
    finally:
        rest_utils.http_request = real_request
