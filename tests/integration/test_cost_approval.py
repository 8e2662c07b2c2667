"""Over-budget approval through Airflow's own human-in-the-loop, on a running Airflow
(tests/dags/torchx_approval_dags.py, local_cwd): the tasks wait in ``awaiting_input`` with the
estimate in their request, assigned to the connection's approver; approved by that approver through
the REST API, the app is submitted and the result records who approved and who asked (the requester,
``admin``, who triggered the run, is refused by Airflow); rejected, or unanswered at the connection's
timeout, nothing is submitted and the task fails naming the estimate; approved after the app changed (a
Variable its function reads), nothing is submitted and the task fails naming the approved and the new
fingerprint; on a connection that names no approver, the requester's own approval submits nothing.
A sweep whose first rung is over its ``max_cost`` asks the same way before anything trains: approved,
it trains and promotes; rejected, it trains nothing and promotes nothing, saying why."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

import pytest

from tests.polling import wait_until
from tests.stack import REPO, AirflowStack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]
PRICES = {"cpu_hour": 0.04, "mem_gb_hour": 0.01, "currency": "EUR"}
DAG, TIMEOUT_DAG, CHANGED_DAG = "tx_cost_approval", "tx_cost_approval_timeout", "tx_cost_approval_changed"
SELF_DAG = "tx_cost_approval_self"
SWEEP_DAG = "tx_cost_approval_sweep"
APPROVER = "approver"  # a second Airflow user; admin triggers every run
ESTIMATE = "0.4800 EUR"  # 8 CPUs x 0.04 + 16 GB x 0.01, for an hour
# longer than the scheduler takes to see the parked workload end (a few seconds on a busy machine): a
# timeout sweep before that resumes the task, and the parked workload's late "success" fails it
SHORT_TIMEOUT = 15


def _conn(timeout_s: float, approvers: list[str] | None = None) -> str:
    extra = {"scheduler": "local_cwd", "prices": PRICES, "cost_approval_timeout": timeout_s}
    if approvers is not None:
        extra["cost_approvers"] = approvers
    return json.dumps({"conn_type": "torchx", "extra": extra})


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    home = tmp_path_factory.mktemp("approval-airflow")
    stack = AirflowStack(
        home=home,
        dags_folder=REPO / "tests" / "dags",
        env_extra={
            "AIRFLOW_CONN_TORCHX_APPROVAL": _conn(600, [APPROVER]),
            "AIRFLOW_CONN_TORCHX_APPROVAL_SHORT": _conn(SHORT_TIMEOUT, [APPROVER]),
            "AIRFLOW_CONN_TORCHX_APPROVAL_OPEN": _conn(600),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"admin:admin,{APPROVER}:admin",
            # the scheduler's sweep that answers requests past their timeout (default every 15 s)
            "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "2",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW_CONN_APPROVAL_FS": json.dumps(
                {"conn_type": "torchx_fsspec", "extra": {"root": str(home / "store")}}
            ),
            "AIRFLOW_VAR_TX_APPROVAL_SWEEP_OUT": str(home / "sweep"),
        },
    )
    with stack.running():
        yield stack


def _hitl_path(dag_id: str, run_id: str, task_id: str) -> str:
    return f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/{task_id}/-1/hitlDetails"


def _parked(stack: AirflowStack, dag_id: str, run_id: str, task_id: str) -> None:
    """Once the scheduler has taken the parked workload's end from its executor: an answer before
    that resumes the task, and the late "success" of the parked workload then fails it (Airflow's
    race, which a person answering seconds later never meets)."""
    parked = (
        "event with state success for task instance "
        f"TaskInstanceKey(dag_id='{dag_id}', task_id='{task_id}', run_id='{run_id}'"
    )
    scheduler_log = stack.home / "stack" / "scheduler.log"
    wait_until(lambda: parked in scheduler_log.read_text(), f"{task_id} parked", 120)


def _answer(
    stack: AirflowStack,
    run_id: str,
    task_id: str,
    option: str,
    dag_id: str = DAG,
    before=None,
    user: str = APPROVER,
) -> dict:
    """``user`` answers ``option`` to the task's request once it waits (calling ``before()`` just
    before)."""
    ti = stack.wait_ti(dag_id, run_id, task_id, ("awaiting_input", "failed", "success"), timeout=600)
    assert ti["state"] == "awaiting_input", stack.log(dag_id, run_id, task_id, 1)[-3000:]
    request = stack.api("GET", _hitl_path(dag_id, run_id, task_id))
    assert request["options"] == ["Approve", "Reject"] and request["defaults"] == ["Reject"]
    assert f"estimated {ESTIMATE}" in request["subject"] and "over max_cost 0.01" in request["subject"]
    assert "requested 8 CPU, 0 GPU, 16384 MB memory" in request["body"]
    assert "**App fingerprint**: `sha256:" in request["body"]
    assert stack.xcom(dag_id, run_id, task_id, "app_handle") is None  # nothing submitted while it waits
    _parked(stack, dag_id, run_id, task_id)
    if before is not None:
        before()
    token = None if user == "admin" else stack.token_of(user)
    answer = {"chosen_options": [option], "params_input": {}}
    return stack.api("PATCH", _hitl_path(dag_id, run_id, task_id), answer, token=token)


@pytest.fixture(scope="module")
def runs(stack):
    """One run nobody answers, beside one approved, then one rejected (one after the other: the
    stack's SQLite database takes one writer at a time)."""
    unanswered, approved = stack.trigger(TIMEOUT_DAG), stack.trigger(DAG)
    with pytest.raises(urllib.error.HTTPError) as refused:  # the requester is no assigned approver
        _answer(stack, approved, "dear", "Approve", user="admin")
    assert refused.value.code == 403
    for task_id in ("dear", "dear_decorated"):
        _answer(stack, approved, task_id, "Approve")
    runs = {"approved": (approved, stack.wait_run(DAG, approved, timeout=600))}
    runs["unanswered"] = (unanswered, stack.wait_run(TIMEOUT_DAG, unanswered, timeout=600))
    rejected = stack.trigger(DAG)
    for task_id in ("dear", "dear_decorated"):
        _answer(stack, rejected, task_id, "Reject")
    runs["rejected"] = (rejected, stack.wait_run(DAG, rejected, timeout=600))
    # the app changes between the question and the answer: two replicas instead of one
    changed = stack.trigger(CHANGED_DAG)

    def more_replicas() -> None:
        stack.api("POST", "/variables", {"key": "tx_approval_replicas", "value": "2"})

    _answer(stack, changed, "changed", "Approve", CHANGED_DAG, before=more_replicas)
    runs["changed"] = (changed, stack.wait_run(CHANGED_DAG, changed, timeout=600))
    own = stack.trigger(SELF_DAG)  # no approver named: anyone may answer, and the requester does
    _answer(stack, own, "dear", "Approve", SELF_DAG, user="admin")
    runs["self"] = (own, stack.wait_run(SELF_DAG, own, timeout=600))
    return runs


def test_approved_runs_are_submitted_and_record_the_approval(stack, runs):
    run_id, state = runs["approved"]
    assert state == "success", [stack.log(DAG, run_id, t, 1)[-4000:] for t in ("dear", "dear_decorated")]
    for task_id in ("dear", "dear_decorated"):
        result = stack.xcom(DAG, run_id, task_id, "return_value")
        assert result["state"] == "SUCCEEDED"
        assert result["app_handle"].startswith("local_cwd://")
        assert stack.xcom(DAG, run_id, task_id, "app_handle") == result["app_handle"]
        approval = result["cost_approval"]
        assert approval["approved_by"]["name"] == APPROVER and approval["requested_by"] == "admin"
        assert approval["responded_at"]
        assert (approval["estimate"], approval["max_cost"], approval["currency"]) == (0.48, 0.01, "EUR")
        log = stack.log(DAG, run_id, task_id, 1)
        assert "waiting up to 600 s for an approver" in log
        assert f"{APPROVER} approved the estimated cost over max_cost" in log
        request = stack.api("GET", _hitl_path(DAG, run_id, task_id))
        assert [u["id"] for u in request["assigned_users"]] == [APPROVER]
        assert "Submitted TorchX app" in log


def test_rejected_runs_submit_nothing_and_fail_with_the_estimate(stack, runs):
    run_id, state = runs["rejected"]
    assert state == "failed"
    for task_id in ("dear", "dear_decorated"):
        assert stack.ti(DAG, run_id, task_id)["state"] == "failed"
        assert stack.xcom(DAG, run_id, task_id, "app_handle") is None
        log = stack.log(DAG, run_id, task_id, 1)
        assert (
            f"the estimated cost {ESTIMATE} is over max_cost=0.01 EUR and was not approved: {APPROVER}" in log
        )
        assert "rejected it at" in log
        assert "Submitted TorchX app" not in log


def test_unanswered_run_is_rejected_at_the_timeout(stack, runs):
    run_id, state = runs["unanswered"]
    assert state == "failed"
    request = stack.api("GET", _hitl_path(TIMEOUT_DAG, run_id, "dear"))
    assert request["chosen_options"] == ["Reject"] and request["responded_by_user"] is None
    assert stack.xcom(TIMEOUT_DAG, run_id, "dear", "app_handle") is None
    log = stack.log(TIMEOUT_DAG, run_id, "dear", 1)
    assert f"was not approved: no approver answered within {SHORT_TIMEOUT} s" in log
    assert "Submitted TorchX app" not in log


def test_an_approval_of_another_app_submits_nothing(stack, runs):
    run_id, state = runs["changed"]
    assert state == "failed"
    assert stack.xcom(CHANGED_DAG, run_id, "changed", "app_handle") is None
    log = stack.log(CHANGED_DAG, run_id, "changed", 1)
    assert f"{APPROVER} (id {APPROVER}) approved it at" in log
    assert "but the app changed since (approved sha256:" in log
    assert "Submitted TorchX app" not in log


def test_the_requester_cannot_approve_their_own_run(stack, runs):
    run_id, state = runs["self"]
    assert state == "failed"
    assert stack.xcom(SELF_DAG, run_id, "dear", "app_handle") is None
    log = stack.log(SELF_DAG, run_id, "dear", 1)
    assert "admin (id admin) approved it at" in log and "they triggered this DAG run" in log
    assert "Submitted TorchX app" not in log


def _answer_rung(stack: AirflowStack, run_id: str, rung: int, option: str, subject: str) -> dict:
    """The approver answers ``option`` to the sweep's plan of ``rung`` once it waits, checking that
    its request reads ``subject`` and that nothing of the rung trains while it waits."""
    task_id = f"sweep.plan_{rung}"
    ti = stack.wait_ti(SWEEP_DAG, run_id, task_id, ("awaiting_input", "failed", "success"), timeout=600)
    assert ti["state"] == "awaiting_input", stack.log(SWEEP_DAG, run_id, task_id, 1)[-3000:]
    request = stack.api("GET", _hitl_path(SWEEP_DAG, run_id, task_id))
    assert request["subject"] == subject
    assert "**Rung fingerprint**: `sha256:" in request["body"]
    assert ("t0 (lr=0.01); t1 (lr=0.03); t2 (lr=0.1)" if rung == 0 else "t2 (lr=0.1)") in request["body"]
    assert [u["id"] for u in request["assigned_users"]] == [APPROVER]
    assert stack.xcom(SWEEP_DAG, run_id, f"sweep.rung_{rung}", "return_value", map_index=0) is None
    _parked(stack, SWEEP_DAG, run_id, task_id)
    answer = {"chosen_options": [option], "params_input": {}}
    return stack.api("PATCH", _hitl_path(SWEEP_DAG, run_id, task_id), answer, token=stack.token_of(APPROVER))


# 3 trials x (1 CPU x 0.04 + 1 GB x 0.01) for an hour (unit_duration 3600 s x 1 epoch)
RUNG_0 = "Approve rung 0 of sweep 'sweep': 3 trials to 1, about 0.1500 EUR more, past max_cost 0.01 EUR?"
# the best trial's app for 3 epochs (what its one-epoch segment recorded it spent is far less)
RUNG_1 = "Approve rung 1 of sweep 'sweep': 1 trials to 3, about 0.1500 EUR more, past max_cost 0.01 EUR?"


def test_a_sweep_over_its_budget_asks_before_each_rung_and_trains_only_what_is_approved(stack):
    run_id = stack.trigger(SWEEP_DAG)
    _answer_rung(stack, run_id, 0, "Approve", RUNG_0)
    _answer_rung(stack, run_id, 1, "Reject", RUNG_1)
    assert stack.wait_run(SWEEP_DAG, run_id, timeout=900) == "success"
    segments = stack.xcom(SWEEP_DAG, run_id, "sweep.plan_0", "return_value")
    assert [s["trial"]["id"] for s in segments] == ["t0", "t1", "t2"]
    (approval,) = stack.xcom(SWEEP_DAG, run_id, "sweep.plan_0", "torchx_sweep")["approvals"]
    assert approval["approved_by"]["name"] == APPROVER and approval["requested_by"] == "admin"
    assert (approval["rung"], approval["estimate"], approval["currency"]) == (0, 0.15, "EUR")
    assert f"{APPROVER} approved rung 0 past max_cost" in stack.log(SWEEP_DAG, run_id, "sweep.plan_0", 1)
    for i in range(3):
        result = stack.xcom(SWEEP_DAG, run_id, "sweep.rung_0", "return_value", map_index=i)
        assert result["state"] == "SUCCEEDED" and result["cost"]["estimate"]["duration_s"] == 3600
    # rung 1 was rejected: the sweep stops and promotes the best trial after one epoch
    assert stack.xcom(SWEEP_DAG, run_id, "sweep.plan_1", "return_value") == []
    stopped = stack.xcom(SWEEP_DAG, run_id, "sweep.plan_1", "torchx_sweep")["stopped"]
    assert "rung 1 (1 trials to 3) would cost about 0.1500 more, past max_cost=0.01" in stopped
    assert f"the approval was refused: {APPROVER} (id {APPROVER}) rejected it at" in stopped
    promoted = stack.xcom(SWEEP_DAG, run_id, "sweep.promote", "return_value")
    assert promoted["path"].endswith("/r0/model.txt")

    rejected = stack.trigger(SWEEP_DAG)  # rejected before the first rung: nothing trains
    _answer_rung(stack, rejected, 0, "Reject", RUNG_0)
    assert stack.wait_run(SWEEP_DAG, rejected, timeout=600) == "success"
    assert stack.xcom(SWEEP_DAG, rejected, "sweep.plan_0", "return_value") == []
    stopped = stack.xcom(SWEEP_DAG, rejected, "sweep.plan_0", "torchx_sweep")["stopped"]
    assert "rung 0 (3 trials to 1) would cost about 0.1500 more, past max_cost=0.01" in stopped
    assert stack.ti(SWEEP_DAG, rejected, "sweep.promote")["state"] == "skipped"
    assert "nothing is promoted" in stack.log(SWEEP_DAG, rejected, "sweep.promote", 1)
