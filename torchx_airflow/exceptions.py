"""Errors raised by the TorchX provider.

Every error names the offending value and says how to fix it. Errors about bad input
(connection, scheduler, cfg, component, handle) derive from ``AirflowFailException`` as well:
retrying a task cannot fix its input, so Airflow fails it at once instead of burning retries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException


class TorchXError(AirflowException):
    """Base class of every error this provider raises."""


class TorchXInputError(TorchXError, AirflowFailException):
    """Bad input detected before anything was submitted; retrying would not help."""


class TorchXConnectionError(TorchXInputError):
    """A ``torchx`` connection is missing or its extra is malformed."""


class TorchXConfigError(TorchXInputError):
    """Unknown scheduler or a scheduler ``cfg`` that fails the scheduler's run options."""


class TorchXComponentError(TorchXInputError):
    """Unknown component, component arguments that do not parse, or an invalid ``AppDef``."""


class TorchXCostLimitError(TorchXInputError):
    """The estimated cost of an app is over the task's ``max_cost``: nothing was submitted."""

    def __init__(
        self, task_id: str, max_cost: float, estimate: float, currency: str, explanation: str
    ) -> None:
        super().__init__(
            f"Task {task_id!r}: the estimated cost {estimate:.4f} {currency} is over max_cost={max_cost!r} "
            f"{currency}, so nothing was submitted. Estimate: {explanation}. To run it, raise max_cost, "
            "ask for fewer resources, or set expected_duration if the job is known to run shorter."
        )
        self.task_id = task_id
        self.max_cost = max_cost
        self.estimate = estimate
        self.currency = currency
        self.explanation = explanation


class TorchXCostApprovalError(TorchXCostLimitError):
    """The estimate was over ``max_cost`` and the approver asked rejected it, or no one answered in
    time (``policies.cost.approval``): nothing was submitted."""

    def __init__(self, over: TorchXCostLimitError, reason: str) -> None:
        super().__init__(over.task_id, over.max_cost, over.estimate, over.currency, over.explanation)
        self.reason = reason
        self.args = (
            f"Task {over.task_id!r}: the estimated cost {over.estimate:.4f} {over.currency} is over "
            f"max_cost={over.max_cost!r} {over.currency} and was not approved: {reason}. Nothing was "
            f"submitted. Estimate: {over.explanation}. To run it, clear the task to ask again, raise "
            "max_cost, or ask for fewer resources.",
        )


class TorchXAppHandleError(TorchXInputError):
    """An app handle that is not of the form ``scheduler://session/app_id``."""

    def __init__(self, app_handle: object) -> None:
        super().__init__(
            f"Malformed TorchX app handle: {app_handle!r}. Expected the form "
            "'scheduler://session/app_id' (e.g. 'slurm://torchx/1234'), as pushed to XCom key "
            "'app_handle' by TorchXOperator."
        )
        self.app_handle = app_handle


class TorchXAppNotFoundError(TorchXInputError):
    """The scheduler does not know the app (never existed, purged, or another process's local app)."""

    def __init__(self, app_handle: str, launcher_bound: bool = False) -> None:
        message = f"TorchX app {app_handle!r} is unknown to its scheduler."
        if launcher_bound:  # the scheduler's apps end with the process that launched them
            message += (
                " Local apps are only visible from the process that launched them: wait on them in "
                "the launching task (TorchXOperator with wait_for_completion=True), or use a "
                "scheduler with its own state (e.g. slurm, kubernetes) to wait from another task."
            )
        else:
            message += " Check the handle, and that the app was not purged from the scheduler's history."
        super().__init__(message)
        self.app_handle = app_handle


class TorchXAppFailedError(TorchXError):
    """The app reached a terminal state other than SUCCEEDED (FAILED, CANCELLED or UNKNOWN)."""

    def __init__(
        self,
        app_handle: str,
        state: str,
        msg: str = "",
        structured_error_msg: str = "",
        roles: Mapping[str, list[str]] | None = None,
        usage: Mapping[str, Any] | None = None,
    ) -> None:
        message = f"TorchX app {app_handle} finished in state {state}"
        if msg:
            message += f": {msg}"
        if structured_error_msg and structured_error_msg != "<NONE>":
            message += f"\nstructured error: {structured_error_msg}"
        if usage and usage.get("elapsed_s") is not None:
            message += f"\nusage ({usage.get('source')}): elapsed {usage['elapsed_s']} s"
            if usage.get("cpu_time_s") is not None:
                message += f", CPU time {usage['cpu_time_s']} s"
        super().__init__(message)
        self.app_handle = app_handle
        self.state = state
        self.msg = msg
        self.structured_error_msg = structured_error_msg
        self.roles = dict(roles or {})
        #: what the app used before it ended (``torchx_airflow.policies.cost.usage``), when it was read
        self.usage = dict(usage) if usage is not None else None


class TorchXTaskKilledError(TorchXAppFailedError):
    """The task was killed (marked failed or success, cleared, its DAG run deleted, its
    ``execution_timeout`` passed): its app was cancelled, and nothing more is submitted. The
    ``error`` a policy's ``closed`` hears for a kill."""

    def __init__(self, app_handle: str | None, reason: str) -> None:
        shown = app_handle or "(none submitted)"
        super().__init__(shown, "CANCELLED", f"the task was killed: {reason}")
        self.reason = reason


class TorchXAppTerminalError(TorchXAppFailedError, AirflowFailException):
    """The app ended other than SUCCEEDED where a retry cannot change that (a sensor's wait)."""


class TorchXAppLostError(TorchXError):
    """The scheduler stopped knowing an app while the task waited on it.

    Retryable on purpose: the next try reads the saved handle, reattaches if the scheduler knows the
    app again, and submits anew only if it is gone for good.
    """

    def __init__(self, app_handle: str) -> None:
        super().__init__(
            f"TorchX app {app_handle!r} was known to its scheduler and is not any more (purged from its "
            "history, or the scheduler lost its state). The task's next try reattaches to it if the "
            "scheduler knows it again, and submits it anew otherwise."
        )
        self.app_handle = app_handle


class TorchXWaitInterruptedError(TorchXError):
    """The process waiting for an app is going away (SIGTERM) while the app runs on.

    Retryable on purpose: the app is left running, and the task's next try reattaches to it.
    """

    def __init__(self, app_handle: str, reason: str) -> None:
        super().__init__(
            f"Stopped waiting for TorchX app {app_handle!r} because this process was asked to stop and "
            f"{reason}. The app is left running: the task's next try reattaches to it (give the task "
            "retries), or cancel it by hand."
        )
        self.app_handle = app_handle


class TorchXSchedulerOutageError(TorchXError):
    """The scheduler gave no good answer for longer than ``outage_timeout`` (retryable: the app was
    not touched, and the next try reattaches to it)."""
