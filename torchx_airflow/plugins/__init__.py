"""The TorchX lineage view: an Airflow plugin shipped with the provider.

Registered through the ``airflow.plugins`` entry point. It adds a FastAPI app to the API server
(``fastapi_apps``) and tabs to the UI (``external_views``): "TorchX lineage" on a DAG run's page
and on a task instance's page, showing the graph of the run's TorchX runs and tracker artifacts, and
"TorchX compare" on a task instance's page, comparing the task's runs in the DAG run.

Airflow loads plugins in every process, DAG processor and task workers included, so this module
imports nothing but the plugin base class: the app (FastAPI, the tracker stores, SQLAlchemy
queries) is built the first time the API server asks for ``fastapi_apps``.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.plugins_manager import AirflowPlugin

URL_PREFIX = "/torchx"
VIEW_NAME = "TorchX lineage"
COMPARE_VIEW_NAME = "TorchX compare"
ICON = f"{URL_PREFIX}/static/lineage.svg"


class _AppOnFirstUse:
    """``fastapi_apps``, built when first read: only the API server reads it."""

    def __init__(self) -> None:
        self._apps: list[dict[str, Any]] | None = None

    def __get__(self, instance: object, owner: type | None = None) -> list[dict[str, Any]]:
        if self._apps is None:
            from torchx_airflow.plugins.app import create_app

            self._apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": VIEW_NAME}]
        return self._apps


class TorchXLineagePlugin(AirflowPlugin):
    """The lineage view of a DAG run's TorchX runs, as tabs on the DAG run and task instance pages."""

    name = "torchx_lineage"
    fastapi_apps = _AppOnFirstUse()
    external_views = [
        {
            "name": VIEW_NAME,
            "href": f"{URL_PREFIX}/lineage/{{DAG_ID}}/{{RUN_ID}}",
            "destination": "dag_run",
            "url_route": "torchx-lineage",
            "icon": ICON,
        },
        {
            "name": VIEW_NAME,
            "href": f"{URL_PREFIX}/lineage/{{DAG_ID}}/{{RUN_ID}}?task_id={{TASK_ID}}&map_index={{MAP_INDEX}}",
            "destination": "task_instance",
            "url_route": "torchx-lineage-task",
            "icon": ICON,
        },
        {
            # every run of the task in this DAG run (a sweep's map indexes), compared
            "name": COMPARE_VIEW_NAME,
            "href": f"{URL_PREFIX}/compare/{{DAG_ID}}/{{RUN_ID}}?task_id={{TASK_ID}}",
            "destination": "task_instance",
            "url_route": "torchx-compare-task",
            "icon": ICON,
        },
    ]
