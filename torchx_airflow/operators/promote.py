"""``TorchXPromoteOperator``: promote the best run of a TorchX task (every map index) to an Asset.

::

    MODEL = Asset("model://torchx_pipeline/best")
    train = TorchXOperator.partial(task_id="train", ...).expand(component_args=grid)
    promote = TorchXPromoteOperator(
        task_id="promote", runs_of="train", objective="loss", mode="min", artifact="model", asset=MODEL
    )
    train >> promote

The operator reads the results the upstream task returned in this DAG run, picks the best run by
the objective (the rules are in :mod:`torchx_airflow.lineage.promotion`: failed runs left out, a
missing objective an error, ties to the earliest map index), writes on that run's tracker entry that
it was promoted and by which DAG run (metadata ``airflow_promoted``), and emits one event on
``asset`` whose extra carries ``app_handle``, ``artifact``, ``path``, ``objective``, ``mode``,
``value``, ``runs_of``, ``map_index`` and ``promoted_by``. Importing this module imports no TorchX
scheduler, MLflow or s3fs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, BaseOperator

from torchx_airflow.exceptions import TorchXInputError
from torchx_airflow.hooks import TORCHX_DEFAULT_CONN_ID
from torchx_airflow.lineage.keys import XCOM_SUBMITTED_APP
from torchx_airflow.lineage.promotion import (
    PromoteSpec,
    candidates_from_results,
    check_promote_args,
    pick_best,
    promotion_extra,
    record_promotion,
    with_roots,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from torchx_airflow.lineage.stores import TrackerSet

__all__ = ["TorchXPromoteOperator"]


def _upstream_setting(upstream: Any, name: str) -> Any:
    """A constructor argument of the upstream operator (of ``partial`` for a mapped one), as
    declared: a template is not rendered yet."""
    if getattr(upstream, "is_mapped", False):
        return upstream.partial_kwargs.get(name)
    return getattr(upstream, name, None)


def _recorded_trackers(submitted: dict[int, Any]) -> list[str] | None:
    """The tracker connection ids the upstream's tries used, as they resolved them (templates
    rendered), from its ``torchx_app`` XComs: the first map index's that has them; None without."""
    for _, record in sorted(submitted.items()):
        conn_ids = record.get("tracker_conn_ids") if isinstance(record, dict) else None
        if isinstance(conn_ids, list) and all(isinstance(c, str) for c in conn_ids):
            return conn_ids
    return None


class TorchXPromoteOperator(BaseOperator):
    """Promote the best run of the TorchX task ``runs_of`` in this DAG run to ``asset``.

    :param runs_of: the task id of the TorchX task (mapped or not) whose runs are compared.
    :param objective: the final metric to compare (numeric metadata of the run counts as one).
    :param mode: ``"min"`` (a loss) or ``"max"`` (an accuracy): which value is best.
    :param artifact: the artifact of the best run the asset event points at (its ``path``).
    :param asset: the ``Asset`` that receives the event; added to the task's ``outlets``.
    :param artifact_roots: directories or URL prefixes (``"s3://models/"``) the artifact may lie under
        besides the directories ``runs_of``'s own arguments name; a path anywhere else is refused.
    :param tracker_conn_ids: where the promotion is recorded; default: ``runs_of``'s own trackers, as
        its runs resolved them (templates rendered; their XCom ``torchx_app``).
    :param torchx_conn_id: the torchx connection whose trackers are used when neither task names any.

    The task runs once the upstream task is done (``trigger_rule="all_done"``): runs that failed
    are left out, and the task fails only when no run SUCCEEDED. Pass ``trigger_rule="all_success"``
    to promote only when every run succeeded. ``runs_of``, ``objective``, ``mode`` and ``artifact``
    are template fields; keep them literal for the comparison view's manual promotion to use them.
    """

    template_fields: Sequence[str] = ("runs_of", "objective", "mode", "artifact")
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        runs_of: str,
        objective: str,
        mode: str,
        artifact: str,
        asset: Asset,
        artifact_roots: Sequence[str] = (),
        tracker_conn_ids: str | Sequence[str] | None = None,
        torchx_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        check_promote_args(self.task_id, runs_of, objective, mode, artifact)
        if not isinstance(asset, Asset):
            raise TorchXInputError(
                f"TorchXPromoteOperator {self.task_id!r}: asset={asset!r} is not an Asset. Pass the asset "
                'that stands for the promoted model, e.g. asset=Asset("model://my_pipeline/best").'
            )
        self.runs_of = runs_of
        self.objective = objective
        self.mode = mode
        self.artifact = artifact
        self.asset = asset
        if isinstance(artifact_roots, str) or not all(isinstance(r, str) and r for r in artifact_roots):
            raise TorchXInputError(
                f"TorchXPromoteOperator {self.task_id!r}: artifact_roots={artifact_roots!r} must be a list "
                'of directories or URL prefixes, e.g. artifact_roots=["s3://models/"].'
            )
        self.artifact_roots = tuple(artifact_roots)
        self.tracker_conn_ids = tracker_conn_ids
        self.torchx_conn_id = torchx_conn_id
        if asset not in self.outlets:
            self.outlets = [*self.outlets, asset]

    def execute(self, context: Context) -> dict[str, Any]:
        """Pick, record and publish the best run; the return value is the asset event's extra."""
        where = f"Task {self.task_id!r}"
        check_promote_args(self.task_id, self.runs_of, self.objective, self.mode, self.artifact)
        spec = PromoteSpec(
            self.runs_of, self.objective, self.mode, self.artifact, self.asset.uri, self.artifact_roots
        )
        upstream = self._upstream(where)
        results = self._results(context, upstream)
        submitted = self._results(context, upstream, key=XCOM_SUBMITTED_APP)
        trackers = self._trackers(context, upstream, submitted, where)
        candidates = with_roots(candidates_from_results(results), submitted)
        best = pick_best(candidates, spec, where)
        dag_run = context["dag_run"]
        extra = promotion_extra(best, spec, f"dag_run {dag_run.dag_id}/{dag_run.run_id}", where)
        record_promotion(trackers.stores if trackers else [], extra, spec.asset_uri)
        context["outlet_events"][self.asset].extra.update(extra)
        self.log.info(
            "Promoted %s (map index %s of %r, %s=%s, %s) to %s: %s",
            best.app_handle,
            best.map_index,
            self.runs_of,
            self.objective,
            extra["value"],
            self.mode,
            self.asset.uri,
            extra["path"],
        )
        return extra

    def _upstream(self, where: str) -> Any:
        dag = self.get_dag()
        if dag is None or not dag.has_task(self.runs_of):
            raise TorchXInputError(
                f"{where}: runs_of={self.runs_of!r} is not a task of this DAG. Name the TorchX task whose "
                "runs are compared (its task_id), and put it upstream of this task."
            )
        return dag.get_task(self.runs_of)

    def _results(self, context: Context, upstream: Any, key: str = "return_value") -> dict[int, Any]:
        """The upstream's XComs ``key`` (its returned results) of this DAG run, by map index (None
        where none was pushed)."""
        ti = context["ti"]
        if not getattr(upstream, "is_mapped", False):
            return {-1: ti.xcom_pull(task_ids=self.runs_of, map_indexes=-1, key=key)}
        count = ti.get_ti_count(dag_id=ti.dag_id, task_ids=[self.runs_of], run_ids=[ti.run_id])
        indexes = list(range(count))
        values = ti.xcom_pull(task_ids=self.runs_of, map_indexes=indexes, key=key) if indexes else []
        return dict(zip(indexes, values, strict=True))

    def _trackers(self, context: Context, upstream: Any, submitted: dict[int, Any], where: str) -> TrackerSet:
        """This task's ``tracker_conn_ids``; else those the upstream's runs used (their XCom
        ``torchx_app``); else the upstream's settings rendered in this DAG run's context (an
        upstream that recorded none: its runs were cache hits, or it predates that record)."""
        from torchx_airflow.tracking import task_trackers

        if self.tracker_conn_ids is not None:
            return task_trackers(self.tracker_conn_ids, self._torchx_conn_id(context, upstream), where)
        recorded = _recorded_trackers(submitted)
        if recorded is not None:
            return task_trackers(recorded, TORCHX_DEFAULT_CONN_ID, where)
        # ``tracker_conn_ids="{{ params.trackers }}"`` must not reach the parser as that text
        conn_ids = self.render_template(_upstream_setting(upstream, "tracker_conn_ids"), context)
        return task_trackers(conn_ids, self._torchx_conn_id(context, upstream), where)

    def _torchx_conn_id(self, context: Context, upstream: Any) -> str:
        declared = self.torchx_conn_id or _upstream_setting(upstream, "torchx_conn_id")
        rendered = self.render_template(declared, context) if declared else None
        return str(rendered or TORCHX_DEFAULT_CONN_ID)
