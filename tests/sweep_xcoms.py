"""A sweep's task instances and XComs as its tasks leave them, without running jobs: each rung's plan is
the real ``TorchXSweepPlanOperator`` (XCom stood in for), each segment's result is what the segment's
worker records (``state``, ``metrics``, ``sweep_trial``, ``cost``; a failed one's task pushes only what
its job cost), the promotion's result names the
best segment of the highest rung. For the sweep view's unit tests and its benchmark (bench/); the
integration test (tests/integration/test_sweep_dags.py) checks the view on a real sweep."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from torchx_airflow.lineage.keys import XCOM_RUN_ID, XCOM_SEGMENT_SPENT, XCOM_SUBMITTED_APP
from torchx_airflow.sweeps.segment import TRIAL_FIELDS
from torchx_airflow.sweeps.tasks import RESULT_TRIAL, TorchXSweepPlanOperator

Loss = Callable[[Mapping[str, Any], float], float | None]


class _TI:
    """Airflow's task instance as a plan uses it: XCom pull and push over one dict."""

    def __init__(self, xcoms: dict[tuple[str, str, int], Any], task_id: str) -> None:
        self.xcoms, self.task_id, self.id = xcoms, task_id, f"ti-{task_id}"

    def xcom_pull(self, task_ids: str, key: str = "return_value", map_indexes: Any = None) -> Any:
        if isinstance(map_indexes, list):
            return [self.xcoms.get((task_ids, key, i)) for i in map_indexes]
        return self.xcoms.get((task_ids, key, -1))

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[(self.task_id, key, -1)] = value


def simulate_sweep(
    space: Sequence[Mapping[str, Any]],
    budgets: Sequence[float],
    loss: Loss,
    *,
    sweep_id: str = "sweep",
    objective: str = "val_loss",
    mode: str = "min",
    reduction_factor: int = 3,
    max_cost: float | None = None,
    unit_duration: float | None = None,
    app_parts: Mapping[str, Any] | None = None,
    cost_per_unit: float = 1.0,
    failed: Collection[tuple[int, int]] = (),
    promote: bool = True,
    promote_task_id: str | None = None,
) -> tuple[list[SimpleNamespace], dict[tuple[str, int], dict[str, Any]]]:
    """The sweep's segments' task instances (``task_id``, ``map_index``, ``state``) and its XComs
    ``{(task id, map index): {key: value}}``; ``loss(params, budget)`` is what a segment records
    (None: nothing), ``failed`` the (rung, trial index) pairs whose segment fails;
    ``promote_task_id``: where the promotion is (a Hyperband bracket's: its sweep's); ``max_cost``
    needs ``unit_duration``, ``app_parts`` and a price table in the torchx connection, as a sweep does."""
    plan_ids = [f"{sweep_id}.plan_{k}" for k in range(len(budgets))]
    rung_ids = [f"{sweep_id}.rung_{k}" for k in range(len(budgets))]
    flat: dict[tuple[str, str, int], Any] = {}
    instances: list[SimpleNamespace] = []
    best: tuple[str, int, float] | None = None
    for k in range(len(budgets)):
        plan = TorchXSweepPlanOperator(
            task_id=plan_ids[k],
            rung=k,
            budgets=budgets,
            trials=space,
            objective=objective,
            mode=mode,
            reduction_factor=reduction_factor,
            segment_task_ids=rung_ids,
            plan_task_ids=plan_ids,
            max_cost=max_cost,
            unit_duration=unit_duration,
            app_parts=app_parts,
        )
        context = {"ti": _TI(flat, plan_ids[k]), "dag_run": SimpleNamespace(triggering_user_name=None)}
        segments = plan.execute(context)  # type: ignore[arg-type]
        flat[(plan_ids[k], "return_value", -1)] = segments
        if not segments:  # a mapped task over nothing: one skipped instance, no XCom
            instances.append(SimpleNamespace(task_id=rung_ids[k], map_index=-1, state="skipped"))
        for i, segment in enumerate(segments):
            trial = segment["trial"]
            ok = (k, trial["index"]) not in failed
            value = loss(trial["params"], float(trial["budget"])) if ok else None
            trained = float(trial["budget"]) - float(trial["previous_budget"] or 0)
            handle = f"local_cwd://torchx/{trial['id']}-r{k}"
            cost = {"actual": {"total": cost_per_unit * trained, "currency": "USD"}}
            if ok:
                flat[(rung_ids[k], "return_value", i)] = {
                    "app_handle": handle,
                    "state": "SUCCEEDED",
                    "metrics": {objective: value} if value is not None else {},
                    RESULT_TRIAL: {f: trial.get(f) for f in TRIAL_FIELDS},
                    "cost": cost,
                    "artifacts": {"checkpoint": {"path": f"/out/{trial['id']}/r{k}/ckpt"}},
                }
            else:  # a failed task pushes no result, only what its job cost
                flat[(rung_ids[k], XCOM_SEGMENT_SPENT, i)] = {"cost": cost}
            flat[(rung_ids[k], XCOM_RUN_ID, i)] = handle
            flat[(rung_ids[k], XCOM_SUBMITTED_APP, i)] = {"output_roots": ["/out"]}
            instances.append(
                SimpleNamespace(task_id=rung_ids[k], map_index=i, state="success" if ok else "failed")
            )
            if value is not None and (
                best is None or best[0] != rung_ids[k] or _better(value, best[2], mode)
            ):
                best = (rung_ids[k], i, value)
    if promote and best is not None:
        flat[(promote_task_id or f"{sweep_id}.promote", "return_value", -1)] = {
            "runs_of": best[0],
            "map_index": best[1],
            "objective": objective,
            "mode": mode,
            "value": best[2],
            "path": f"/out/{best[0]}/{best[1]}/model",
        }
    xcoms: dict[tuple[str, int], dict[str, Any]] = {}
    for (task_id, key, map_index), value in flat.items():
        xcoms.setdefault((task_id, map_index), {})[key] = value
    return instances, xcoms


def _better(value: float, than: float, mode: str) -> bool:
    return value < than if mode == "min" else value > than


def store_sweep(
    session: Any,
    dag_id: str,
    run_id: str,
    instances: Sequence[Any],
    xcoms: Mapping[tuple[str, int], Mapping[str, Any]],
    plan_states: Mapping[str, str] | None = None,
) -> None:
    """Write a sweep's task instances and XComs (``simulate_sweep``'s) into Airflow's tables, as its
    DAG run leaves them: one DAG run, the segments' task instances, a task instance per plan and
    promotion (``plan_states``: task id -> state, else success) and every XCom as Airflow stores it."""
    import uuid

    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.sdk import timezone
    from sqlalchemy import func, insert, select

    dag_run = (session.scalar(select(func.max(DagRun.id))) or 0) + 1
    session.execute(
        insert(DagRun.__table__).values(
            id=dag_run,
            dag_id=dag_id,
            run_id=run_id,
            run_type="manual",
            run_after=timezone.utcnow(),
            log_template_id=None,
        )
    )
    tasks = {(ti.task_id, ti.map_index): ti.state for ti in instances}
    for task_id, map_index in xcoms:
        if (task_id, map_index) not in tasks and map_index == -1:
            tasks[(task_id, map_index)] = "success"
    tasks.update({(task_id, -1): state for task_id, state in (plan_states or {}).items()})
    for (task_id, map_index), state in tasks.items():
        session.execute(
            insert(TaskInstance.__table__).values(
                id=uuid.uuid4(), dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index,
                state=state, pool="default_pool",
            )
        )  # fmt: skip
    for (task_id, map_index), pushed in xcoms.items():
        for key, value in pushed.items():
            session.execute(
                insert(XComModel.__table__).values(
                    dag_run_id=dag_run, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index,
                    key=key, value=XComModel.serialize_value(value),
                )
            )  # fmt: skip
    session.commit()
