"""Reading OpenLineage events that the provider's file transport wrote, for the tests."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def file_transport(path: Path) -> dict[str, str]:
    """Env that sends every OpenLineage event of an Airflow process to ``path`` (one JSON a line)."""
    return {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(path), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "torchx-tests",
    }


def read_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def task_events(events: Iterable[dict], dag_id: str, task_id: str) -> list[dict]:
    """The events of one task's job (``<dag_id>.<task_id>``), every run of it, in file order."""
    return [e for e in events if e["job"]["name"] == f"{dag_id}.{task_id}"]


def by_type(events: Iterable[dict], event_type: str) -> list[dict]:
    return [e for e in events if e["eventType"] == event_type]


def datasets(event: dict, kind: str) -> set[tuple[str, str]]:
    """``{(namespace, name)}`` of an event's ``inputs`` or ``outputs``."""
    return {(d["namespace"], d["name"]) for d in event.get(kind) or []}


def run_dataset(app_handle: str) -> tuple[str, str]:
    """The dataset of a TorchX run, as the naming the provider documents: torchx://<scheduler>."""
    scheduler, rest = app_handle.split("://", 1)
    return f"torchx://{scheduler}", rest


def validate(event: dict) -> None:
    """Rebuild ``event`` through openlineage-python's model (generated from the OpenLineage JSON
    schema, with its validators: ISO event time, UUID run id, URI producer and schema URLs) and
    check that nothing the spec requires is missing or of the wrong type."""
    from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState

    for facets in [event["run"].get("facets", {}), event["job"].get("facets", {})]:
        for name, facet in facets.items():
            assert isinstance(facet.get("_producer"), str) and facet["_producer"], name
            assert ":" in facet.get("_schemaURL", ""), (name, facet.get("_schemaURL"))
    RunEvent(
        eventType=RunState(event["eventType"]),
        eventTime=event["eventTime"],
        run=Run(runId=event["run"]["runId"]),
        job=Job(namespace=event["job"]["namespace"], name=event["job"]["name"]),
        producer=event["producer"],
        inputs=[InputDataset(namespace=d["namespace"], name=d["name"]) for d in event.get("inputs") or []],
        outputs=[OutputDataset(namespace=d["namespace"], name=d["name"]) for d in event.get("outputs") or []],
    )
    assert event["schemaURL"].startswith("https://openlineage.io/spec/")
    for dataset in [*(event.get("inputs") or []), *(event.get("outputs") or [])]:
        assert isinstance(dataset["namespace"], str) and dataset["namespace"], dataset
        assert isinstance(dataset["name"], str) and dataset["name"], dataset
