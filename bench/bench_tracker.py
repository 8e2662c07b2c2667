"""Tracker store figures: the fsspec store against TorchX's own ``FsspecTracker`` on the same data
(a local directory, and for ``run_ids(parent)`` also a bucket of moto's S3 server), and the MLflow
store against plain ``MlflowClient`` calls on a real ``mlflow server`` on loopback.

Ratios are our median time over the baseline's median time (below 1: we are faster).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.common import (
    Figure,
    counting_mlflow_requests,
    error_row,
    figure,
    interleaved,
    median,
    store_in_moto,
)

# BENCH_TRACKER_RUNS: a smaller store while iterating (the table's rows use the default)
RUNS, PARENTS = int(os.environ.get("BENCH_TRACKER_RUNS", "10000")), 100  # 100 parents, 99 children each
METADATA_ENTRIES = 1_000
WRITES_PER_CALL = 100


# the S3 rows' store (moto): a LIST page there takes a time that grows with the bucket (S3's does
# not), and TorchX's query makes a request or two per run: over 10,000 runs it would take hours
S3_RUNS, S3_PARENTS = int(os.environ.get("BENCH_TRACKER_S3_RUNS", "1000")), 10


def _fsspec_store_with_runs(root: Path, runs: int = RUNS, parents: int = PARENTS) -> list[str]:
    """A local store of ``runs`` runs written by ours: ``parents`` parents, the rest their children."""
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    ours = FsspecStore(str(root))
    parent_ids = [f"slurm://bench/parent-{i}" for i in range(parents)]
    for i in range(runs - parents):
        child = f"slurm://bench/child-{i}"
        ours.add_metadata(child, i=i)
        ours.add_source(child, parent_ids[i % parents], "data")
    for parent in parent_ids:
        ours.add_metadata(parent, kind="data")
    return parent_ids


def _run_ids_times(
    ours: Callable[[], Any],
    theirs: Any,
    parents: list[str],
    expected_children: int,
    repeat: int,
    warmup: int = 1,
) -> dict[str, list[float]]:
    """Times of run_ids(parent): warm (one store object), cold (``ours()``: a new one per query), TorchX."""
    warm = ours()
    expected = sorted(warm.run_ids(parent_run_id=parents[1]))
    if sorted(theirs.run_ids(parent_run_id=parents[1])) != expected or len(expected) != expected_children:
        raise AssertionError("the two stores disagree on the children of a parent")
    picks = iter(parents * 20)
    return interleaved(
        {
            "warm": lambda: warm.run_ids(parent_run_id=next(picks)),
            "cold": lambda: ours().run_ids(parent_run_id=next(picks)),
            "torchx": lambda: theirs.run_ids(parent_run_id=next(picks)),
        },
        repeat=repeat,
        warmup=warmup,
    )


def _run_ids_rows(times: dict[str, list[float]], where: str, notes: dict[str, str]) -> list[Figure]:
    return [
        figure(
            f"fsspec run_ids(parent) over {where}, {kind}",
            "TorchX FsspecTracker, same store",
            "≤ 0.1 (≥ 10× faster)",
            median(times[kind]),
            median(times["torchx"]),
            "s",
            lambda r: r <= 0.1,
            note,
        )
        for kind, note in notes.items()
    ]


def _run_ids_figures(tmp: Path) -> list[Figure]:
    import time

    import fsspec
    from torchx.tracker.backend.fsspec import FsspecTracker
    from torchx_airflow_tracker.fsspec_store import FsspecStore
    from torchx_airflow_tracker.root_listing import RACY_WINDOW_NS

    root = str(tmp / "runs")
    parents = _fsspec_store_with_runs(tmp / "runs")
    # as a store is when jobs wrote to it a while ago (a root changed within the last 2 s is listed
    # again on every query, its stamp being too recent to trust)
    past = time.time_ns() - 2 * RACY_WINDOW_NS
    os.utime(root, ns=(past, past))
    theirs = FsspecTracker(fsspec.filesystem("file"), root)
    times = _run_ids_times(lambda: FsspecStore(root), theirs, parents, RUNS // PARENTS - 1, repeat=7)
    return _run_ids_rows(
        times,
        f"{RUNS:,} runs",
        {
            "warm": "the same store object again, the root unchanged: its last listing is reused",
            "cold": "a new store object per query (a new job or process): one listing of the root",
        },
    )


def _s3_run_ids_figures(tmp: Path) -> list[Figure]:
    import fsspec
    from torchx.tracker.backend.fsspec import FsspecTracker
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    parents = _fsspec_store_with_runs(tmp / "runs", S3_RUNS, S3_PARENTS)
    with store_in_moto(str(tmp / "runs"), tmp) as (url, options, upload):
        theirs = FsspecTracker(fsspec.filesystem("s3", **options), url.removeprefix("s3://"))
        times = _run_ids_times(
            lambda: FsspecStore(url, options), theirs, parents, S3_RUNS // S3_PARENTS - 1, repeat=3, warmup=0
        )  # no warm-up round: the check above made one query on each side
    where = f"S3 (moto): {S3_RUNS:,} runs, written locally and uploaded in {upload:.0f} s"
    listing = "one listing of the root (an object store has no stamp to reuse it by)"
    return _run_ids_rows(
        times,
        f"{S3_RUNS:,} runs on S3 (moto)",
        {
            "warm": f"the same store object again: {listing}; {where}",
            "cold": f"a new store object per query: {listing}; TorchX's lists the root, then looks "
            "for the parent's file in every run",
        },
    )


def _metadata_figure(tmp: Path) -> Figure:
    import fsspec
    from torchx.tracker.backend.fsspec import FsspecTracker
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    root = tmp / "metadata"
    ours = FsspecStore(str(root))
    run = "slurm://bench/metadata-1"
    for i in range(METADATA_ENTRIES):
        ours.add_metadata(run, **{f"k{i % 50}": i, "step": i})
    theirs = FsspecTracker(fsspec.filesystem("file"), str(root))  # TorchX's asserts the root exists
    if ours.metadata(run)["step"] != METADATA_ENTRIES - 1:
        raise AssertionError("the later write did not win")
    times = interleaved(
        {"ours": lambda: ours.metadata(run), "torchx": lambda: theirs.metadata(run)}, repeat=9
    )
    return figure(
        f"fsspec metadata() of {METADATA_ENTRIES:,} entries",
        "TorchX FsspecTracker, same store",
        "≤ 1 (not slower)",
        median(times["ours"]),
        median(times["torchx"]),
        "s",
        lambda r: r <= 1.0,
    )


def _write_figures(tmp: Path) -> list[Figure]:
    import fsspec
    from torchx.tracker.backend.fsspec import FsspecTracker
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    (tmp / "w-torchx").mkdir()  # TorchX's tracker wants its root to exist
    stores = {
        "ours": FsspecStore(str(tmp / "w-ours")),
        "torchx": FsspecTracker(fsspec.filesystem("file"), str(tmp / "w-torchx")),
    }

    def entries(store: object) -> None:
        prefix = f"slurm://bench/w-{uuid.uuid4().hex[:8]}"
        for i in range(WRITES_PER_CALL):
            store.add_metadata(f"{prefix}-{i % 10}", lr=0.1, step=i)  # type: ignore[attr-defined]
            store.add_artifact(f"{prefix}-{i % 10}", f"ckpt{i}", f"/ckpt/{i}.pt", {"step": i})  # type: ignore[attr-defined]

    def edges(store: object) -> None:
        prefix = f"slurm://bench/e-{uuid.uuid4().hex[:8]}"
        for i in range(WRITES_PER_CALL):
            store.add_source(f"{prefix}-{i}", f"{prefix}-parent", "data")  # type: ignore[attr-defined]

    rows = []
    for label, work, target, limit, note in (
        (
            "add_metadata + add_artifact",
            entries,
            "≤ 1.2",
            1.2,
            "per call 100 of each over 10 runs",
        ),
        (
            "add_source",
            edges,
            "≤ 1.2",
            1.2,
            "per new edge (a new run) both make the run and sources/ directories and write one file "
            "(the sources/ line); ours adds a hard link to it under the root, the first-edge marker "
            "(reverse edge and index marker in one, what makes run_ids(parent) fast; TorchX 0.7 "
            "writes none)",
        ),
    ):
        # writes meet the shared disk's noise: more, shorter rounds than the reads
        times = interleaved({name: (lambda s=s, w=work: w(s)) for name, s in stores.items()}, repeat=21)
        rows.append(
            figure(
                f"fsspec writes: {label}",
                "TorchX FsspecTracker",
                target,
                median(times["ours"]),
                median(times["torchx"]),
                "s",
                lambda r, limit=limit: r <= limit,
                note,
            )
        )
    return rows


def _mlflow_figures(tmp: Path) -> list[Figure]:
    from mlflow.tracking import MlflowClient  # noqa: TID251 - the baseline talks to MLflow directly
    from torchx_airflow_tracker.mlflow_store import MlflowStore

    keys = 100
    with _mlflow_server(tmp) as uri:
        store = MlflowStore(uri, "bench")
        client = MlflowClient(uri)
        existing = "slurm://bench/existing"
        store.add_metadata(existing, created=True)
        mlflow_id = store.mlflow_run_id(existing)
        rounds = iter(range(1000))

        def ours_existing() -> None:
            r = next(rounds)
            store.add_metadata(existing, **{f"o{r}_{k}": k for k in range(keys)})

        def params_existing() -> None:
            r = next(rounds)
            for k in range(keys):
                client.log_param(mlflow_id, f"p{r}_{k}", k)

        existing_times = interleaved({"ours": ours_existing, "log_param": params_existing}, repeat=5)

        made: dict[str, list[list[tuple[str, float]]]] = {"ours": [], "log_param": [], "direct": []}

        def counted(kind: str, call: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:  # every candidate alike: its requests and their times are kept
                with counting_mlflow_requests() as requests:
                    call()
                made[kind].append(requests)

            return run

        def ours_new() -> None:
            MlflowStore(uri, "bench").add_metadata(
                f"slurm://bench/new-{uuid.uuid4().hex}", **{f"k{k}": k for k in range(keys)}
            )

        experiment_id = store.experiment_id

        def params_new() -> None:
            run = client.create_run(experiment_id, run_name=f"plain-{uuid.uuid4().hex}")
            for k in range(keys):
                client.log_param(run.info.run_id, f"k{k}", k)

        candidates = {"ours": ours_new, "log_param": params_new, "direct": _direct_new_run(uri, keys)}
        new_times = interleaved({kind: counted(kind, call) for kind, call in candidates.items()}, repeat=7)
        creation = interleaved(
            {
                "ours": lambda: MlflowStore(uri, "bench").add_metadata(
                    f"slurm://bench/c-{uuid.uuid4().hex}", a=1
                )
            },
            repeat=5,
        )
    ours_requests = [endpoint for endpoint, _ in made["ours"][-1]]
    if any([e for e, _ in requests] != ours_requests for requests in made["ours"] + made["direct"]):
        raise AssertionError(f"the floor no longer makes the store's requests {ours_requests}: update it")
    # each of the store's requests, in the baseline's average request (same rounds, warm-up left out)
    baseline_request = median([seconds for requests in made["log_param"][1:] for _, seconds in requests])
    weights = [
        median([requests[i][1] for requests in made["ours"][1:]]) / baseline_request
        for i in range(len(ours_requests))
    ]
    weighs = ", ".join(
        f"{endpoint} {weight:.1f}" for endpoint, weight in zip(ours_requests, weights, strict=True)
    )
    baseline_count = len(made["log_param"][-1])
    return [
        figure(
            f"MLflow: {keys} keys on an existing run",
            f"{keys} × MlflowClient.log_param",
            "≤ 0.05 (≥ 20× faster)",
            median(existing_times["ours"]),
            median(existing_times["log_param"]),
            "s",
            lambda r: r <= 0.05,
        ),
        figure(
            f"MLflow: requests for a new run including creation, {keys} keys",
            f"create_run + {keys} × log_param",
            "≤ 5 requests (≥ 20× fewer); no fixed sleep",
            float(len(ours_requests)),
            float(baseline_count),
            "requests",
            lambda r: r <= 0.05,
            f"{', '.join(ours_requests)}: the experiment lookup names the claims run, create_run "
            "carries the first batch of tags, one log_batch the run id tag and the metrics; a rank "
            "that loses the claim makes more (tests/tracker/test_mlflow_store.py races them)",
        ),
        figure(
            f"MLflow: a new run including creation, {keys} keys",
            f"create_run + {keys} × log_param",
            "≤ 0.12 (≥ 8× faster; 20× is out of reach, see the note)",
            median(new_times["ours"]),
            median(new_times["log_param"]),
            "s",
            lambda r: r <= 0.12,
            f"each request of the store in the baseline's median request (same rounds): {weighs}; "
            f"{sum(weights):.1f} in all, where 20× faster would need ≤ {baseline_count / 20:.2f}. "
            "The baseline writes 100 params in 101 requests of one entity each; the store writes "
            "100 tags, 100 metrics (numbers are also MLflow metrics), 2 bookkeeping tags and a claim, "
            "race-safe, and its search for an existing run alone weighs more than one request. The "
            "row below times the same five requests made directly. A new run with one key: "
            f"{median(creation['ours']) * 1000:.0f} ms median. Jobs launched by the operator write "
            "to a run the launcher already created (the first MLflow row)",
        ),
        figure(
            f"MLflow: a new run, {keys} keys, against its own requests made directly",
            f"the same {len(ours_requests)} requests through MlflowClient",
            "≤ 1.15 (the store adds little to the requests it must make)",
            median(new_times["ours"]),
            median(new_times["direct"]),
            "s",
            lambda r: r <= 1.15,
            "get-by-name, search, create_run with the same tags, the claim, log_batch with the run "
            f"id tag and {keys} metrics (checked: the same requests in the same order): the floor "
            "of a race-safe new run that keeps numbers as MLflow metrics",
        ),
    ]


def _direct_new_run(uri: str, keys: int) -> Callable[[], None]:
    """The store's requests for a new run of ``keys`` numbers, made with ``MlflowClient`` alone."""
    import time

    from mlflow.entities import Metric, RunTag  # noqa: TID251 - the floor talks to MLflow directly
    from mlflow.tracking import MlflowClient  # noqa: TID251
    from torchx_airflow_tracker import mlflow_store
    from torchx_airflow_tracker.mlflow_tags import _batches, _encode_all

    values = {f"k{k}": k for k in range(keys)}
    entries, metrics = mlflow_store._metadata_entries(values)
    parts, tags = _encode_all(entries)

    def direct() -> None:
        run_id = f"slurm://bench/direct-{uuid.uuid4().hex}"
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("bench")
        assert experiment is not None
        client.search_runs(
            [experiment.experiment_id],
            filter_string=f"tags.`{mlflow_store.RUN_ID_TAG}` = {mlflow_store._quote(run_id)}",
            max_results=1000,
        )
        first, rest = mlflow_store._first_batch({**parts, **tags})
        mine = client.create_run(
            experiment.experiment_id, run_name=run_id, tags={**first, mlflow_store.CANDIDATE_TAG: run_id}
        ).info.run_id
        claims = experiment.tags[mlflow_store.REGISTRY_TAG]
        client.log_param(claims, f"{mlflow_store._digest(run_id)}.0", mine)
        now = int(time.time() * 1000)
        metric_list = [Metric(k, v, now, 0) for k, v in metrics.items()]
        for i, batch in enumerate(_batches({mlflow_store.RUN_ID_TAG: run_id, **rest})):
            tag_list = [RunTag(k, v) for k, v in batch]
            client.log_batch(mine, metrics=metric_list if i == 0 else [], tags=tag_list)

    return direct


@contextlib.contextmanager
def _mlflow_server(workdir: Path) -> Iterator[str]:
    """``mlflow server`` (SQLite backend) on a free loopback port, one worker process.

    One worker, unlike the tests' server: uvicorn's supervisor of several workers kills a worker
    that misses its health check, which happens on a loaded machine before the server ever answers.
    """
    from tests.services import mlflow_server_process

    with mlflow_server_process(workdir, workers=1) as (uri, _):
        yield uri


def run() -> list[Figure]:
    rows: list[Figure] = []
    with tempfile.TemporaryDirectory(prefix="bench-tracker-") as tmp_name:
        tmp = Path(tmp_name)
        sections: list[tuple[str, Callable[[Path], list[Figure]]]] = [
            ("fsspec run_ids(parent)", _run_ids_figures),
            ("fsspec run_ids(parent) on S3", _s3_run_ids_figures),
            ("fsspec metadata()", lambda t: [_metadata_figure(t)]),
            ("fsspec writes", _write_figures),
            ("MLflow", _mlflow_figures),
        ]
        for index, (name, section) in enumerate(sections):
            workdir = tmp / str(index)
            workdir.mkdir()
            try:  # one section failing (e.g. the server not starting) leaves the others' rows
                rows += section(workdir)
            except Exception as e:  # reported as the section's row
                rows.append(error_row(f"bench_tracker: {name}", e))
    return rows
