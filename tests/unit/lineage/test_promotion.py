"""Promotion's selection rules (lineage/promotion.py): min and max, failed runs left out, ties to the
earliest map index, a missing objective or artifact an error naming the runs, no candidate an error
naming the task and the objective; the record written on the promoted run in a real fsspec store."""

from __future__ import annotations

import math

import pytest
from airflow.sdk import Asset

from torchx_airflow.exceptions import TorchXInputError
from torchx_airflow.lineage.keys import PROMOTED_KEY
from torchx_airflow.lineage.promotion import (
    PromoteSpec,
    TorchXPromotionError,
    candidates_from_results,
    check_promote_args,
    pick_best,
    promotion_extra,
    record_promotion,
    with_roots,
)
from torchx_airflow.operators.promote import TorchXPromoteOperator

MIN_LOSS = PromoteSpec("train", "loss", "min", "model", "model://p/best")
MAX_ACC = PromoteSpec("train", "accuracy", "max", "model", "model://p/best")


def _result(index: int, state: str = "SUCCEEDED", **metadata: object) -> dict:
    return {
        "app_handle": f"local_cwd://torchx/train-{index}",
        "state": state,
        "metadata": {"airflow_dag_id": "p", **metadata},
        "artifacts": {"model": {"name": "model", "path": f"/out/train-{index}/model.pt", "metadata": {}}},
    }


def _best(results: dict, spec: PromoteSpec = MIN_LOSS) -> int:
    return pick_best(candidates_from_results(results), spec, "Task 'promote'").map_index


def test_min_takes_the_smallest_and_max_the_largest():
    results = {0: _result(0, loss=0.3, accuracy=0.7), 1: _result(1, loss=0.1, accuracy=0.6),
               2: _result(2, loss=0.2, accuracy=0.9)}  # fmt: skip
    assert _best(results) == 1
    assert _best(results, MAX_ACC) == 2


def test_a_tie_goes_to_the_earliest_map_index():
    assert _best({0: _result(0, loss=0.5), 1: _result(1, loss=0.1), 2: _result(2, loss=0.1)}) == 1
    assert _best({0: _result(0, accuracy=0.9), 1: _result(1, accuracy=0.9)}, MAX_ACC) == 0


def test_failed_and_missing_runs_are_left_out_even_when_their_value_is_better():
    results = {0: _result(0, state="FAILED", loss=0.0), 1: None, 2: _result(2, loss=0.4)}
    assert _best(results) == 2


def test_no_succeeded_run_is_an_error_naming_the_task_and_the_objective():
    with pytest.raises(TorchXPromotionError, match=r"no run of task 'train' SUCCEEDED.*'loss'"):
        _best({0: _result(0, state="FAILED", loss=0.1), 1: None})
    with pytest.raises(TorchXPromotionError, match=r"0 map index"):
        _best({})


@pytest.mark.parametrize("bad", [None, math.nan, math.inf, "0.1", True])
def test_a_succeeded_run_without_a_finite_objective_is_left_out_never_blocking_the_others(bad, caplog):
    second = _result(1) if bad is None else _result(1, loss=bad)
    assert _best({0: _result(0, loss=0.2), 1: second}) == 0
    assert "map index 1 of 'train' (local_cwd://torchx/train-1) is left out" in caplog.text
    with pytest.raises(TorchXPromotionError, match="no run of 'train' recorded the objective 'loss'"):
        _best({1: second})


def test_the_metrics_the_task_recorded_at_the_end_decide_never_a_later_store_read():
    """train-1's loss in the store was rewritten after its task returned (any job may write there):
    the promotion reads the result's recorded ``metrics`` only, a curve's last point included."""
    results = {0: _result(0, loss=0.1), 1: _result(1, loss=0.5)}
    results[0]["metrics"] = {"loss": 0.1, "val_loss": 0.3}
    results[1]["metrics"] = {"loss": 0.5, "val_loss": 0.2}
    candidates = candidates_from_results(results)
    assert pick_best(candidates, MIN_LOSS, "t").map_index == 0
    by_val = PromoteSpec("train", "val_loss", "min", "model", "model://p/best")
    assert pick_best(candidates, by_val, "t").map_index == 1


def _with_roots(results: dict) -> list:
    """Candidates with the output roots their tasks recorded (``--out /out/train-<i>``)."""
    submitted = {i: {"output_roots": [f"/out/train-{i}"]} for i in results}
    return with_roots(candidates_from_results(results), submitted)


@pytest.mark.parametrize(
    "path", ["/etc/airflow/secret.key", "/out/train-0/../../etc/passwd", "/out/train-1/model.pt",
             "s3://attacker/backdoored.pt", "https://attacker.example/m.pt"],
)  # fmt: skip
def test_an_artifact_outside_the_tasks_own_directories_is_refused_naming_the_fix(path):
    result = {**_result(0, loss=0.1), "artifacts": {"model": {"name": "model", "path": path}}}
    best = pick_best(_with_roots({0: result}), MIN_LOSS, "t")
    expected = r"outside the directories its task named \(/out/train-0\).*artifact_roots="
    with pytest.raises(TorchXPromotionError, match=expected):
        promotion_extra(best, MIN_LOSS, "dag_run p/r1", "t")


def test_artifact_roots_admit_a_url_prefix_and_a_result_without_recorded_roots_admits_nothing():
    result = {**_result(0, loss=0.1), "artifacts": {"model": {"name": "model", "path": "s3://models/a/m.pt"}}}
    spec = PromoteSpec("train", "loss", "min", "model", "model://p/best", ("s3://models/",))
    best = pick_best(candidates_from_results({0: result}), spec, "t")
    assert promotion_extra(best, spec, "dag_run p/r1", "t")["path"] == "s3://models/a/m.pt"
    local = pick_best(candidates_from_results({0: _result(0, loss=0.1)}), MIN_LOSS, "t")
    with pytest.raises(TorchXPromotionError, match=r"its task named \(none\)"):
        promotion_extra(local, MIN_LOSS, "dag_run p/r1", "t")


def test_the_extra_carries_the_run_the_path_and_the_value():
    best = pick_best(_with_roots({0: _result(0, loss=0.25)}), MIN_LOSS, "t")
    assert promotion_extra(best, MIN_LOSS, "dag_run p/r1", "t") == {
        "app_handle": "local_cwd://torchx/train-0",
        "artifact": "model",
        "path": "/out/train-0/model.pt",
        "objective": "loss",
        "mode": "min",
        "value": 0.25,
        "runs_of": "train",
        "map_index": 0,
        "promoted_by": "dag_run p/r1",
    }


def test_a_best_run_without_the_artifact_is_an_error_naming_it():
    result = {**_result(0, loss=0.1), "artifacts": {"checkpoint": {"path": "/c"}}}
    best = pick_best(candidates_from_results({0: result}), MIN_LOSS, "t")
    expected = r"recorded no artifact 'model' \(recorded: \['checkpoint'\]\)"
    with pytest.raises(TorchXPromotionError, match=expected):
        promotion_extra(best, MIN_LOSS, "dag_run p/r1", "t")


def test_the_promotion_is_recorded_on_the_run_in_the_store(tmp_path):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    store = FsspecStore(str(tmp_path))
    best = pick_best(_with_roots({0: _result(0, loss=0.25)}), MIN_LOSS, "t")
    record_promotion([store], promotion_extra(best, MIN_LOSS, "dag_run p/r1", "t"), MIN_LOSS.asset_uri)
    record = store.metadata("local_cwd://torchx/train-0")[PROMOTED_KEY]
    assert {k: v for k, v in record.items() if k != "at"} == {
        "asset": "model://p/best",
        "artifact": "model",
        "objective": "loss",
        "value": 0.25,
        "promoted_by": "dag_run p/r1",
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "minimum"}, r"mode='minimum' is not one of \['min', 'max'\]"),
        ({"objective": ""}, r"objective='' must be a non-empty string"),
        ({"runs_of": None}, r"runs_of=None must be a non-empty string"),
        ({"runs_of": "promote"}, r"runs_of='promote' is the promoting task itself"),
        ({"artifact": 3}, r"artifact=3 must be a non-empty string"),
    ],
)
def test_bad_arguments_fail_at_construction_naming_the_fix(kwargs, message):
    args = {"runs_of": "train", "objective": "loss", "mode": "min", "artifact": "model", **kwargs}
    with pytest.raises(TorchXInputError, match=message):
        check_promote_args("promote", **args)
    with pytest.raises(TorchXInputError, match=message):
        TorchXPromoteOperator(task_id="promote", asset=Asset("model://p/best"), **args)


def test_the_asset_must_be_an_asset_and_becomes_an_outlet():
    args = {"runs_of": "train", "objective": "loss", "mode": "min", "artifact": "model"}
    with pytest.raises(TorchXInputError, match=r"asset='model://p/best' is not an Asset"):
        TorchXPromoteOperator(task_id="promote", asset="model://p/best", **args)  # type: ignore[arg-type]
    asset = Asset("model://p/best")
    op = TorchXPromoteOperator(task_id="promote", asset=asset, **args)
    assert op.outlets == [asset] and op.trigger_rule == "all_done"
