"""The manual promotion endpoint's request checks and the comparison view's Promote form
(plugins/promotion.py, compare_render.promote_cell); the endpoint itself runs on a real Airflow in
tests/e2e/test_promotion_rest.py."""

from __future__ import annotations

import pytest
from fastapi import HTTPException
from starlette.requests import Request

from torchx_airflow.plugins.compare_render import promote_cell
from torchx_airflow.plugins.promotion import check_same_origin


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
