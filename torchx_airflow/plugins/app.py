"""The lineage view's FastAPI app, mounted by Airflow's API server under ``URL_PREFIX``.

    GET {URL_PREFIX}/lineage/{dag_id}/{run_id}?depth=3[&task_id=train&map_index=0]   the page (SVG)
    GET {URL_PREFIX}/api/lineage/{dag_id}/{run_id}?depth=3[&task_id=...]            the same graph, JSON
    GET {URL_PREFIX}/static/lineage.css|lineage.js|lineage.svg                        its assets
    GET {URL_PREFIX}/compare/... and /api/compare/...    the runs of a task compared (``compare_routes``)
    POST {URL_PREFIX}/api/promote/{dag_id}/{run_id}      a manual promotion (``plugins/promotion.py``)

Both views follow Airflow's auth, with the UI's session cookie or a bearer token: the caller must
be allowed to read the DAG's runs, task instances and XComs (the view shows task states and values
taken from XComs), the checks of Airflow's own endpoints for each (``requires_access_dag("GET",
DagAccessEntity.RUN | TASK_INSTANCE | XCOM)``). A run of another DAG is shown only to a caller who
passes the same checks on that DAG; to others it is an opaque "run in a DAG you cannot see".

The cost of a view is bounded: one store walk draws at most ``MAX_RUNS`` runs (and says how many it
left out), and at most ``LIMITER.slots`` views are read at once; a request that finds no free slot
within ``LIMITER.queue_seconds`` is answered 503 with ``Retry-After``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
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
    other_dag_ids,
    tracked_tasks,
    tracker_groups,
)
from torchx_airflow.plugins.compare_routes import add_compare_routes
from torchx_airflow.plugins.graph import DEFAULT_DEPTH, MAX_DEPTH, LineageGraph, build_graph
from torchx_airflow.plugins.promotion import add_promotion_routes
from torchx_airflow.plugins.render import render_error, render_page
from torchx_airflow.plugins.text import is_airflow_page, strip_userinfo

log = logging.getLogger(__name__)
STATIC_DIR = Path(__file__).resolve().parent / "static"
DepthQuery = Annotated[int, Query(ge=1, le=MAX_DEPTH, description="hops to follow from the DAG run's runs")]
# what the view shows of a DAG: its runs, their task instances' states, values from their XComs
LINEAGE_ENTITIES = (DagAccessEntity.RUN, DagAccessEntity.TASK_INSTANCE, DagAccessEntity.XCOM)
CanReadLineage = [Depends(requires_access_dag("GET", entity)) for entity in LINEAGE_ENTITIES]
MAX_CONCURRENT_VIEWS = 4
QUEUE_SECONDS = 10.0


class ViewLimiter:
    """At most ``slots`` lineage views read at once; a request waits ``queue_seconds`` for a slot.

    A view reads tracker stores (object stores, MLflow servers) for up to ``MAX_RUNS`` runs: without
    a bound, any reader of a DAG run could occupy the API server's thread pool and the stores.
    """

    def __init__(self, slots: int, queue_seconds: float) -> None:
        self.slots = slots
        self.queue_seconds = queue_seconds
        self._free = threading.BoundedSemaphore(slots)

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold a slot for the block; 503 (with ``Retry-After``) when none frees up in time."""
        if not self._free.acquire(timeout=self.queue_seconds):
            raise HTTPException(
                503,
                f"The lineage view is busy: {self.slots} views are being read already and none finished "
                f"within {self.queue_seconds:g} s. Try again in a few seconds.",
                headers={"Retry-After": "5"},
            )
        try:
            yield
        finally:
            self._free.release()


LIMITER = ViewLimiter(MAX_CONCURRENT_VIEWS, QUEUE_SECONDS)


@dataclass
class LineageView:
    """A DAG run's graph with what the page shows around it."""

    graph: LineageGraph
    trackers: list[str] = field(default_factory=list)
    selected: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def masked(text: str) -> str:
    """``text`` as the view may show it: without URL user info, and with every secret registered
    with Airflow's masker (the trackers register their connections' secrets) replaced by ``***``.

    Applied to raw text, before any HTML or JSON escaping: a secret holding ``& < > "`` would not
    be found in its escaped form.
    """
    from airflow.sdk.log import redact

    return str(redact(strip_userinfo(text)))


def masked_view(view: LineageView) -> LineageView:
    """The view with every text it shows passed through ``masked``."""
    return replace(
        view,
        graph=view.graph.map_text(masked),
        trackers=[masked(t) for t in view.trackers],
        selected=[masked(s) for s in view.selected],
        warnings=[masked(w) for w in view.warnings],
    )


def readable_dag_ids(dag_ids: set[str], user: Any) -> set[str]:
    """The DAGs whose runs, task instances and XComs ``user`` may read (each DAG with its team)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
    from airflow.models.dag import DagModel

    if not dag_ids:
        return set()
    teams = DagModel.get_dag_id_to_team_name_mapping(sorted(dag_ids))
    manager = get_auth_manager()
    return {
        dag_id
        for dag_id in dag_ids
        if all(
            manager.is_authorized_dag(
                method="GET",
                access_entity=entity,
                details=DagDetails(id=dag_id, team_name=teams.get(dag_id)),
                user=user,
            )
            for entity in LINEAGE_ENTITIES
        )
    }


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
    enrich_other_runs(session, graph, readable_dag_ids(set(other_dag_ids(graph).values()), user))
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
        if is_airflow_page(run.links.get("airflow", "")):
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
        if "/api/" not in request.url.path and (
            "/lineage/" in request.url.path or "/compare/" in request.url.path
        ):
            page = render_error(error.status_code, str(error.detail), f"{root}/static")
            return HTMLResponse(page, status_code=error.status_code, headers=error.headers)
        return JSONResponse({"detail": error.detail}, status_code=error.status_code, headers=error.headers)

    @app.get("/api/lineage/{dag_id}/{run_id}", dependencies=CanReadLineage)
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
        with LIMITER.slot():
            view = load_view(session, user, dag_id, run_id, depth, task_id, map_index)
        _prefix_airflow_links(view, _airflow_base(request))
        view = masked_view(view)
        return {
            "dag_id": masked(dag_id),
            "run_id": masked(run_id),
            **view.graph.to_dict(),
            "trackers": view.trackers,
            "selected": view.selected,
            "warnings": view.warnings,
        }

    @app.get("/lineage/{dag_id}/{run_id}", response_class=HTMLResponse, dependencies=CanReadLineage)
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
        with LIMITER.slot():
            view = load_view(session, user, dag_id, run_id, depth, task_id, map_index)
        _prefix_airflow_links(view, _airflow_base(request))
        view = masked_view(view)
        root = str(request.scope.get("root_path", ""))
        keep = {"task_id": task_id, "map_index": str(map_index)} if task_id else {}
        query = urlencode({"depth": depth, **keep})
        page = render_page(
            view.graph,
            dag_id=masked(dag_id),
            run_id=masked(run_id),
            static_url=f"{root}/static",
            json_url=f"{root}/api/lineage/{quote(dag_id, safe='')}/{quote(run_id, safe='')}?{query}",
            selected=view.selected,
            trackers=view.trackers,
            keep=keep,
            warnings=view.warnings,
        )
        return HTMLResponse(page)

    add_compare_routes(app, CanReadLineage, LIMITER, masked)
    add_promotion_routes(app, CanReadLineage)
    return app
