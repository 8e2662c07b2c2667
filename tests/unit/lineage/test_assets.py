"""Artifacts to Airflow assets (lineage/assets.py): the mapping's checks name the fix, a succeeded
app puts its run on the asset event, a missing artifact fails."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from airflow.sdk import Asset, AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors

from torchx_airflow.exceptions import TorchXInputError
from torchx_airflow.lineage.assets import (
    TorchXArtifactMissingError,
    TorchXArtifactOutsideRootsError,
    check_artifact_assets,
    emit_asset_events,
)

MODEL = Asset("s3://ml/models/resnet")


@pytest.mark.parametrize(
    ("mapping", "kwargs", "message"),
    [
        ({"model": "s3://ml/models/resnet"}, {}, r"not an Asset or AssetAlias"),
        ({"": MODEL}, {}, r"key '' is not an artifact name"),
        ({"model": MODEL, "best": MODEL}, {}, r"more than one artifact"),
        ({"model": MODEL}, {"wait_for_completion": False}, r"needs wait_for_completion=True"),
    ],
)
def test_bad_artifact_assets_name_the_fix(mapping, kwargs, message):
    with pytest.raises(TorchXInputError, match=message):
        check_artifact_assets("train", mapping, [MODEL], **kwargs)


def _context():
    return {"outlet_events": OutletEventAccessors(), "ti": SimpleNamespace(try_number=2)}


ROOTS = ("/m",)  # the task's output roots
RESULT = {
    "app_handle": "slurm://torchx/12",
    "state": "SUCCEEDED",
    "metadata": {"airflow_dag_id": "d"},
    "artifacts": {"model": {"name": "model", "path": "/m/model.pt", "metadata": {"lr": 0.1}}},
    "sources": [],
}


def test_a_succeeded_app_puts_its_run_on_the_asset_event():
    context = _context()
    alias = AssetAlias("models")
    emit_asset_events(context, {"model": MODEL}, RESULT, ROOTS)
    assert context["outlet_events"][MODEL].extra == {
        "app_handle": "slurm://torchx/12",
        "artifact": "model",
        "path": "/m/model.pt",
        "metadata": {"lr": 0.1},
        "try_number": 2,
    }
    emit_asset_events(context, {"model": alias}, RESULT, ROOTS)
    (event,) = context["outlet_events"][alias].asset_alias_events
    assert (
        event.dest_asset_key.uri == "file:///m/model.pt" and event.extra["app_handle"] == "slurm://torchx/12"
    )


def test_an_app_that_did_not_succeed_puts_nothing_on_asset_events():
    context = _context()
    emit_asset_events(context, {"model": MODEL}, {**RESULT, "state": "RUNNING"}, ROOTS)
    assert context["outlet_events"][MODEL].extra == {}


def test_a_missing_artifact_fails_naming_the_fix():
    with pytest.raises(
        TorchXArtifactMissingError, match=r"recorded no artifact 'best'.*add_artifact\('best'"
    ):
        emit_asset_events(_context(), {"best": MODEL}, RESULT, ROOTS)
    untracked = {**RESULT, "metadata": {}, "artifacts": {}}
    with pytest.raises(TorchXArtifactMissingError, match=r"no tracker connections"):
        emit_asset_events(_context(), {"model": MODEL}, untracked, ROOTS)


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "/m/../etc/passwd", "/mx/model.pt", "https://attacker.example/x"]
)
def test_an_artifact_outside_the_output_roots_publishes_no_event_through_an_asset_or_an_alias(path):
    """Any job tracking to the store could have recorded the path: outside the task's output roots
    it is no event, neither for an Asset nor (to any URI) through an AssetAlias."""
    foreign = {**RESULT, "artifacts": {"model": {"name": "model", "path": path, "metadata": {}}}}
    for target in (MODEL, AssetAlias("models")):
        context = _context()
        with pytest.raises(
            TorchXArtifactOutsideRootsError, match="outside the task's output roots.*output_roots"
        ):
            emit_asset_events(context, {"model": target}, foreign, ROOTS)
        assert not context["outlet_events"][target].extra
