"""Extra links on TorchX tasks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import BaseOperatorLink

from torchx_airflow.lineage.keys import XCOM_TRACKER_URL, XCOM_UI_URL

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey


class TorchXAppLink(BaseOperatorLink):
    """Link to the app in its scheduler's UI (or its log directory for local schedulers), when it has one."""

    name = "TorchX App"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(ti_key=ti_key, key=XCOM_UI_URL) or ""


class TorchXTrackerLink(BaseOperatorLink):
    """Link to the app's run in the MLflow UI, when the task tracks to an MLflow server over http(s)."""

    name = "MLflow Run"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(ti_key=ti_key, key=XCOM_TRACKER_URL) or ""
