"""``TorchXDryRunOperator``: what would be submitted, exactly, without submitting it.

Also what every TorchX operator shares: its parameters and templating, the job env it adds (tracker
env, OpenLineage parent) to the app ``apps.build_task_app`` builds, and the dry run itself.
Importing this module imports no TorchX scheduler, MLflow, s3fs or docker module, nor the hook, the
app builder or the OpenLineage helpers: a DAG file pays for them only when a task runs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from torchx_airflow_tracker.compat import cached_property

from torchx_airflow.exceptions import TorchXComponentError, TorchXConfigError
from torchx_airflow.hooks import TORCHX_DEFAULT_CONN_ID

if TYPE_CHECKING:
    import jinja2
    from airflow.sdk import Context
    from torchx.specs import AppDef

    from torchx_airflow.hooks.torchx import TorchXDryRun, TorchXHook
    from torchx_airflow.lineage.stores import TrackerSet


class TorchXDryRunOperator(BaseOperator):
    """Dry-run a TorchX app: log the scheduler's request and return a JSON-safe summary of it.

    Give either a component with its arguments, exactly as on the ``torchx run`` command line,
    or an ``AppDef``::

        TorchXDryRunOperator(
            task_id="plan",
            component="utils.python",
            component_args=["--script", "dags/jobs/train.py", "--", "--lr", "{{ params.lr }}"],
        )

    :param component: builtin (``utils.python``), ``path/file.py:function`` or entry-point component.
    :param component_args: the component's arguments (a list, or one string split like a shell would).
    :param app: a ``torchx.specs.AppDef`` instead of a component; its roles' args, env and
        entrypoint are templated.
    :param scheduler: overrides the connection's scheduler.
    :param cfg: scheduler run options merged over the connection's ``cfg``.
    :param env: environment variables added to every role.
    :param torchx_conn_id: the ``torchx`` connection (scheduler, cfg, trackers).
    :param tracker_conn_ids: tracker connections (``torchx_fsspec`` / ``mlflow``) for this task,
        overriding the ``trackers`` of the torchx connection; ``[]`` tracks nothing.
    :param app_name: the app's name, the start of its id (``slurm://torchx/<app_name>-<suffix>``).
        Default: the task id, made scheduler-safe (``train``, ``group-step``), so the jobs in the
        scheduler's queue and the runs in the trackers say which task launched them. Give ``""`` to
        keep the component's own name.
    """

    template_fields: Sequence[str] = (
        "component",
        "component_args",
        "app",
        "scheduler",
        "cfg",
        "env",
        "torchx_conn_id",
        "tracker_conn_ids",
        "app_name",
    )
    template_fields_renderers = {"cfg": "json", "env": "json", "component_args": "py"}
    ui_color = "#ee4c2c"

    def __init__(
        self,
        *,
        component: str | None = None,
        component_args: str | Sequence[Any] | None = None,
        app: AppDef | None = None,
        scheduler: str | None = None,
        cfg: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        torchx_conn_id: str = TORCHX_DEFAULT_CONN_ID,
        tracker_conn_ids: str | Sequence[str] | None = None,
        app_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (component is None) == (app is None):
            raise TorchXComponentError(
                f"Task {kwargs.get('task_id')!r}: give exactly one of 'component' (e.g. "
                "component='utils.python', component_args=['--script', 'train.py']) or 'app' (an AppDef); "
                f"got component={component!r} and app={'an AppDef' if app is not None else None}."
            )
        self.component = component
        self.component_args = component_args
        self.app = app
        self.scheduler = scheduler
        # template fields are kept as given: they are rendered first, normalised in execute()
        self.cfg = cfg
        self.env = env
        self.torchx_conn_id = torchx_conn_id
        self.tracker_conn_ids = tracker_conn_ids
        self.app_name = app_name

    @cached_property
    def hook(self) -> TorchXHook:
        """The hook for this task's connection, with the task's scheduler and cfg overrides."""
        from torchx_airflow.apps import mapping_param
        from torchx_airflow.hooks.torchx import TorchXHook

        cfg = mapping_param(self.task_id, "cfg", self.cfg)
        return TorchXHook(self.torchx_conn_id, scheduler=self.scheduler or None, cfg=cfg)

    @cached_property
    def trackers(self) -> TrackerSet:
        """This task's tracker backends (their secrets are masked from here on)."""
        from torchx_airflow.tracking import task_trackers

        return task_trackers(self.tracker_conn_ids, self.torchx_conn_id, f"Task {self.task_id!r}")

    def render_template_fields(self, context: Context, jinja_env: jinja2.Environment | None = None) -> None:
        # Rendering an AppDef mutates it: work on this task's own copy, never the DAG file's object.
        self.app = copy.deepcopy(self.app)
        super().render_template_fields(context, jinja_env)
        # Registered before Airflow stores the rendered fields: sensitive env values show as ***.
        from torchx_airflow.secrets import mask_sensitive_env

        for role in self.app.roles if self.app is not None else []:
            mask_sensitive_env(role.env)
        if isinstance(self.env, Mapping):
            mask_sensitive_env({str(k): str(v) for k, v in self.env.items()})

    def _render_nested_template_fields(
        self, value: Any, context: Context, jinja_env: jinja2.Environment, seen_oids: set[int]
    ) -> None:
        from torchx.specs import AppDef

        if not isinstance(value, AppDef):
            return super()._render_nested_template_fields(value, context, jinja_env, seen_oids)
        for role in value.roles:
            role.entrypoint = self.render_template(role.entrypoint, context, jinja_env, seen_oids)
            role.args = self.render_template(list(role.args), context, jinja_env, seen_oids)
            role.env = self.render_template(dict(role.env), context, jinja_env, seen_oids)

    def build_app(self) -> AppDef:
        """The ``AppDef`` to run: the component or a copy of ``app``, plus ``env`` and the tracker env."""
        from torchx_airflow.apps import mapping_param
        from torchx_airflow.lineage.openlineage import parent_run_env

        env = mapping_param(self.task_id, "env", self.env)
        tracker_env = self.trackers.job_env()
        clash = sorted(str(k) for k in env if str(k).startswith("TORCHX_TRACKER") and tracker_env)
        if clash:
            raise TorchXConfigError(
                f"Task {self.task_id!r} sets {clash} in 'env' and also has tracker connections "
                f"{self.trackers.conn_ids}. Configure trackers one way: remove them from 'env', or set "
                "tracker_conn_ids=[] to track only through 'env'."
            )
        return self.build_app_with({**tracker_env, **parent_run_env()})

    def app_parts(self) -> dict[str, Any]:
        """What the task's app is built from (``apps.build_task_app``'s arguments but the env added)."""
        return {
            "component": self.component,
            "component_args": self.component_args,
            "app": self.app,
            "env": self.env,
            "app_name": self.app_name,
        }

    def build_app_with(self, extra_env: dict[str, str]) -> AppDef:
        """The task's app with ``extra_env`` under its own ``env`` (``apps.build_task_app``)."""
        from torchx_airflow.apps import build_task_app

        return build_task_app(self.task_id, **self.app_parts(), extra_env=extra_env)

    def dryrun(self, app: AppDef, resubmits: bool = False) -> tuple[TorchXDryRun, dict[str, Any]]:
        """Dry-run ``app`` through the hook; log the request and return it with its summary.

        ``resubmits``: the task resubmits a job the infrastructure ends (``TorchXHook.dryrun``).
        """
        from torchx_airflow.apps import summarize_dryrun

        scheduler = self.hook.scheduler
        cfg = self.hook.resolve_cfg(scheduler, self.hook.cfg)
        secrets = self.trackers.secret_env_names()
        dryrun = self.hook.dryrun(app, scheduler, cfg, secret_env_names=secrets, resubmits=resubmits)
        summary = summarize_dryrun(dryrun.info, app, scheduler, cfg)
        summary["trackers"] = self.trackers.conn_ids
        self.log.info(
            "TorchX dry run of app %s on scheduler %s:\n%s",
            app.name,
            summary["scheduler"],
            summary["request"],
        )
        return dryrun, summary

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            return self.dryrun(self.build_app())[1]
        finally:
            self.hook.close()
