"""The comparison view's endpoints, on the lineage view's app and under its rules.

    GET {URL_PREFIX}/compare/{dag_id}/{run_id}?task_id=train     one DAG run's runs of a task (a sweep)
    GET {URL_PREFIX}/compare/{dag_id}?task_id=train&last=20       the task's runs in the DAG's last runs
    GET {URL_PREFIX}/api/compare/...                              the same data, JSON

Query: ``sort`` (``run``, ``state``, ``attempts``, ``elapsed_s``, ``cpu_hours``, ``gpu_hours``,
``cost``, ``cache_hit``, ``metric:<name>``, ``param:<name>``) and ``order`` (``asc``/``desc``);
``show`` (repeated: row keys ``<DAG run id>/<map index>`` whose curves to plot), ``metric`` (the
curve to plot), ``a`` and ``b`` (two row keys to diff). In one DAG run, a sweep's task (``<sweep>.rung_1``,
``<sweep>.plan_0``, ``<sweep>.promote``) or its group's id (``task_id=<sweep>``) shows the whole
sweep as trials x rungs (``plugins/sweep_view.py``); ``layout=runs`` shows the task's own runs
instead, ``layout=sweep`` only a sweep (404 for another task; 400 on the per-DAG route, a sweep being
one DAG run's). Authorised as the lineage view (read access to the DAG's runs, task instances and
XComs), bounded by its limiter, masked as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from airflow.api_fastapi.common.db.common import SessionDep
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from torchx_airflow.plugins.airflow_runs import DagRunNotFound
from torchx_airflow.plugins.compare import COLUMNS, DEFAULT_LAST, MAX_ROWS, comparison_json, load_comparison
from torchx_airflow.plugins.compare_render import render_compare_page
from torchx_airflow.plugins.sweep_render import render_sweep_page, runs_url_of
from torchx_airflow.plugins.sweep_view import find_sweep, load_sweep, sweep_json

TaskQuery = Annotated[str, Query(min_length=1, description="the task whose runs to compare")]
LastQuery = Annotated[int, Query(ge=1, le=MAX_ROWS, description="how many of the latest runs")]
ShowQuery = Annotated[list[str] | None, Query(description="row keys whose curves to plot")]
OrderQuery = Annotated[str, Query(pattern="^(asc|desc)$")]
LayoutQuery = Annotated[
    str | None, Query(pattern="^(sweep|runs)$", description="sweep: trials x rungs; runs: the task's runs")
]
#: where the promotion endpoint is mounted (``plugins/promotion.py``; see ``compare_render.promote_cell``)
PROMOTE_PATH: str | None = "/api/promote"


def masked_json(value: Any, masked: Callable[[str], str]) -> Any:
    """Every text in ``value`` (keys too) through the lineage view's ``masked``."""
    if isinstance(value, str):
        return masked(value)
    if isinstance(value, dict):
        return {masked(str(k)): masked_json(v, masked) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [masked_json(v, masked) for v in value]
    return value


def _check_sort(sort: str | None) -> None:
    if sort and sort not in COLUMNS and not sort.startswith(("metric:", "param:")):
        raise HTTPException(
            400, f"Unknown sort column {sort!r}: use one of {list(COLUMNS)}, metric:<name> or param:<name>."
        )


def _data(
    view: _View,
    request: Request,
    session: Any,
    dag_id: str,
    run_id: str | None,
    task_id: str,
    last: int,
    params: dict[str, Any],
) -> dict[str, Any]:
    _check_sort(params["sort"])
    if run_id is None and params["layout"] == "sweep":
        raise HTTPException(
            400,
            f"layout=sweep shows a sweep of one DAG run: open /compare/{dag_id}/<run_id>?task_id={task_id} "
            "(or its /api/compare/... JSON) with the DAG run's id, or drop layout=sweep to compare the "
            "task's runs in the DAG's last runs.",
        )
    root = str(request.scope.get("root_path", ""))
    with view.limiter.slot():
        if run_id is not None and params["layout"] != "runs":
            sweep = _sweep_data(session, dag_id, run_id, task_id, params["layout"], root)
            if sweep is not None:
                return masked_json(sweep, view.masked)
        try:
            comparison = load_comparison(session, dag_id, task_id, run_id, last, lineage_prefix=root)
        except DagRunNotFound as e:
            raise HTTPException(404, str(e)) from e
        a, b = params["a"], params["b"]
        data = comparison_json(
            comparison,
            sort=params["sort"],
            order=params["order"],
            show=params["show"] or [],
            metric=params["metric"],
            diff=(a, b) if a and b else None,
        )
    return masked_json(data, view.masked)


def _sweep_data(
    session: Any, dag_id: str, run_id: str, task_id: str, layout: str | None, root: str
) -> dict[str, Any] | None:
    """The sweep ``task_id`` belongs to, as JSON; None when it is no sweep's (404 with ``layout=sweep``)."""
    try:
        sweep_id = find_sweep(session, dag_id, run_id, task_id)
    except DagRunNotFound as e:
        raise HTTPException(404, str(e)) from e
    if sweep_id is None:
        if layout == "sweep":
            raise HTTPException(
                404,
                f"Task {task_id!r} of DAG run {run_id!r} is not part of a sweep (a torchx_sweep task group "
                "with <sweep>.plan_0 and <sweep>.rung_0): pass the sweep's id or one of its tasks as "
                "task_id, or drop layout=sweep to compare the task's runs.",
            )
        return None
    return sweep_json(load_sweep(session, dag_id, run_id, sweep_id, lineage_prefix=root))


def _page(request: Request, data: dict[str, Any], api_path: str, query: dict[str, Any]) -> HTMLResponse:
    root = str(request.scope.get("root_path", ""))
    pairs = [(k, v) for k, v in query.items() if v not in (None, "") and not isinstance(v, list)]
    pairs += [("show", s) for s in query.get("show") or []]
    if data.get("layout") == "sweep":
        page = render_sweep_page(
            data,
            static_url=f"{root}/static",
            json_url=f"{root}{api_path}?{urlencode(pairs)}",
            runs_url=runs_url_of(root, data["dag_id"], data["dag_run_id"]),
        )
        return HTMLResponse(page)
    promote = f"{root}{PROMOTE_PATH}" if PROMOTE_PATH else None
    page = render_compare_page(
        data,
        static_url=f"{root}/static",
        json_url=f"{root}{api_path}?{urlencode(pairs)}",
        query=query,
        promote_url=promote,
    )
    return HTMLResponse(page)


def compare_query(
    task_id: TaskQuery,
    sort: str | None = None,
    order: OrderQuery = "asc",
    show: ShowQuery = None,
    metric: str | None = None,
    a: str | None = None,
    b: str | None = None,
    layout: LayoutQuery = None,
) -> dict[str, Any]:
    """The query every comparison route takes (a FastAPI dependency), ``last`` set by the route."""
    return {
        "task_id": task_id,
        "last": None,
        "sort": sort,
        "order": order,
        "show": show or [],
        "metric": metric,
        "a": a,
        "b": b,
        "layout": layout,
    }


CompareQuery = Annotated[dict[str, Any], Depends(compare_query)]


@dataclass(frozen=True)
class _View:
    """What the comparison routes take from the lineage view's app: its limiter and its masking."""

    limiter: Any
    masked: Callable[[str], str]


def add_compare_routes(
    app: FastAPI, read_dependencies: list[Any], limiter: Any, masked: Callable[[str], str]
) -> None:
    """Add the comparison page and its JSON to the lineage view's app, under its read checks
    (``read_dependencies``), its ``limiter`` and its ``masked``."""
    view = _View(limiter, masked)

    @app.get("/api/compare/{dag_id}/{run_id}", dependencies=read_dependencies)
    def compare_run_json(
        dag_id: str, run_id: str, query: CompareQuery, request: Request, session: SessionDep
    ) -> dict[str, Any]:
        """One DAG run's runs of ``task_id`` (every map index), compared."""
        return _data(view, request, session, dag_id, run_id, query["task_id"], MAX_ROWS, query)

    @app.get("/api/compare/{dag_id}", dependencies=read_dependencies)
    def compare_last_json(
        dag_id: str,
        query: CompareQuery,
        request: Request,
        session: SessionDep,
        last: LastQuery = DEFAULT_LAST,
    ) -> dict[str, Any]:
        """The runs of ``task_id`` in the DAG's ``last`` runs, compared."""
        query["last"] = last
        return _data(view, request, session, dag_id, None, query["task_id"], last, query)

    @app.get("/compare/{dag_id}/{run_id}", response_class=HTMLResponse, dependencies=read_dependencies)
    def compare_run_page(
        dag_id: str, run_id: str, query: CompareQuery, request: Request, session: SessionDep
    ) -> HTMLResponse:
        """The comparison page of one DAG run's runs of ``task_id``."""
        data = _data(view, request, session, dag_id, run_id, query["task_id"], MAX_ROWS, query)
        path = f"/api/compare/{quote(dag_id, safe='')}/{quote(run_id, safe='')}"
        return _page(request, data, path, query)

    @app.get("/compare/{dag_id}", response_class=HTMLResponse, dependencies=read_dependencies)
    def compare_last_page(
        dag_id: str,
        query: CompareQuery,
        request: Request,
        session: SessionDep,
        last: LastQuery = DEFAULT_LAST,
    ) -> HTMLResponse:
        """The comparison page of the runs of ``task_id`` in the DAG's last runs."""
        query["last"] = last
        data = _data(view, request, session, dag_id, None, query["task_id"], last, query)
        return _page(request, data, f"/api/compare/{quote(dag_id, safe='')}", query)
