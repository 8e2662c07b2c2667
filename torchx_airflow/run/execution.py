"""``TaskRun``: what every step of one task execution needs, fetched once and carried together.

The operator makes one per execution (``execute``, or ``execute_complete`` after a deferral) and
hands it to the lifecycle and the policies. It is also what a policy may read and write: the
attributes listed under "For policies" below are the documented surface (``docs/policies.md``);
anything else on it is the mechanism's and may change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from torchx_airflow_tracker.compat import cached_property

from torchx_airflow.run.attempts import Attempts
from torchx_airflow.run.state import task_state_store

if TYPE_CHECKING:
    from airflow.sdk import Asset, AssetAlias, Context
    from torchx.specs import AppDef

    from torchx_airflow.hooks.torchx import TorchXHook
    from torchx_airflow.lineage.stores import TrackerSet


def task_deadline(execution_timeout: Any, ti: Any) -> float | None:
    """A task's ``execution_timeout`` as an epoch deadline, counted from the task's start."""
    if execution_timeout is None:
        return None
    start = getattr(ti, "start_date", None)
    return (start.timestamp() if start is not None else time.time()) + execution_timeout.total_seconds()


#: ``TaskRun.submission`` values.
NEW, RESUBMITTED, REATTACHED = "new", "resubmitted", "reattached"


class TaskRun:
    """One execution of a TorchX task.

    For policies (read; ``result_fields``, ``store``, ``memo()`` and ``task_resubmits`` also written):

    - ``task_id``, ``context`` (the task's Airflow context), ``ti`` (its task instance), ``log`` (the
      task log), ``where`` (``"Task 'train'"``, for messages);
    - ``app``: the app submitted (or waited on, after a reattach): the prepared app once ``prepare``
      ran; ``built_app``: the app as the task built it, before any policy prepared it;
    - ``submission``: how the current job came to be (``NEW``, ``RESUBMITTED``, ``REATTACHED``);
    - ``attempts``: the chain of jobs of this task (``run.attempts.Attempts``, read only);
    - ``hook`` (its ``scheduler``, ``settings``: the connection's), ``trackers`` (the task's
      tracker stores), ``tracker_timeout`` (seconds a tracker step may take);
    - ``output_roots``: where the task's outputs may lie (paths read back from a store count only
      under them);
    - ``store``: the task's ``task_state_store`` (None with ``durable=False``): keep what must
      outlive a try or a deferral there, under keys of your own;
    - ``memo(policy)``: a dict of the policy's own for this execution;
    - ``result_fields``: fields added to the task's result (and to a failed app's error);
    - ``render(value)``: ``value`` rendered as a Jinja template with the task's context;
    - ``deadline`` (the task's ``execution_timeout`` as an epoch, or None), ``wait_for_completion``,
      ``waits_in_triggerer``, ``resumed_with`` (what Airflow resumed the execution with);
    - ``task_resubmits``: set True in ``prepare`` by a policy that submits a job again when the
      infrastructure ends it: the scheduler is then asked not to requeue it on its own.

    :param task_id: the task's id, for messages.
    :param context: the task's Airflow context.
    :param hook: the task's hook (scheduler, cfg, connection settings).
    :param trackers: returns the task's trackers (opened on first use).
    :param build_app: returns the task's app (built on first use).
    :param app_parts: returns what the app is built from (``TorchXDryRunOperator.app_parts``).
    :param durable: whether the task keeps state across tries (``run.state``).
    :param tracker_timeout: seconds each tracker step gets.
    :param wait_for_completion: whether the task waits for its app.
    :param waits_in_triggerer: returns where the wait happens (``run.waiting.waits_in_triggerer``).
    :param task_log: the task's logger.
    :param execution_timeout: the task's ``execution_timeout`` (``deadline`` counts from its start).
    :param artifact_assets: artifact name -> asset, for the asset events of a SUCCEEDED app.
    :param render: renders a template with the task's context (the operator's ``render_template``).
    """

    def __init__(
        self,
        *,
        task_id: str,
        context: Context,
        hook: TorchXHook,
        trackers: Callable[[], TrackerSet],
        build_app: Callable[[], AppDef],
        app_parts: Callable[[], Mapping[str, Any]],
        durable: bool,
        tracker_timeout: float,
        wait_for_completion: bool,
        waits_in_triggerer: Callable[[], bool],
        task_log: Any,
        execution_timeout: Any = None,
        artifact_assets: Mapping[str, Asset | AssetAlias] | None = None,
        render: Callable[[Any, Context], Any] | None = None,
    ) -> None:
        self.task_id = task_id
        self.context = context
        self.hook = hook
        self._trackers = trackers
        self._build_app = build_app
        self._app_parts = app_parts
        self.durable = durable
        self.tracker_timeout = tracker_timeout
        self.wait_for_completion = wait_for_completion
        self._waits_in_triggerer = waits_in_triggerer
        self.log = task_log
        self.artifact_assets: dict[str, Asset | AssetAlias] = dict(artifact_assets or {})
        self._render = render
        #: the epoch by which the task must end (its ``execution_timeout``), or None
        self.deadline = task_deadline(execution_timeout, context["ti"])
        #: how the task's current job came to be (``NEW``, ``RESUBMITTED``, ``REATTACHED``)
        self.submission = NEW
        #: what Airflow resumed this execution with: ``event`` (an approver's answer) and what the
        #: task parked with (``policies.cost.approval``)
        self.resumed_with: dict[str, Any] = {}
        #: fields policies add to the result when the job ends (``usage``, ``cost``), and the
        #: lifecycle's ``attempts``: a failed app's error and its OpenLineage facets carry them too
        self.result_fields: dict[str, Any] = {}
        #: a policy resubmits jobs the infrastructure ends (so the scheduler must not requeue them)
        self.task_resubmits = False
        self._app: AppDef | None = None
        self._memos: dict[int, dict[str, Any]] = {}

    @property
    def where(self) -> str:
        return f"Task {self.task_id!r}"

    @property
    def ti(self) -> Any:
        return self.context["ti"]

    @cached_property
    def app_parts(self) -> dict[str, Any]:
        """What the app is built from, as the execution renders it (read when first needed: an
        ``@task.torchx`` function has returned them by then)."""
        return dict(self._app_parts())

    @cached_property
    def waits_in_triggerer(self) -> bool:
        """Whether the wait is deferred to the triggerer (asked of the connection when first needed)."""
        return self._waits_in_triggerer()

    @cached_property
    def store(self) -> Any:
        """The task's ``task_state_store``; None when the task keeps nothing."""
        return task_state_store(self.context, self.durable)

    @cached_property
    def attempts(self) -> Attempts:
        """The chain of jobs of this task, kept in ``store`` (``run.attempts``)."""
        return Attempts(self.store)

    @cached_property
    def trackers(self) -> TrackerSet:
        return self._trackers()

    @cached_property
    def built_app(self) -> AppDef:
        """The app as the task built it (its component or ``AppDef``, ``env``, the tracker env),
        before any policy prepared it."""
        return self._build_app()

    @property
    def app(self) -> AppDef:
        """The app of this execution: the prepared one (the built one until the policies prepared it),
        replaced by each resubmitted attempt's."""
        return self._app if self._app is not None else self.built_app

    @property
    def app_if_built(self) -> AppDef | None:
        """``app`` if this execution built it already, else None (nothing is built for asking)."""
        return self._app if self._app is not None else self.__dict__.get("built_app")

    @property
    def output_roots(self) -> tuple[str, ...]:
        """Where this task's outputs may lie (``apps.task_output_roots``): the deployment's
        ``output_roots``, then the directories its app's arguments name as outputs."""
        from torchx_airflow.apps import task_output_roots

        return task_output_roots(self.app, self.hook.settings)

    def replace_app(self, app: AppDef) -> None:
        """``app`` becomes the run's app (prepared; a resubmitted attempt's)."""
        self._app = app

    def memo(self, policy: object) -> dict[str, Any]:
        """A dict of ``policy``'s own for this execution (a policy object serves every execution of
        its task, so what belongs to one run is kept here)."""
        return self._memos.setdefault(id(policy), {})

    def render(self, value: Any) -> Any:
        """``value`` (a string, or a list or dict of them) rendered as a Jinja template with the
        task's context, as a templated field would be: ``run.render("{{ params.team }}")``."""
        if self._render is None:
            return value
        return self._render(value, self.context)
