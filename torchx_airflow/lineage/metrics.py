"""A run's metrics read back from a tracker store: its final metrics and its curves.

What jobs write with ``torchx_airflow_tracker.metrics`` (and numbers they write as metadata) is read
here for the comparison view and promotion. A store may hold what any job wrote (see the trust
section of the architecture), so everything read is bounded and checked: at most ``MAX_METRICS``
final metrics, ``MAX_SERIES`` curves of ``MAX_POINTS`` points each, names of at most ``MAX_NAME``
characters; NaN, infinity, booleans and non-numbers are skipped; a store that fails or holds junk
gives what could be read (maybe nothing), never an exception.

- ``final_metrics``: numeric metadata of the run (the provider's own ``airflow_*``/``torchx_*`` keys
  left out), over the last point of each curve; on MLflow, also the run's MLflow metrics.
- ``metric_series``: the curves: on fsspec stores (and other TorchX trackers) the ``torchx_metrics``
  metadata entry; on MLflow, the metric history of every metric logged with steps.

Importing this module imports neither mlflow nor s3fs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from torchx_airflow_tracker.metrics import MAX_NAME, MAX_POINTS, METRICS_KEY, thin

from torchx_airflow.lineage.keys import METADATA_PREFIX

if TYPE_CHECKING:
    from torchx.tracker.api import TrackerBase
    from torchx_airflow_tracker.protocol import ProviderStore

log = logging.getLogger(__name__)

MAX_METRICS = 200
MAX_SERIES = 50
#: MLflow: at most this many points of one metric are fetched (then thinned to ``MAX_POINTS``)
MAX_FETCHED_POINTS = 10_000
# metadata the provider itself writes (attempt numbers, usage, cost): not the job's metrics
PROVIDER_PREFIXES = (METADATA_PREFIX, "torchx_")

Series = dict[str, list[tuple[int, float]]]


def as_metric(value: object) -> float | None:
    """``value`` as a finite float, or None (booleans, strings, NaN, infinity, huge ints)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _name_ok(name: object) -> bool:
    return isinstance(name, str) and 0 < len(name) <= MAX_NAME


def final_metrics(tracker: TrackerBase | ProviderStore, run_id: str) -> dict[str, float]:
    """The run's final metrics ``{name: value}``; ``{}`` when there are none or the store fails.

    A number the job wrote as metadata wins over the last point of a curve of the same name.
    """
    try:
        return _final_metrics(_first_store(tracker), run_id)
    except Exception as e:  # a stranger's store: what cannot be read is left out
        log.warning("Could not read the metrics of %s from %r: %s: %s", run_id, tracker, type(e).__name__, e)
        return {}


def metric_series(
    tracker: TrackerBase | ProviderStore, run_id: str, names: Collection[str] | None = None
) -> dict[str, list[tuple[int, float]]]:
    """The run's curves ``{name: [(step, value), ...]}`` sorted by step (only ``names`` when given:
    on MLflow the others' histories are not fetched); ``{}`` on failure."""
    try:
        return _metric_series(_first_store(tracker), run_id, names)
    except Exception as e:
        log.warning("Could not read the curves of %s from %r: %s: %s", run_id, tracker, type(e).__name__, e)
        return {}


def curve_names(tracker: TrackerBase | ProviderStore, run_id: str) -> list[str]:
    """The names of the run's curves, sorted, without their points where the store keeps them apart
    (MLflow: one read of the run); ``[]`` on failure."""
    try:
        store: Any = _first_store(tracker)
        if _is_mlflow(store):
            return _mlflow_series_keys(store, store.mlflow_run_id(run_id))
        return sorted(_series_from_metadata(store.metadata(run_id)))
    except Exception as e:
        log.warning("Could not read the curves of %s from %r: %s: %s", run_id, tracker, type(e).__name__, e)
        return []


def _first_store(tracker: TrackerBase | ProviderStore) -> TrackerBase | ProviderStore:
    """The store results are read from: the first of a ``MultiStore``, else the store itself."""
    from torchx_airflow_tracker.multi_store import MultiStore

    if isinstance(tracker, MultiStore) and tracker.stores:
        return tracker.stores[0]
    return tracker


def _is_mlflow(store: TrackerBase | ProviderStore) -> bool:
    from torchx_airflow_tracker.mlflow_store import MlflowStore  # imports no mlflow

    return isinstance(store, MlflowStore)


def _final_metrics(store: TrackerBase | ProviderStore, run_id: str) -> dict[str, float]:
    metadata = store.metadata(run_id)
    found: dict[str, float] = {}
    if _is_mlflow(store):
        found.update(_bounded(_job_keys(_mlflow_run_metrics(store, run_id))))
    else:
        for name, points in _series_from_metadata(metadata).items():
            found[name] = points[-1][1]
    found.update(_bounded(_job_keys(metadata)))
    return dict(list(found.items())[:MAX_METRICS])


def _bounded(values: Mapping[Any, Any]) -> dict[str, float]:
    """``values`` that are finite numbers under acceptable names, at most ``MAX_METRICS``."""
    checked: dict[str, float] = {}
    for name, value in values.items():
        number = as_metric(value)
        if number is not None and _name_ok(name):
            checked[name] = number
            if len(checked) >= MAX_METRICS:
                break
    return checked


def _job_keys(values: Mapping[str, object]) -> dict[str, object]:
    """``values`` without the keys the provider writes itself."""
    return {k: v for k, v in values.items() if isinstance(k, str) and not k.startswith(PROVIDER_PREFIXES)}


def _metric_series(store: TrackerBase | ProviderStore, run_id: str, names: Collection[str] | None) -> Series:
    if _is_mlflow(store):
        return _mlflow_series(store, run_id, names)
    series = _series_from_metadata(store.metadata(run_id))
    return series if names is None else {k: v for k, v in series.items() if k in names}


def _series_from_metadata(metadata: Mapping[str, object]) -> Series:
    """Curves of the ``torchx_metrics`` entries (``torchx_metrics``, and ``torchx_metrics.*`` of
    other writers), each checked; junk inside is skipped point by point."""
    series: Series = {}
    for key, entry in metadata.items():
        if not (isinstance(key, str) and key.split(".", 1)[0] == METRICS_KEY and isinstance(entry, dict)):
            continue
        curves = entry.get("series")
        if not isinstance(curves, dict):
            continue
        for name, points in curves.items():
            if len(series) >= MAX_SERIES:
                return series
            checked = _points(points)
            if _name_ok(name) and checked:
                series[name] = checked
    return series


def _points(points: object) -> list[tuple[int, float]]:
    """``[[step, value], ...]`` checked: int steps >= 0, finite values; sorted, at most ``MAX_POINTS``."""
    if not isinstance(points, list):
        return []
    by_step: dict[int, float] = {}
    for point in points[:MAX_FETCHED_POINTS]:
        if not isinstance(point, list | tuple) or len(point) != 2:
            continue
        step, value = point[0], as_metric(point[1])
        if isinstance(step, bool) or not isinstance(step, int) or step < 0 or value is None:
            continue
        by_step[step] = value  # the later point of a step wins
    return thin(sorted(by_step.items()), MAX_POINTS)


# MLflow


def _mlflow_run(store: Any, run_id: str) -> Any:
    mlflow_id = store.mlflow_run_id(run_id)
    return None if mlflow_id is None else store.client.get_run(mlflow_id)


def _mlflow_run_metrics(store: Any, run_id: str) -> dict[str, float]:
    """The run's MLflow metrics (the latest value of each), which covers metrics the job logged with
    ``mlflow`` directly."""
    run = _mlflow_run(store, run_id)
    return {} if run is None else dict(run.data.metrics)


def _mlflow_series_keys(store: Any, mlflow_id: str | None) -> list[str]:
    """The metrics of the run logged with steps (tagged ``torchx.series.<key>``), at most ``MAX_SERIES``."""
    from torchx_airflow_tracker.mlflow_store import SERIES_PREFIX

    if mlflow_id is None:
        return []
    tags = store.client.get_run(mlflow_id).data.tags
    return sorted({v for k, v in tags.items() if k.startswith(SERIES_PREFIX) and _name_ok(v)})[:MAX_SERIES]


def _mlflow_series(store: Any, run_id: str, names: Collection[str] | None) -> Series:
    """The history of each metric logged with steps (of ``names`` only, when given), bounded."""
    mlflow_id = store.mlflow_run_id(run_id)
    if mlflow_id is None:
        return {}
    keys = _mlflow_series_keys(store, mlflow_id)
    series: Series = {}
    for key in keys if names is None else [k for k in keys if k in names]:
        points = _points([[m.step, m.value] for m in _history(store, mlflow_id, key)])
        if points:
            series[key] = points
    return series


def _history(store: Any, mlflow_id: str, key: str) -> list[Any]:
    """At most ``MAX_FETCHED_POINTS`` points of a metric, fetched page by page."""
    backend = store.client._tracking_client.store  # MlflowClient's own call would fetch every page
    points: list[Any] = []
    token = None
    while len(points) < MAX_FETCHED_POINTS:
        page = backend.get_metric_history(
            mlflow_id, key, max_results=min(5000, MAX_FETCHED_POINTS - len(points)), page_token=token
        )
        points.extend(page)
        token = getattr(page, "token", None)
        if not token or not page:
            break
    return points
