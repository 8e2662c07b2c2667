"""``@task.torchx``: a TaskFlow function returns the TorchX app; the task runs it as ``TorchXOperator``.

The function runs in the worker when the task starts. It returns either a ``torchx.specs.AppDef`` or
a ``(component, args)`` pair, exactly as on the ``torchx run`` command line::

    from airflow.sdk import task

    @task.torchx(poll_interval=1)
    def train(lr: float):
        return ("utils.python", ["--script", "jobs/train.py", "--", "--lr", str(lr)])

    train.expand(lr=[0.1, 0.5])

Everything after that is ``TorchXOperator``'s: connection, trackers, scheduler, cfg, env,
deferrable and durable waits, lineage, the XCom result, failure and cancel behaviour. Importing
this module imports no TorchX scheduler (DAG parse time stays cheap).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk.bases.decorator import DecoratedOperator, determine_kwargs, task_decorator_factory
from airflow.sdk.definitions.context import context_merge

from torchx_airflow.exceptions import TorchXComponentError
from torchx_airflow.operators.torchx import TorchXOperator

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.bases.decorator import TaskDecorator
    from torchx.specs import AppDef

# What the function returns; set by the function at run time, so refused as decorator arguments.
_APP_FIELDS = ("component", "component_args", "app")
# What ``component`` holds until the function returns the app (Airflow's own sentinel is private).
SET_DURING_EXECUTION = "<set by the @task.torchx function when the task runs>"
_EXAMPLE = "('utils.python', ['--script', 'train.py', '--', '--lr', '0.1'])"


def app_from_return(value: object, task_id: str) -> tuple[str | None, str | list[Any] | None, AppDef | None]:
    """``(component, component_args, app)`` for ``TorchXOperator`` from what a ``@task.torchx`` returned.

    Accepts a ``torchx.specs.AppDef``, or a pair ``(component, args)`` whose args are a list of
    strings or one string split like a shell would. Anything else raises ``TorchXComponentError``.
    """
    from torchx.specs import AppDef

    if isinstance(value, AppDef):
        return None, None, value
    if (
        isinstance(value, tuple | list)
        and len(value) == 2
        and isinstance(value[0], str)
        and value[0].strip()
        and isinstance(value[1], str | list | tuple)
    ):
        return value[0].strip(), value[1] if isinstance(value[1], str) else list(value[1]), None
    raise TorchXComponentError(
        f"The @task.torchx function of task {task_id!r} returned {value!r}. Return a torchx.specs.AppDef, "
        f"or a (component, args) pair as on the torchx command line, e.g. {_EXAMPLE}."
    )


class _TorchXDecoratedOperator(DecoratedOperator, TorchXOperator):
    """``TorchXOperator`` whose app is what the decorated function returns.

    The function is called when the task starts, and again when a deferred task resumes (to know the
    app's roles for its logs): keep it a cheap, side-effect-free description of the app. What it
    returns is templated like ``TorchXOperator``'s ``component_args`` and ``app``.

    :param python_callable: the decorated function.
    :param op_args: positional arguments of the function (templated).
    :param op_kwargs: keyword arguments of the function (templated).

    Every other parameter is ``TorchXOperator``'s, except ``component``, ``component_args`` and
    ``app``: the function returns those.
    """

    template_fields: Sequence[str] = (*DecoratedOperator.template_fields, *TorchXOperator.template_fields)
    template_fields_renderers: ClassVar[dict[str, str]] = {
        **DecoratedOperator.template_fields_renderers,
        **TorchXOperator.template_fields_renderers,
    }
    custom_operator_name = "@task.torchx"
    # The rendered fields shown in the UI are the app the function returned, not the placeholder.
    overwrite_rtif_after_execution = True

    def __init__(
        self,
        *,
        python_callable: Callable,
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        given = [name for name in _APP_FIELDS if name in kwargs]
        if given:
            raise TorchXComponentError(
                f"@task.torchx task {kwargs.get('task_id')!r} got {given!r}: the decorated function "
                f"returns the app. Remove {given!r} and return an AppDef or a (component, args) pair, "
                f"e.g. {_EXAMPLE}."
            )
        super().__init__(
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            component=SET_DURING_EXECUTION,
            **kwargs,
        )

    def execute(self, context: Context, event: dict[str, Any] | None = None, **parked: Any) -> Any:
        """``event``: an approver's answer resuming the task, ``parked``: what it parked with
        (``policies.cost.approval``); they reach the run here, as ``DecoratedOperator.execute`` passes
        the context alone."""
        self._start(context, {**parked, "event": event} if event or parked else None)
        return super().execute(context)

    def _setup(self, context: Context) -> None:
        """Call the function and make its app this task's ``component``/``component_args`` or ``app``
        (first in every execution, inside it)."""
        self._resolve_app(context)

    def _resolve_app(self, context: Context) -> None:
        """Call the function and make its app this task's ``component``/``component_args`` or ``app``."""
        context_merge(context, self.op_kwargs)
        kwargs = determine_kwargs(self.python_callable, self.op_args, context)
        returned = self.python_callable(*self.op_args, **kwargs)
        self.component, self.component_args, self.app = app_from_return(returned, self.task_id)
        self.render_template_fields(context)


def torchx_task(python_callable: Callable | None = None, **kwargs: Any) -> TaskDecorator:
    """``@task.torchx``: wrap a function returning a TorchX app into a ``TorchXOperator`` task.

    Keyword arguments are ``TorchXOperator``'s (``torchx_conn_id``, ``tracker_conn_ids``,
    ``scheduler``, ``cfg``, ``env``, ``deferrable``, ``durable``, ``poll_interval``, ...) and
    ``BaseOperator``'s. The task's XCom is the operator's result dict, so ``multiple_outputs``
    defaults to False whatever the function's return annotation.

    :param python_callable: the function to decorate.
    """
    kwargs.setdefault("multiple_outputs", False)
    return task_decorator_factory(
        python_callable=python_callable,
        decorated_operator_class=_TorchXDecoratedOperator,
        **kwargs,
    )
