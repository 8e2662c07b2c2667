"""``torchx-airflow-tracker`` (or ``python -m torchx_airflow_tracker``): inspect a tracker store.

    torchx-airflow-tracker --fsspec s3://bucket/tracker show 'slurm://torchx/1234'
    torchx-airflow-tracker --mlflow http://127.0.0.1:5000 lineage 'slurm://torchx/1234' --format mermaid
    torchx-airflow-tracker list --parent 'slurm://torchx/1200'
    torchx-airflow-tracker --fsspec /data/tracker cache list
    torchx-airflow-tracker --fsspec /data/tracker cache delete <key>   # the next such task runs again

Without --fsspec/--mlflow the store comes from the job environment (TORCHX_TRACKERS and
TORCHX_TRACKER_<NAME>_CONFIG), the first one configured.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from torchx.tracker.api import TrackerBase

from torchx_airflow_tracker.protocol import ProviderStore
from torchx_airflow_tracker.run_graph import EdgeQueries, RunLineage


def _store(args: argparse.Namespace) -> TrackerBase:
    if args.fsspec:
        from torchx_airflow_tracker.fsspec_store import FsspecStore

        return FsspecStore(args.fsspec, json.loads(args.storage_options) if args.storage_options else None)
    if args.mlflow:
        from torchx_airflow_tracker.mlflow_store import MlflowStore

        return MlflowStore(args.mlflow, args.experiment)
    from torchx.tracker.api import trackers_from_environ

    stores = list(trackers_from_environ())
    if not stores:
        raise SystemExit("No store given: pass --fsspec URL or --mlflow URI, or set TORCHX_TRACKERS.")
    return stores[0]


def _lineage(store: TrackerBase, run_id: str, depth: int) -> RunLineage:
    if not isinstance(store, EdgeQueries):
        raise SystemExit(f"{store!r} keeps no lineage graph: pass --fsspec URL or --mlflow URI.")
    return store.lineage(run_id, depth=depth)


def _show(store: TrackerBase, run_id: str, depth: int) -> dict[str, Any]:
    lineage = _lineage(store, run_id, depth)
    return {
        "run_id": run_id,
        "metadata": dict(store.metadata(run_id)),
        "artifacts": {
            n: {"path": a.path, "metadata": a.metadata} for n, a in store.artifacts(run_id).items()
        },
        "parents": [e.to_dict() for e in lineage.parents],
        "descendants": [e.to_dict() for e in lineage.descendants],
    }


def _names(artifact_names: list[str | None]) -> str:
    names = [n for n in artifact_names if n]
    return f" [{', '.join(names)}]" if names else ""


def _show_text(info: dict[str, Any]) -> str:
    lines = [f"run {info['run_id']}", "metadata:"]
    lines += [f"  {k} = {json.dumps(v, default=str)}" for k, v in sorted(info["metadata"].items())]
    lines.append("artifacts:")
    lines += [f"  {n}: {a['path']}" + (f" {json.dumps(a['metadata'])}" if a["metadata"] else "")
              for n, a in sorted(info["artifacts"].items())]  # fmt: skip
    for title, key, other in (("parents", "parents", "source"), ("descendants", "descendants", "run")):
        lines.append(f"{title}:")
        lines += [f"  {edge[other]}{_names(edge['artifact_names'])}" for edge in info[key]]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchx-airflow-tracker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--fsspec", metavar="URL", help="an fsspec store root (path, file://, s3://, ...)")
    parser.add_argument("--storage-options", metavar="JSON", help="fsspec storage options as JSON")
    parser.add_argument("--mlflow", metavar="URI", help="an MLflow tracking URI")
    parser.add_argument("--experiment", default="torchx", help="MLflow experiment (default: torchx)")
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="a run's metadata, artifacts, parents and descendants")
    show.add_argument("run_id")
    show.add_argument("--format", choices=["text", "json"], default="text")
    lineage = sub.add_parser("lineage", help="a run's lineage graph, up and down")
    lineage.add_argument("run_id")
    lineage.add_argument("--format", choices=["text", "json", "mermaid"], default="text")
    for p in (show, lineage):
        p.add_argument("--depth", type=int, default=10, help="hops to follow each way (default: 10)")
    runs = sub.add_parser("list", help="run ids in the store")
    runs.add_argument("--parent", help="only the runs that have this run as a source")
    sub.add_parser("reindex", help="fsspec: read every run's sources into the index again")
    cache = sub.add_parser(
        "cache", help="the provider's cache records (torchx_airflow.policies.cache.inputs)"
    )
    cache.add_argument("action", choices=["list", "show", "delete", "prune"],
                       help="list the keys; show or delete one; prune: delete the expired ones")  # fmt: skip
    cache.add_argument("key", nargs="?", help="the cache key (show, delete)")
    return parser


def _expires(record: Any) -> float:
    """A record's ``expires`` (0 when it has none); ``ValueError`` unless it is a finite number."""
    import math

    value = record.get("expires") or 0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"its 'expires' is not a finite number ({value!r})")
    return float(value)


def _cache(store: TrackerBase, action: str, key: str | None) -> str:
    """Run a ``cache`` action; returns what to print."""
    import time

    if not isinstance(store, ProviderStore):
        raise SystemExit(f"{store!r} keeps no cache records: pass --fsspec URL or --mlflow URI.")
    records = store.cache_records
    if action in ("show", "delete"):
        from torchx_airflow_tracker.cache_records import check_cache_key

        if not key:
            raise SystemExit(f"cache {action} needs a key: torchx-airflow-tracker cache {action} <key>")
        try:
            check_cache_key(key)
        except ValueError as e:
            raise SystemExit(str(e)) from None
    key = key or ""
    if action == "show":
        record = records.get(key)
        if record is None:
            raise SystemExit(f"No cache record {key} in {store!r}.")
        return json.dumps(record, indent=2, sort_keys=True, default=str)
    if action == "delete":
        if not records.delete(key):
            raise SystemExit(f"No cache record {key} in {store!r}.")
        return f"deleted {key}"
    lines, now = [], time.time()
    for found in records.keys():
        try:
            record = records.get(found) or {}
            expired = _expires(record) <= now
        except (TypeError, ValueError, AttributeError) as e:  # a job may write anything: skip it, go on
            print(
                f"warning: cache record {found} skipped, malformed: {type(e).__name__}: {e}", file=sys.stderr
            )
            continue
        if action == "prune" and expired:
            records.delete(found)
            lines.append(f"deleted {found} (expired)")
        elif action == "list":
            state = "expired" if expired else "valid"
            lines.append(f"{found} {state} {record.get('app_handle', '?')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    store = _store(args)
    if args.command == "list":
        kwargs = {"parent_run_id": args.parent} if args.parent else {}
        print("\n".join(store.run_ids(**kwargs)))
    elif args.command == "reindex":
        written = store.reindex() if isinstance(store, ProviderStore) else None
        if written is None:
            raise SystemExit(f"{store!r} keeps no descendants index: nothing to rebuild.")
        print(f"{written} edges indexed")
    elif args.command == "cache":
        print(_cache(store, args.action, args.key))
    elif args.command == "show":
        info = _show(store, args.run_id, args.depth)
        print(json.dumps(info, indent=2, default=str) if args.format == "json" else _show_text(info))
    else:
        graph = _lineage(store, args.run_id, args.depth)
        print({"text": graph.to_text, "json": graph.to_json, "mermaid": graph.to_mermaid}[args.format]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
