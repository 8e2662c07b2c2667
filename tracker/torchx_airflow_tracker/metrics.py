"""Step and final metrics from training code, to every tracker the job was given.

TorchX's ``AppRun`` records metadata and artifacts but no metrics. Inside a job::

    from torchx_airflow_tracker.metrics import log_final_metrics, log_metrics

    for epoch in range(1, epochs + 1):
        loss = train_one_epoch()
        log_metrics(epoch, train_loss=loss)  # a step metric: one point of a curve
    log_final_metrics(val_loss=evaluate())  # what the run is judged by

Every rank may call these: by default only global rank 0 (``RANK``, else ``SLURM_PROCID``, else 0)
writes, the other ranks' calls do nothing, so a run holds each point once. With
``MetricsLogger(every_rank=True)`` every rank writes, each under its own names (``train_loss.rank1``).

What lands where:

- **MLflow store**: real MLflow metrics (``log_batch``, with the step), so the MLflow UI plots them;
  final metrics are numeric metadata, which that store logs as metrics too.
- **fsspec store**: one metadata entry per writing process, under the key ``torchx_metrics``
  (``METRICS_KEY``), replaced on each call: ``{"final": {name: value}, "series": {name: [[step,
  value], ...]}}``. TorchX's own readers (``AppRun``, ``FsspecTracker.metadata``) read it as ordinary
  metadata. Each series keeps at most ``MAX_POINTS`` points: past that, every other point is dropped
  (the curve keeps its whole range at half the resolution), so an entry stays small.
- **any other TorchX tracker**: ``add_metadata(torchx_metrics=...)``, the same entry as on fsspec.

Final metrics are numeric metadata: ``log_final_metrics(loss=0.1)`` is ``add_metadata(loss=0.1)``,
and numbers a job already writes with ``add_metadata`` count as final metrics when read back. A
metric is a finite ``int`` or ``float`` (not ``bool``); anything else raises ``MetricValueError``
before anything is written.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from torchx_airflow_tracker.protocol import MetricsStore

if TYPE_CHECKING:
    from torchx.tracker.api import AppRun, TrackerBase

#: the metadata key of a writer's metrics entry (fsspec stores and other TorchX trackers)
METRICS_KEY = "torchx_metrics"
#: at most this many points per series in a metrics entry (readers bound what they read the same way)
MAX_POINTS = 1000
#: at most this many metric names per writer
MAX_NAMES = 100
#: the longest metric name (MLflow's key limit)
MAX_NAME = 250


class MetricValueError(ValueError):
    """A metric name, value or step that cannot be recorded."""


def process_rank() -> int:
    """This process's global rank: ``RANK`` (torchrun), else ``SLURM_PROCID``, else 0."""
    for name in ("RANK", "SLURM_PROCID"):
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def check_metrics(metrics: Mapping[str, object]) -> dict[str, float]:
    """``metrics`` as ``{name: float}``; ``MetricValueError`` naming the first bad name or value."""
    checked = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name or len(name) > MAX_NAME:
            raise MetricValueError(
                f"Metric name {name!r} is not a non-empty string of at most {MAX_NAME} characters; rename it."
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
            raise MetricValueError(
                f"Metric {name!r} = {value!r} is not a finite number: log an int or a float "
                "(e.g. float(loss.item())), and skip NaN and infinity."
            )
        checked[name] = float(value)
    return checked


def _finite(value: float) -> bool:
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an int past float range
        return False


def thin(points: list[tuple[int, float]], limit: int = MAX_POINTS) -> list[tuple[int, float]]:
    """``points`` with every other one dropped until at most ``limit`` remain; the last one kept."""
    while len(points) > limit:
        last = points[-1]
        points = points[::2]
        if points[-1] != last:
            points[-1] = last
    return points


class MetricsLogger:
    """Writes step and final metrics of one run to every tracker of its ``AppRun``.

    :param run: the run (default ``AppRun.run_from_env()``, the job's run).
    :param every_rank: write from every rank, each metric named ``<name>.rank<N>``; by default
        only rank 0 writes.
    :param rank: this process's rank (default ``process_rank()``).
    """

    def __init__(
        self, run: AppRun | None = None, *, every_rank: bool = False, rank: int | None = None
    ) -> None:
        if run is None:
            from torchx.tracker.api import AppRun

            run = AppRun.run_from_env()
        self.run = run
        self.rank = process_rank() if rank is None else rank
        self.writes = every_rank or self.rank == 0
        self.suffix = f".rank{self.rank}" if every_rank else ""
        # the entry's metadata key: one per rank when every rank writes (a metadata read merges
        # entries by key, so ranks sharing one key would keep only the last rank's curves)
        self.key = f"{METRICS_KEY}{self.suffix}"
        # this process's entry on fsspec stores: one name, replaced on every write
        self.entry_name = _entry_name()
        self.final: dict[str, float] = {}
        self.series: dict[str, list[tuple[int, float]]] = {}
        self._lock = threading.Lock()

    def _named(self, metrics: Mapping[str, object]) -> dict[str, float]:
        checked = check_metrics(metrics)
        named = {f"{name}{self.suffix}": value for name, value in checked.items()}
        new = set(named) - set(self.series) - set(self.final)
        if len(set(self.series) | set(self.final)) + len(new) > MAX_NAMES:
            raise MetricValueError(
                f"Too many metric names: at most {MAX_NAMES} per run and writer, and {sorted(new)!r} "
                "would pass that. Log fewer names (e.g. one per loss, not one per batch)."
            )
        return named

    def log(self, step: int, **metrics: float) -> None:
        """Record one point (``step``, value) of each named metric's curve."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise MetricValueError(f"Metric step {step!r} is not an int >= 0: pass e.g. the epoch number.")
        named = self._named(metrics)
        if not self.writes or not named:
            return
        with self._lock:
            for name, value in named.items():
                points = self.series.setdefault(name, [])
                points.append((step, value))
                self.series[name] = thin(points)
            entry = self.entry()
        for backend in self._backends():
            if isinstance(backend, MetricsStore):  # this package's stores
                backend.log_metrics(self.run.id, named, step, entry, self.entry_name, key=self.key)
            else:  # TorchX's own trackers: the curve as metadata
                backend.add_metadata(self.run.id, **{self.key: entry})

    def log_final(self, **metrics: float) -> None:
        """Record the run's final metrics (numeric metadata)."""
        named = self._named(metrics)
        if not self.writes or not named:
            return
        with self._lock:
            self.final.update(named)
        self.run.add_metadata(**named)

    def entry(self) -> dict[str, Any]:
        """This writer's metrics entry: ``{"final": {...}, "series": {name: [[step, value], ...]}}``."""
        return {
            "final": {name: points[-1][1] for name, points in self.series.items()},
            "series": {name: [list(p) for p in points] for name, points in self.series.items()},
        }

    def _backends(self) -> Iterable[TrackerBase]:
        return self.run.backends


def _entry_name() -> str:
    from torchx_airflow_tracker.fsspec_store import entry_name

    return entry_name() + "-metrics"


_default: MetricsLogger | None = None
_default_lock = threading.Lock()


def default_logger() -> MetricsLogger:
    """The job's logger: ``AppRun.run_from_env()``, rank 0 writes (made on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MetricsLogger()
        return _default


def log_metrics(step: int, **metrics: float) -> None:
    """Record one point of each named metric's curve at ``step``, from the job's run.

    >>> log_metrics(3, train_loss=0.25, accuracy=0.91)  # doctest: +SKIP
    """
    default_logger().log(step, **metrics)


def log_final_metrics(**metrics: float) -> None:
    """Record the job's final metrics (numeric metadata of the run).

    >>> log_final_metrics(val_loss=0.12)  # doctest: +SKIP
    """
    default_logger().log_final(**metrics)
