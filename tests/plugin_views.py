"""The provider plugin's app (``torchx_airflow.plugins.app``) in the tests' process, on the tests'
metadata DB, with its read checks passed: the sweep tests read the comparison and lineage views of
their real DAG runs through the plugin's own routes (tests/integration/test_compare_view.py runs the
same routes behind Airflow's auth, where a user without access gets 403)."""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest


@contextlib.contextmanager
def plugin_client() -> Iterator[Any]:
    """A test client of the plugin's app; the access checks stood in for, for the DAG run and for
    the other DAG runs its lineage reaches (a cache hit's)."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from torchx_airflow.plugins import app as plugin_app

    app = plugin_app.create_app()
    for check in plugin_app.CanReadLineage:
        app.dependency_overrides[check.dependency] = lambda: None
    app.dependency_overrides[get_user] = lambda: None
    with pytest.MonkeyPatch.context() as mp, TestClient(app) as client:
        mp.setattr(plugin_app, "readable_dag_ids", lambda dag_ids, user: set(dag_ids))
        yield client


def view_of(client: Any, path: str, result: Any, **query: Any) -> Any:
    """``GET <path>/<dag_id>/<run_id>?<query>`` of a ``DagRunResult``: the JSON under ``/api/``, else
    the page's text; any answer but 200 fails."""
    run = urllib.parse.quote(result.run_id, safe="")
    reply = client.get(f"{path}/{result.dag_id}/{run}", params=query)
    assert reply.status_code == 200, reply.text
    return reply.json() if "/api/" in path else reply.text
