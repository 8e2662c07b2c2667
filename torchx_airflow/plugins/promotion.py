"""Manual promotion: a person promotes one TorchX run of a DAG run to the asset of the DAG's
``TorchXPromoteOperator``, from the comparison view or a script.

    POST {URL_PREFIX}/api/promote/{dag_id}/{run_id}
         {"task_id": "train", "map_index": 2[, "promote_task_id": "promote"]}   (application/json)

The run is the result task ``task_id`` (map index ``map_index``) returned in that DAG run. The DAG's
``TorchXPromoteOperator`` whose ``runs_of`` is ``task_id`` (or ``promote_task_id`` when there are
several) says which objective, artifact and asset: the rules of
:mod:`torchx_airflow.lineage.promotion` apply (the run must have SUCCEEDED, logged the objective
and recorded the artifact), except that the person, not the metric, picks the run.

Protection is Airflow's own: the caller is authenticated by the API server (the UI's session cookie,
which is ``SameSite=Lax``, or a bearer token) and must be allowed to edit the DAG
(``requires_access_dag("PUT")``), to create asset events (``requires_access_asset("POST")``, the
check of Airflow's own ``POST /api/v2/assets/events``), and to read its runs, task instances and
XComs. The body must be
JSON and a browser's cross-site request is refused, so a page on another site cannot promote
with a user's cookie. Each allowed request leaves an entry in Airflow's audit log (event
``torchx_promote``). The event is emitted as Airflow's ``POST /api/v2/assets/events`` emits one
(``AssetManager.register_asset_change``), so asset-scheduled DAGs run on it.

Idempotent: when the asset's latest event already carries this run (promoted by the operator or by
hand), nothing is emitted and the answer is that event (200); otherwise one event is emitted (201).
Promoting a run again after another run was promoted is a new promotion: a new event.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_asset, requires_access_dag
from airflow.api_fastapi.logging.decorators import action_logging
from fastapi import Depends, FastAPI, HTTPException, Request, Response
from pydantic import BaseModel, Field
from sqlalchemy import select

from torchx_airflow.lineage.promotion import (
    Candidate,
    PromoteSpec,
    TorchXPromotionError,
    candidates_from_results,
    pick_best,
    promotion_extra,
    record_promotion,
    with_roots,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

PROMOTE_OPERATOR = ("torchx_airflow.operators.promote", "TorchXPromoteOperator")
JSON_TYPES = ("application/json",)


class PromoteRequest(BaseModel):
    """Which run to promote: a task of the DAG run, and its map index (-1 for an unmapped task)."""

    task_id: Annotated[str, Field(min_length=1)]
    map_index: int = -1
    promote_task_id: str | None = None


def check_same_origin(request: Request) -> None:
    """Refuse a browser's cross-site request and any body that is not JSON (CSRF defence in depth:
    the UI's cookie is ``SameSite=Lax`` already, and a cross-site form cannot send JSON)."""
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if content_type not in JSON_TYPES:
        raise HTTPException(
            415,
            f"Send the promotion as JSON (Content-Type: application/json), not {content_type or 'none'!r}.",
        )
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        raise HTTPException(403, "Promotion is refused from another site's page.")
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host", ""):
        raise HTTPException(403, f"Promotion is refused from origin {origin!r}: it is not this server.")


def promote_spec(session: Session, dag_id: str, task_id: str, promote_task_id: str | None) -> PromoteSpec:
    """The objective, artifact and asset of the DAG's ``TorchXPromoteOperator`` over ``task_id``."""
    from airflow.models.serialized_dag import SerializedDagModel

    dag = SerializedDagModel.get_dag(dag_id, session=session)
    if dag is None:
        raise HTTPException(404, f"DAG {dag_id!r} is not known to Airflow (not parsed yet, or deleted).")
    promoters = [
        task
        for task in dag.tasks
        if (getattr(task, "_task_module", None), getattr(task, "task_type", None)) == PROMOTE_OPERATOR
        and getattr(task, "runs_of", None) == task_id
        and promote_task_id in (None, task.task_id)
    ]
    if not promoters:
        raise HTTPException(
            409,
            f"DAG {dag_id!r} has no TorchXPromoteOperator with runs_of={task_id!r}"
            + (f" and task_id {promote_task_id!r}" if promote_task_id else "")
            + ": add one to the DAG to say which objective, artifact and asset a promotion uses.",
        )
    if len(promoters) > 1:
        raise HTTPException(
            409,
            f"DAG {dag_id!r} has several TorchXPromoteOperators over {task_id!r} "
            f"({sorted(t.task_id for t in promoters)}): name one as promote_task_id.",
        )
    (task,) = promoters
    fields = {name: getattr(task, name) for name in ("objective", "mode", "artifact")}
    artifact_roots = tuple(str(root) for root in getattr(task, "artifact_roots", ()) or ())
    if any("{{" in str(value) for value in fields.values()):
        raise HTTPException(
            409,
            f"Task {task.task_id!r} of DAG {dag_id!r} has templated promotion settings {fields}: a manual "
            "promotion uses them as declared. Make them literal, or promote through the task.",
        )
    (asset,) = [outlet for outlet in task.outlets if getattr(outlet, "uri", None)][:1] or [None]
    if asset is None:
        raise HTTPException(409, f"Task {task.task_id!r} of DAG {dag_id!r} has no asset outlet.")
    objective, mode, artifact = (str(fields[name]) for name in ("objective", "mode", "artifact"))
    return PromoteSpec(task_id, objective, mode, artifact, asset.uri, artifact_roots)


def _candidate(session: Session, dag_id: str, run_id: str, body: PromoteRequest) -> Candidate:
    from airflow.models.dagrun import DagRun

    from torchx_airflow.lineage.keys import XCOM_SUBMITTED_APP
    from torchx_airflow.plugins.airflow_runs import XCOM_RESULT, xcom_values

    if session.scalar(select(DagRun.id).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)) is None:
        raise HTTPException(404, f"DAG run {run_id!r} of DAG {dag_id!r} does not exist.")
    pushed = xcom_values(session, dag_id, [run_id], [XCOM_RESULT, XCOM_SUBMITTED_APP])
    values = pushed.get((run_id, body.task_id, body.map_index), {})
    (candidate,) = with_roots(
        candidates_from_results({body.map_index: values.get(XCOM_RESULT)}),
        {body.map_index: values.get(XCOM_SUBMITTED_APP)},
    )
    if not candidate.succeeded:
        raise HTTPException(
            409,
            f"Task {body.task_id!r} (map index {body.map_index}) of DAG run {run_id!r} has no SUCCEEDED "
            f"TorchX result ({candidate.state or 'none returned'}): only a run that succeeded is promoted.",
        )
    return candidate


def _stores(session: Session, dag_id: str, run_id: str, body: PromoteRequest) -> list[Any]:
    """The run's tracker stores (its task's rendered trackers), as the lineage view reads them."""
    from torchx_airflow.hooks.tracker import trackers_for
    from torchx_airflow.plugins.airflow_runs import tracked_tasks, tracker_groups

    tasks = [
        t
        for t in tracked_tasks(session, dag_id, run_id)
        if t.seed.task and (t.seed.task.task_id, t.seed.task.map_index) == (body.task_id, body.map_index)
    ]
    groups, _ = tracker_groups(tasks)
    return list(trackers_for(groups[0].conn_ids).stores) if groups else []


def _latest_event(session: Session, asset_id: int) -> Any:
    from airflow.models.asset import AssetEvent

    return session.scalar(
        select(AssetEvent)
        .where(AssetEvent.asset_id == asset_id)
        .order_by(AssetEvent.timestamp.desc(), AssetEvent.id.desc())
        .limit(1)
    )


def _event_json(event: Any) -> dict[str, Any]:
    return {"id": event.id, "uri": event.uri, "timestamp": event.timestamp.isoformat(), "extra": event.extra}


def emit_once(session: Session, user: Any, spec: PromoteSpec, extra: dict[str, Any]) -> tuple[bool, Any]:
    """``(created, event)``: the asset's latest event when it carries this run already, else a new one.

    The asset's row is locked for the check and the write, so two requests at once make one event.
    """
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.assets.manager import asset_manager
    from airflow.models.asset import AssetModel
    from airflow.sdk.configuration import conf

    asset = session.scalar(
        select(AssetModel).where(AssetModel.uri == spec.asset_uri).with_for_update().limit(1)
    )
    if asset is None:
        raise HTTPException(
            404, f"Asset {spec.asset_uri!r} is not known to Airflow yet (the DAG is not parsed)."
        )
    latest = _latest_event(session, asset.id)
    if latest is not None and (latest.extra or {}).get("app_handle") == extra["app_handle"]:
        return False, latest
    multi_team = conf.getboolean("core", "multi_team")
    teams = get_auth_manager().get_authorized_teams(user=user) if multi_team else set()
    event = asset_manager.register_asset_change(
        asset=asset,
        timestamp=datetime.now(timezone.utc),
        extra=extra,
        source_is_api=True,
        api_user_teams=teams,
        session=session,
    )
    if event is None:
        raise HTTPException(404, f"Asset {spec.asset_uri!r} is not active in Airflow.")
    return True, event


#: the event of the audit log entry each manual promotion request leaves (Browse > Audit Log)
AUDIT_EVENT = "torchx_promote"


def add_promotion_routes(app: FastAPI, read_dependencies: list[Any]) -> None:
    """Register the POST endpoint on the plugin's app (``read_dependencies``: the lineage view's)."""

    @app.post(
        "/api/promote/{dag_id}/{run_id}",
        dependencies=[
            # a promotion emits an asset event: who may not emit one through Airflow's API may not here
            # (first: the role decides it, the DAG's check reads the database)
            Depends(requires_access_asset("POST")),
            Depends(requires_access_dag("PUT")),
            *read_dependencies,
            # Airflow's audit log, as its own endpoints that change state keep it
            Depends(action_logging(event=AUDIT_EVENT)),
        ],
    )
    def promote(
        dag_id: str,
        run_id: str,
        body: PromoteRequest,
        request: Request,
        response: Response,
        session: SessionDep,
        user: GetUserDep,
    ) -> dict[str, Any]:
        """Promote one TorchX run of the DAG run to the asset of the DAG's TorchXPromoteOperator."""
        check_same_origin(request)
        spec = promote_spec(session, dag_id, body.task_id, body.promote_task_id)
        candidate = _candidate(session, dag_id, run_id, body)
        stores = _stores(session, dag_id, run_id, body)
        where = f"Promotion of {body.task_id!r} (map index {body.map_index}) in DAG run {run_id!r}"
        try:
            pick_best([candidate], spec, where)  # the same checks: the objective must be recorded
            extra = promotion_extra(candidate, spec, f"user {user.get_name()}", where)
        except TorchXPromotionError as e:
            raise HTTPException(409, str(e)) from e
        created, event = emit_once(session, user, spec, extra)
        warnings = []
        if created:
            try:
                record_promotion(stores, extra, spec.asset_uri)
            except Exception as e:  # the event is out; the store's note is secondary
                log.warning("%s: could not record it in the tracker: %s", where, e)
                warnings.append(f"The promotion is not recorded in the tracker: {type(e).__name__}: {e}")
            session.flush()
        response.status_code = 201 if created else 200
        outcome = "a new event" if created else "already its latest event"
        log.info("%s to %s by %s: %s", where, spec.asset_uri, user.get_name(), outcome)
        return {"created": created, "event": _event_json(event), "warnings": warnings}
