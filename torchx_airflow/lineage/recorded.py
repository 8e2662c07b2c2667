"""What a run recorded in a tracker store (metadata, artifacts, sources, final metrics), read back as
JSON-safe values when the run ends: the worker's record of it, which every later decision about the
run (a promotion, a comparison's choice) takes instead of reading the store again, since any job
tracking to the store may write into the run later."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from torchx_airflow.apps import json_safe
from torchx_airflow.secrets import strip_userinfo

if TYPE_CHECKING:
    from torchx_airflow_tracker.protocol import ProviderStore

log = logging.getLogger(__name__)

NO_RESULTS: dict[str, Any] = {"metadata": {}, "artifacts": {}, "sources": [], "metrics": {}}


def run_results(store: ProviderStore, run_id: str) -> dict[str, Any]:
    """The run's metadata, artifacts, sources and final metrics (``lineage.metrics.final_metrics``:
    its numeric metadata and each curve's last point) from ``store``, JSON-safe, for XCom.

    They are read within ``ReadLimits`` bounds counted afresh for this run. The job writes the
    paths: a URL's user info (``https://bob:pw@host/x``) is taken out of every artifact path and
    source id, since XComs, asset events and lineage are read by people.
    """
    from torchx_airflow.lineage.metrics import final_metrics

    # the run's own results get a total of their own: reads of other runs before them (its parents'
    # artifacts, cache keys) never cut them
    store.limits = store.limits.renewed()
    try:
        metadata = dict(store.metadata(run_id))
        metrics = final_metrics(store, run_id)
        artifacts = {
            name: {"name": a.name, "path": strip_userinfo(str(a.path)), "metadata": dict(a.metadata or {})}
            for name, a in store.artifacts(run_id).items()
        }
        sources = sorted({strip_userinfo(s.source_run_id) for s in store.sources(run_id)})
    except Exception as e:
        log.warning("Could not read the results of %s from %r: %s: %s", run_id, store, type(e).__name__, e)
        return {key: type(value)() for key, value in NO_RESULTS.items()}
    return json_safe({"metadata": metadata, "artifacts": artifacts, "sources": sources, "metrics": metrics})
