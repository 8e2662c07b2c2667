"""The manual promotion endpoint's request and access checks and the comparison view's Promote form
(plugins/promotion.py, compare_render.promote_cell); the endpoint itself runs on a real Airflow in
tests/e2e/test_promotion_rest.py. The access checks run with Airflow's real SimpleAuthManager and its
roles (a user may edit DAGs, only an op may create asset events)."""

from __future__ import annotations

import pytest
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from airflow.api_fastapi.core_api import security
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient
from starlette.requests import Request

from torchx_airflow.plugins.compare_render import promote_cell
from torchx_airflow.plugins.promotion import add_promotion_routes, check_same_origin


def _client(monkeypatch, role: str) -> TestClient:
    """The promotion endpoint on an app of its own, for a signed-in user with ``role``."""
    monkeypatch.setattr(security, "get_auth_manager", SimpleAuthManager)
    app = FastAPI()
    add_promotion_routes(app, [])
    app.dependency_overrides[security.get_user] = lambda: SimpleAuthManagerUser(username="u", role=role)
    return TestClient(app)


@pytest.mark.parametrize("role", ["viewer", "user"])
def test_a_user_who_may_not_create_asset_events_is_refused(monkeypatch, role):
    """``user`` may edit the DAG but not create asset events (Airflow's POST /assets/events refuses
    them too): refused before anything is read or emitted."""
    reply = _client(monkeypatch, role).post("/api/promote/d/r", json={"task_id": "train"})
    assert (reply.status_code, reply.json()) == (403, {"detail": "Forbidden"})


def test_an_op_passes_the_access_checks(monkeypatch):
    """The access checks let an op through (the request then needs the DAG, which is not here)."""
    app = FastAPI()
    add_promotion_routes(app, [])
    (route,) = [r for r in app.routes if getattr(r, "path", "") == "/api/promote/{dag_id}/{run_id}"]
    monkeypatch.setattr(security, "get_auth_manager", SimpleAuthManager)
    checks = [d.dependency for d in route.dependencies if "requires_access" in d.dependency.__qualname__]
    assert len(checks) == 2  # the DAG's edit and the asset's POST
    request = Request({"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""})
    for check in checks:
        check(request, SimpleAuthManagerUser(username="o", role="op"))  # does not raise
        with pytest.raises(HTTPException):
            check(request, SimpleAuthManagerUser(username="v", role="viewer"))


def _request(**headers: str) -> Request:
    raw = [(k.lower().replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": [(b"host", b"af:8080"), *raw]})


def test_a_same_origin_json_request_passes():
    check_same_origin(_request(content_type="application/json; charset=utf-8", origin="http://af:8080"))
    check_same_origin(_request(content_type="application/json", sec_fetch_site="same-origin"))


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 415),  # no content type: FastAPI would parse it as JSON, a cross-site Blob sends none
        ({"content_type": "text/plain"}, 415),
        ({"content_type": "application/x-www-form-urlencoded"}, 415),
        ({"content_type": "application/json", "sec_fetch_site": "cross-site"}, 403),
        ({"content_type": "application/json", "sec_fetch_site": "same-site"}, 403),
        ({"content_type": "application/json", "origin": "https://evil.example"}, 403),
    ],
)
def test_other_requests_are_refused(headers, status):
    with pytest.raises(HTTPException) as refused:
        check_same_origin(_request(**headers))
    assert refused.value.status_code == status


def test_the_promote_form_posts_to_the_run_and_carries_the_row():
    data = {"dag_id": "my dag", "task_id": "train"}
    run = {
        "dag_run_id": "manual__2026-01-01T00:00:00+00:00",
        "map_index": 3,
        "torchx_run_id": "local_cwd://t/a",
    }
    cell = promote_cell(run, "/torchx/api/promote", data)
    assert 'action="/torchx/api/promote/my%20dag/manual__2026-01-01T00%3A00%3A00%2B00%3A00"' in cell
    assert '<input type="hidden" name="map_index" value="3">' in cell and "disabled" not in cell
    assert "disabled" in promote_cell(run, None, data)
    assert "disabled" in promote_cell({**run, "torchx_run_id": None}, "/torchx/api/promote", data)
