"""One segment of a sweep's trial: a ``TorchXOperator`` whose templates see ``{{ trial.<name> }}``
and whose job gets ``TORCHX_AIRFLOW_TRIAL`` (and ``TORCHX_AIRFLOW_RESUME_FROM`` when it continues).

The trial comes from the rung's plan (``sweeps.tasks.TorchXSweepPlanOperator``) through
``expand_kwargs``: every segment is an ordinary run of the provider (lineage, usage and cost,
caching, resubmission, logs, links); what it adds is a policy's ``prepare``, so the cache key and
any cost estimate are taken from the app with the trial in it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchx_airflow.lineage.keys import RESULT_TRIAL, XCOM_SEGMENT_SPENT
from torchx_airflow.operators.torchx import TorchXOperator
from torchx_airflow.run.points import RunPolicy

if TYPE_CHECKING:
    import jinja2
    from airflow.sdk import Context
    from torchx.specs import AppDef

    from torchx_airflow.run.execution import TaskRun

TRIAL_ENV = "TORCHX_AIRFLOW_TRIAL"
#: what of a trial the job sees in TORCHX_AIRFLOW_TRIAL (what it needs to train and resume)
TRIAL_FIELDS = ("id", "index", "params", "budget", "rung", "previous_budget")
#: a Hyperband segment's bracket: in its record only when it has one (a successive-halving segment's
#: TORCHX_AIRFLOW_TRIAL, and so its cache key, stays as it was)
BRACKET = "bracket"


def trial_record(trial: Mapping[str, Any]) -> dict[str, Any]:
    """What of a trial the job sees and its result records: ``TRIAL_FIELDS``, and ``bracket`` when set."""
    record = {k: trial.get(k) for k in TRIAL_FIELDS}
    if trial.get(BRACKET) is not None:
        record[BRACKET] = trial[BRACKET]
    return record


def trial_view(trial: Mapping[str, Any]) -> dict[str, Any]:
    """What ``{{ trial }}`` offers: each parameter by name, and ``id``, ``budget``, ``rung``,
    ``previous_budget`` (what the segment resumes from, 0 on the first rung), ``params``, ``bracket``
    (Hyperband's ``s``; None otherwise)."""
    params = trial.get("params") or {}
    return {**params, **{k: trial.get(k) for k in (*TRIAL_FIELDS, BRACKET, "resume_from", "source")}}


class SweepTrial(RunPolicy):
    """Puts the segment's trial in every role's env: ``TORCHX_AIRFLOW_TRIAL`` (JSON of
    ``trial_record``) and, when it continues an earlier segment, ``TORCHX_AIRFLOW_RESUME_FROM``."""

    name = "sweep_trial"

    def __init__(self, trial: Mapping[str, Any]) -> None:
        self.trial = dict(trial)  # one segment's task: the mapped task's instance is built per trial

    def prepare(self, run: TaskRun, *, app: AppDef, **kwargs: Any) -> AppDef | None:
        from torchx_airflow.policies.resubmission import RESUME_FROM_ENV

        trial = self.trial
        value = json.dumps(trial_record(trial), sort_keys=True)
        for role in app.roles:
            role.env[TRIAL_ENV] = value
            if trial.get("resume_from"):
                role.env[RESUME_FROM_ENV] = str(trial["resume_from"])
        return app

    def finished(
        self, run: TaskRun, *, app_handle: str, result: dict[str, Any], **kwargs: Any
    ) -> dict[str, Any]:
        return {**result, RESULT_TRIAL: trial_record(self.trial)}

    def closed(
        self,
        run: TaskRun,
        *,
        result: dict[str, Any] | None = None,
        error: BaseException | None = None,
        **kwargs: Any,
    ) -> None:
        """A segment whose task fails pushes no result: what its job cost (the cost policy's record
        when it saw the job end) is pushed for the sweep's spending (``XCOM_SEGMENT_SPENT``)."""
        cost = run.result_fields.get("cost")
        if result is None and cost is not None:
            run.context["ti"].xcom_push(key=XCOM_SEGMENT_SPENT, value={"cost": cost})


class TorchXSweepSegmentOperator(TorchXOperator):
    """A ``TorchXOperator`` that runs one segment of a sweep's trial (``trial``: the plan's record)."""

    ui_color = "#fde8d7"

    def __init__(
        self, *, trial: Mapping[str, Any], policies: Sequence[RunPolicy] = (), **kwargs: Any
    ) -> None:
        super().__init__(policies=[*policies, SweepTrial(trial)], **kwargs)
        self.trial = dict(trial)

    def _do_render_template_fields(
        self,
        parent: Any,
        template_fields: Any,
        context: Context,
        jinja_env: jinja2.Environment,
        seen_oids: set[int],
    ) -> None:
        context["trial"] = trial_view(self.trial)  # type: ignore[typeddict-unknown-key]
        super()._do_render_template_fields(parent, template_fields, context, jinja_env, seen_oids)
