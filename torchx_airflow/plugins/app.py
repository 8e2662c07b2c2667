"""The lineage view's FastAPI app, mounted by Airflow's API server under ``URL_PREFIX``.

    GET {URL_PREFIX}/lineage/{dag_id}/{run_id}?depth=3[&task_id=train&map_index=0]   the page (SVG)
    GET {URL_PREFIX}/api/lineage/{dag_id}/{run_id}?depth=3[&task_id=...]            the same graph, JSON
    GET {URL_PREFIX}/static/lineage.css|lineage.js|lineage.svg                        its assets

Both views follow Airflow's auth: the caller must be allowed to read the DAG's runs
(``requires_access_dag("GET", DagAccessEntity.RUN)``, the check of Airflow's own DAG run
endpoints), with the UI's session cookie or a bearer token. Runs of other DAGs that the caller may
not read appear without their DAG, task or artifacts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from torchx_airflow.plugins import URL_PREFIX
from torchx_airflow.plugins.airflow_runs import (
    DagRunNotFound,
    enrich_other_runs,
    open_first_store,
    tracked_tasks,
    tracker_groups,
)
from torchx_airflow.plugins.graph import DEFAULT_DEPTH, MAX_DEPTH, LineageGraph, build_graph
from torchx_airflow.plugins.render import render_error, render_page

log = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).resolve().parent / "static"
DepthQuery = Annotated[int, Query(ge=1, le=MAX_DEPTH, description="hops to follow from the DAG run's runs")]
CanReadRuns = [Depends(requires_access_dag("GET", DagAccessEntity.RUN))]


@dataclass
class LineageView:
    """A DAG run's graph with what the page shows around it."""

    graph: LineageGraph
    trackers: list[str] = field(default_factory=list)
    selected: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _redact(value: Any) -> Any:
    """Connection secrets registered with Airflow's masker (the trackers register theirs) never leave."""
    from airflow.sdk.log import redact

    return redact(value)


def _readable_dag_ids(graph: LineageGraph, user: Any) -> set[str]:
    from airflow.api_fastapi.app import get_auth_manager

    dag_ids = {run.task.dag_id for run in graph.runs.values() if run.task is not None}
    return set(get_auth_manager().filter_authorized_dag_ids(dag_ids=dag_ids, user=user, method="GET"))


def load_view(
    session: Any, user: Any, dag_id: str, run_id: str, depth: int, task_id: str | None, map_index: int
) -> LineageView:
    """Read the DAG run's tracked tasks, walk each tracker store from them, and enrich the result."""
    try:
        tasks = tracked_tasks(session, dag_id, run_id)
    except DagRunNotFound as e:
        raise HTTPException(404, str(e)) from e
    tracker_sets, warnings = tracker_groups(tasks)
    groups, trackers = [], []
    for group in tracker_sets:
        trackers.append(group.conn_ids[0])
        try:
            groups.append((open_first_store(group.conn_ids), [task.seed for task in group.tasks]))
        except Exception as e:  # one broken connection must not hide the other trackers' lineage
            log.warning("Lineage view: tracker %s could not be opened: %s", group.conn_ids[0], e)
            warnings.append(f"Tracker {group.conn_ids[0]!r} could not be read: {type(e).__name__}: {e}")
    graph = build_graph(groups, depth)
    enrich_other_runs(session, graph, _readable_dag_ids(graph, user))
    selected = [
        task.seed.run_id
        for task in tasks
        if task.seed.task and task.seed.task.task_id == task_id and task.seed.task.map_index == map_index
    ]
    return LineageView(graph, list(dict.fromkeys(trackers)), selected, warnings + graph.warnings)


def _airflow_base(request: Request) -> str:
    """The API server's own path prefix (empty unless Airflow runs under a sub-path)."""
    return str(request.scope.get("root_path", "")).removesuffix(URL_PREFIX)


def _prefix_airflow_links(view: LineageView, base: str) -> None:
    for run in view.graph.runs.values():
        if run.links.get("airflow", "").startswith("/"):
            run.links["airflow"] = base + run.links["airflow"]


def create_app() -> FastAPI:
    """The app the plugin registers in ``fastapi_apps``."""
    app = FastAPI(
        title="TorchX lineage",
        description="The lineage graph of a DAG run's TorchX runs and tracker artifacts.",
        version="1",
    )
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.exception_handler(HTTPException)
    def page_or_json_error(request: Request, error: HTTPException) -> HTMLResponse | JSONResponse:
        """The page (an iframe in the UI) answers errors with a page; the API with Airflow's JSON."""
        root = str(request.scope.get("root_path", ""))
        if "/lineage/" in request.url.path and "/api/lineage/" not in request.url.path:
            page = render_error(error.status_code, str(error.detail), f"{root}/static")
            return HTMLResponse(page, status_code=error.status_code, headers=error.headers)
        return JSONResponse({"detail": error.detail}, status_code=error.status_code, headers=error.headers)

    @app.get("/api/lineage/{dag_id}/{run_id}", dependencies=CanReadRuns)
    def lineage_json(
        dag_id: str,
        run_id: str,
        request: Request,
        session: SessionDep,
        user: GetUserDep,
        depth: DepthQuery = DEFAULT_DEPTH,
        task_id: str | None = None,
        map_index: int = -1,
    ) -> dict[str, Any]:
        """The DAG run's lineage graph: runs, artifacts, edges, and the tracker connections read."""
        view = load_view(session, user, dag_id, run_id, depth, task_id, map_index)
        _prefix_airflow_links(view, _airflow_base(request))
        payload = {
            "dag_id": dag_id,
            "run_id": run_id,
            **view.graph.to_dict(),
            "trackers": view.trackers,
            "selected": view.selected,
            "warnings": view.warnings,
        }
        return _redact(payload)

    @app.get("/lineage/{dag_id}/{run_id}", response_class=HTMLResponse, dependencies=CanReadRuns)
    def lineage_page(
        dag_id: str,
        run_id: str,
        request: Request,
        session: SessionDep,
        user: GetUserDep,
        depth: DepthQuery = DEFAULT_DEPTH,
        task_id: str | None = None,
        map_index: int = -1,
    ) -> HTMLResponse:
        """The DAG run's lineage graph drawn as SVG, for the DAG run and task instance tabs."""
        view = load_view(session, user, dag_id, run_id, depth, task_id, map_index)
        _prefix_airflow_links(view, _airflow_base(request))
        root = str(request.scope.get("root_path", ""))
        keep = {"task_id": task_id, "map_index": str(map_index)} if task_id else {}
        query = urlencode({"depth": depth, **keep})
        page = render_page(
            view.graph,
            dag_id=dag_id,
            run_id=run_id,
            static_url=f"{root}/static",
            json_url=f"{root}/api/lineage/{quote(dag_id, safe='')}/{quote(run_id, safe='')}?{query}",
            selected=view.selected,
            trackers=view.trackers,
            keep=keep,
            warnings=view.warnings,
        )
        return HTMLResponse(_redact(page))

    return app
