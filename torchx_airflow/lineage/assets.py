"""Tracker artifacts as Airflow asset events.

A DAG author maps artifact names to the task's outlets::

    MODEL = Asset("s3://ml/models/resnet")
    TorchXOperator(..., outlets=[MODEL], artifact_assets={"model": MODEL})

When the app SUCCEEDS, the asset event of each mapped outlet carries the run in its extra:
``{"app_handle", "artifact", "path", "metadata", "try_number"}``. An ``AssetAlias`` stands for a path
known only at run time: the event goes to ``Asset(<the artifact's path as a URI>)`` through the alias.
A failed app emits nothing (Airflow emits outlet events only for a successful task).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetAlias

from torchx_airflow.exceptions import TorchXInputError
from torchx_airflow.secrets import strip_userinfo

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pydantic import JsonValue

log = logging.getLogger(__name__)


class TorchXArtifactMissingError(TorchXInputError):
    """The app SUCCEEDED without recording an artifact that ``artifact_assets`` maps to an asset."""

    def __init__(self, app_handle: str, name: str, recorded: Collection[str], tracked: bool) -> None:
        fix = (
            f"Record it in the job (AppRun.run_from_env().add_artifact({name!r}, path)) or remove "
            f"{name!r} from artifact_assets."
            if tracked
            else "The task has no tracker connections, so no artifact can be read: give it trackers "
            "(the torchx connection's extra 'trackers', or tracker_conn_ids), or remove artifact_assets."
        )
        super().__init__(
            f"TorchX app {app_handle} SUCCEEDED but recorded no artifact {name!r} for its asset "
            f"(recorded: {sorted(recorded)}). {fix}"
        )


class TorchXArtifactOutsideRootsError(TorchXInputError):
    """The artifact an asset stands for lies outside the task's output roots: no event is published."""

    def __init__(self, app_handle: str, name: str, path: str, roots: Sequence[str]) -> None:
        super().__init__(
            f"TorchX app {app_handle} SUCCEEDED, and its artifact {name!r} is recorded at {path!r}, outside "
            f"the task's output roots ({', '.join(roots) or 'none'}): no asset event is published for it (a "
            "tracker store is written by every job that tracks to it). Write the artifact under a directory "
            "the task's arguments name as an output, or add its root to output_roots (the torchx "
            "connection's extra, or [torchx] output_roots)."
        )


def check_artifact_assets(
    task_id: str,
    artifact_assets: Mapping[str, Any] | None,
    outlets: Collection[Any],
    wait_for_completion: bool = True,
) -> dict[str, Asset | AssetAlias]:
    """``artifact_assets`` checked against the task's ``outlets``; raise naming the fix otherwise."""
    checked: dict[str, Asset | AssetAlias] = {}
    if artifact_assets and not wait_for_completion:
        raise TorchXInputError(
            f"Task {task_id!r}: artifact_assets needs wait_for_completion=True: artifacts exist once the "
            "app has SUCCEEDED, and with wait_for_completion=False the task ends before that. Keep the "
            "default, or move artifact_assets to a task that waits for the app."
        )
    for name, target in (artifact_assets or {}).items():
        if not isinstance(name, str) or not name:
            raise TorchXInputError(
                f"Task {task_id!r}: artifact_assets key {name!r} is not an artifact name. Use the name the "
                'job records, e.g. artifact_assets={"model": Asset("s3://ml/models/resnet")}.'
            )
        if not isinstance(target, Asset | AssetAlias):
            raise TorchXInputError(
                f"Task {task_id!r}: artifact_assets[{name!r}] is {target!r}, not an Asset or AssetAlias. "
                f'Map it to one, e.g. artifact_assets={{{name!r}: Asset("s3://ml/models/resnet")}}.'
            )
        if target not in outlets:
            raise TorchXInputError(
                f"Task {task_id!r}: artifact_assets[{name!r}] is {target!r}, which is not in the task's "
                f"outlets, so Airflow would not accept its events. Add it: outlets=[..., {target!r}]."
            )
        if target in checked.values():
            raise TorchXInputError(
                f"Task {task_id!r}: {target!r} is mapped from more than one artifact in artifact_assets; "
                "map each Asset from one artifact (an AssetAlias can take several)."
            )
        checked[name] = target
    return checked


def artifact_uri(path: str) -> str:
    """An artifact path as an asset URI: URLs as they are, local paths as ``file://`` absolute paths."""
    if "://" in path:
        return path
    return f"file://{os.path.abspath(path)}"


def emit_asset_events(
    context: Context,
    artifact_assets: Mapping[str, Asset | AssetAlias],
    result: Mapping[str, Any],
    output_roots: Sequence[str],
) -> None:
    """Put the run of a SUCCEEDED app on the asset events of the mapped outlets; an artifact whose
    path lies outside the task's ``output_roots`` (``TaskRun.output_roots``) is refused: a store is
    written by every job that tracks to it, and an event is never published for another's path."""
    from torchx_airflow.apps import SUCCEEDED, is_under  # at run time: DAG files import this module

    if not artifact_assets or result.get("state") != SUCCEEDED:
        return
    artifacts = result.get("artifacts") or {}
    app_handle = str(result["app_handle"])
    events = context["outlet_events"]
    for name, target in artifact_assets.items():
        artifact = artifacts.get(name)
        if artifact is None:
            tracked = bool(result.get("metadata") or artifacts or result.get("sources"))
            raise TorchXArtifactMissingError(app_handle, name, artifacts, tracked)
        path = str(artifact["path"])
        if not any(is_under(path, root) for root in output_roots):
            raise TorchXArtifactOutsideRootsError(app_handle, name, strip_userinfo(path), output_roots)
        extra: dict[str, JsonValue] = {
            "app_handle": app_handle,
            "artifact": name,
            "path": strip_userinfo(path),  # the job wrote it: no user info in events
            "metadata": dict(artifact.get("metadata") or {}),
            "try_number": context["ti"].try_number,
        }
        if isinstance(target, AssetAlias):
            events[target].add(Asset(artifact_uri(path)), extra=extra)
        else:
            events[target].extra.update(extra)
        log.info("Asset event for %s: artifact %s of %s at %s", target, name, app_handle, path)
