"""Promotion: the best run of a task picked by one metric, recorded on the run, carried by an asset event.

Shared by ``TorchXPromoteOperator`` (the best run of a DAG run's task, every map index) and the
lineage plugin's manual promotion (one run a person picked). The rules, in the order they apply:

1. Only runs whose task returned a result with state ``SUCCEEDED`` are candidates (a failed,
   skipped or still-running map index has no such result); the others are left out and logged.
2. The objective is the run's final metric as its task recorded it when the run ended (the
   result's ``metrics``: numeric metadata and each curve's last point; an older result's numeric
   metadata), never read from the store again: any job tracking to the store may write into a run
   after it ended. A candidate without it, or with a value that is no finite number, is left out
   with a warning naming it (a value another job wrote is not this run's, never an error that
   blocks the others); none left is an error.
3. ``mode="min"`` takes the smallest value, ``"max"`` the largest; a tie goes to the earliest map
   index (the first grid point declared), so the choice is the same on every retry.
4. No candidate at all is an error naming the task and the objective. The chosen run must have
   recorded the artifact the asset stands for, else an error.
5. The artifact's path must lie under a directory the run's own task named in its arguments (kept
   by the task in XCom ``torchx_app``, out of any job's reach) or under one of the promotion's
   ``artifact_roots`` (for URLs such as ``s3://models/``). A store is written by every job that tracks
   to it: a path pointing elsewhere may be another job's file, and is an error, never an event.

Nothing here touches Airflow's database or imports a TorchX scheduler, MLflow or s3fs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXError, TorchXInputError
from torchx_airflow.lineage.keys import PROMOTED_KEY
from torchx_airflow.secrets import strip_userinfo

if TYPE_CHECKING:
    from torchx_airflow_tracker.protocol import ProviderStore

log = logging.getLogger(__name__)

MODES = ("min", "max")


class TorchXPromotionError(TorchXError):
    """No run can be promoted: none succeeded, one lacks the objective, or the best lacks the artifact."""


@dataclass(frozen=True)
class PromoteSpec:
    """What a promotion picks by and publishes: the upstream task, the metric and the asset."""

    runs_of: str
    objective: str
    mode: str
    artifact: str
    asset_uri: str
    artifact_roots: tuple[str, ...] = ()

    def better(self, value: float, than: float) -> bool:
        """Whether ``value`` beats ``than`` (strictly: a tie keeps the earlier run)."""
        return value < than if self.mode == "min" else value > than


@dataclass
class Candidate:
    """One run of the upstream task: its map index, handle, state, artifacts and final metrics."""

    map_index: int
    app_handle: str
    state: str | None
    artifacts: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    #: the directories the run's own task named in its arguments (XCom ``torchx_app``)
    roots: tuple[str, ...] = ()

    @property
    def succeeded(self) -> bool:
        return self.state == "SUCCEEDED"  # apps.SUCCEEDED: apps is not loaded where a DAG is parsed


def check_promote_args(task_id: str, runs_of: Any, objective: Any, mode: Any, artifact: Any) -> None:
    """Raise ``TorchXInputError`` naming the bad argument and the fix (at DAG parse time)."""
    where = f"TorchXPromoteOperator {task_id!r}"
    for name, value, example in (
        ("runs_of", runs_of, '"train"'),
        ("objective", objective, '"loss"'),
        ("artifact", artifact, '"model"'),
    ):
        if not isinstance(value, str) or not value.strip():
            raise TorchXInputError(
                f"{where}: {name}={value!r} must be a non-empty string, e.g. {name}={example}."
            )
    if runs_of == task_id:
        raise TorchXInputError(
            f"{where}: runs_of={runs_of!r} is the promoting task itself. Name the TorchX task whose runs "
            'are compared, e.g. runs_of="train".'
        )
    if mode not in MODES:
        raise TorchXInputError(
            f'{where}: mode={mode!r} is not one of {list(MODES)}. Use mode="min" for a loss or an '
            'error, mode="max" for an accuracy or a score.'
        )


def candidates_from_results(results: Mapping[int, Any]) -> list[Candidate]:
    """The upstream task's returned results by map index as candidates (None: no result pushed)."""
    candidates = []
    for map_index, result in sorted(results.items()):
        if not isinstance(result, Mapping) or not isinstance(result.get("app_handle"), str):
            candidates.append(Candidate(map_index, "", None))
            continue
        candidates.append(
            Candidate(
                map_index,
                str(result["app_handle"]),
                str(result.get("state")) if result.get("state") else None,
                dict(result.get("artifacts") or {}),
                recorded_metrics(result),
            )
        )
    return candidates


def with_roots(candidates: Sequence[Candidate], submitted: Mapping[int, Any]) -> list[Candidate]:
    """``candidates`` with the output roots their tasks recorded (XCom ``torchx_app`` by map index)."""
    for candidate in candidates:
        record = submitted.get(candidate.map_index)
        roots = record.get("output_roots") if isinstance(record, Mapping) else None
        if isinstance(roots, list):
            candidate.roots = tuple(str(root) for root in roots if isinstance(root, str) and root)
    return list(candidates)


def recorded_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """The final metrics the task recorded when its run ended (``metrics``), finite numbers only; a
    result from before that record: its numeric metadata."""
    metrics = result.get("metrics")
    source = metrics if isinstance(metrics, Mapping) else (result.get("metadata") or {})
    return {k: v for k, v in numeric_metadata(source).items() if math.isfinite(v)}


def numeric_metadata(metadata: Mapping[str, Any]) -> dict[str, float]:
    """Numbers among a run's metadata (not booleans): what counts as final metrics without a reader."""
    return {
        str(key): float(value)
        for key, value in metadata.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def pick_best(candidates: Sequence[Candidate], spec: PromoteSpec, where: str) -> Candidate:
    """The best succeeded candidate by ``spec.objective`` (the rules of this module's docstring)."""
    succeeded = [c for c in candidates if c.succeeded]
    for left_out in (c for c in candidates if not c.succeeded):
        log.info(
            "%s: map index %s of %r is left out: %s",
            where,
            left_out.map_index,
            spec.runs_of,
            f"its app is {left_out.state}" if left_out.state else "its task returned no TorchX result",
        )
    if not succeeded:
        raise TorchXPromotionError(
            f"{where}: no run of task {spec.runs_of!r} SUCCEEDED in this DAG run ({len(candidates)} map "
            f"index(es) looked at), so there is nothing to promote by {spec.objective!r}. Check the "
            f"task's logs; promotion considers only runs whose task returned a SUCCEEDED result."
        )
    ranked = [c for c in succeeded if _finite(c.metrics.get(spec.objective))]
    for left_out in (c for c in succeeded if c not in ranked):
        log.warning(
            "%s: map index %s of %r (%s) is left out: its run recorded no finite %r when it ended",
            where,
            left_out.map_index,
            spec.runs_of,
            left_out.app_handle,
            spec.objective,
        )
    if not ranked:
        logged = sorted(set().union(*(c.metrics for c in succeeded)))
        raise TorchXPromotionError(
            f"{where}: no run of {spec.runs_of!r} recorded the objective {spec.objective!r} as a finite "
            f"number when it ended. Log it from every run as a final metric or numeric metadata (e.g. "
            f"AppRun.run_from_env().add_metadata({spec.objective}=value)), or pick an objective they log "
            f"(logged: {logged})."
        )
    best = ranked[0]
    for candidate in ranked[1:]:  # in map index order: a tie keeps the earlier run
        if spec.better(candidate.metrics[spec.objective], best.metrics[spec.objective]):
            best = candidate
    return best


def artifact_path(candidate: Candidate, spec: PromoteSpec, where: str) -> str:
    """The path of the promoted artifact of ``candidate``, without URL user info."""
    artifact = candidate.artifacts.get(spec.artifact)
    if not isinstance(artifact, Mapping) or not artifact.get("path"):
        raise TorchXPromotionError(
            f"{where}: the best run {candidate.app_handle} (map index {candidate.map_index}) recorded no "
            f"artifact {spec.artifact!r} (recorded: {sorted(candidate.artifacts)}). Record it in the job "
            f"(AppRun.run_from_env().add_artifact({spec.artifact!r}, path)) or set artifact= to one it "
            "records."
        )
    path = strip_userinfo(str(artifact["path"]))
    from torchx_airflow.apps import is_under

    roots = (*candidate.roots, *spec.artifact_roots)
    if not any(is_under(path, root) for root in roots):
        raise TorchXPromotionError(
            f"{where}: the best run {candidate.app_handle} recorded artifact {spec.artifact!r} at {path!r}, "
            f"outside the directories its task named ({', '.join(candidate.roots) or 'none'}) and the "
            f"promotion's artifact_roots ({', '.join(spec.artifact_roots) or 'none'}). A tracker store "
            "is written by every job that tracks to it, so a path elsewhere is not promoted: write the "
            "artifact under the task's output directory, or list its root (e.g. 's3://models/') in "
            "artifact_roots=."
        )
    return path


def promotion_extra(candidate: Candidate, spec: PromoteSpec, promoted_by: str, where: str) -> dict[str, Any]:
    """The asset event's extra: the run's handle, the artifact's path, the objective's value, who promoted."""
    return {
        "app_handle": candidate.app_handle,
        "artifact": spec.artifact,
        "path": artifact_path(candidate, spec, where),
        "objective": spec.objective,
        "mode": spec.mode,
        "value": candidate.metrics[spec.objective],
        "runs_of": spec.runs_of,
        "map_index": candidate.map_index,
        "promoted_by": promoted_by,
    }


def record_promotion(stores: Sequence[ProviderStore], extra: Mapping[str, Any], asset_uri: str) -> None:
    """Write on the promoted run (every store of its task) that it was promoted, to what, by whom."""
    record = {
        "asset": asset_uri,
        "artifact": extra["artifact"],
        "objective": extra["objective"],
        "value": extra["value"],
        "promoted_by": extra["promoted_by"],
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    for store in stores:
        store.add_metadata(str(extra["app_handle"]), **{PROMOTED_KEY: record})
