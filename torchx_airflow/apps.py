"""TorchX app definitions, handles and statuses, as the provider passes them around.

Pure functions with no Airflow state: building an ``AppDef`` from a component and its
command-line arguments, checking app handles, and turning TorchX objects into JSON-safe dicts
for XCom. TorchX is imported inside the functions so that DAG parsing stays cheap.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXAppHandleError, TorchXComponentError

if TYPE_CHECKING:
    from torchx.specs import AppDef, AppDryRunInfo, AppStatus

# scheduler://session/app_id, the one identity string of a TorchX app. The app id may contain "/".
_APP_HANDLE_RE = re.compile(r"^(?P<scheduler>[A-Za-z0-9_\-]+)://(?P<session>[^/]*)/(?P<app_id>.+)$")

SUCCEEDED = "SUCCEEDED"


def check_app_handle(app_handle: object) -> str:
    """Return ``app_handle`` if it has the form ``scheduler://session/app_id``, else raise.

    >>> check_app_handle("slurm://torchx/1234")
    'slurm://torchx/1234'
    """
    if not isinstance(app_handle, str) or not _APP_HANDLE_RE.match(app_handle.strip()):
        raise TorchXAppHandleError(app_handle)
    return app_handle.strip()


def scheduler_of(app_handle: str) -> str:
    """The scheduler name of a (checked) app handle: ``slurm`` for ``slurm://torchx/12``."""
    return check_app_handle(app_handle).split("://", 1)[0]


_ARGS_EXAMPLE = '["--script", "train.py", "--", "--lr", "0.1"]'


def normalize_component_args(component_args: str | Sequence[object] | None) -> list[str]:
    """Component arguments as a list of strings, as ``torchx run`` receives them.

    A string is split like a shell would; numbers are turned into strings; anything else is refused.

    >>> normalize_component_args("--script train.py -- --name 'a b'")
    ['--script', 'train.py', '--', '--name', 'a b']
    """
    if component_args is None:
        return []
    if isinstance(component_args, str):
        try:
            return shlex.split(component_args)
        except ValueError as e:  # "No closing quotation", "No escaped character"
            raise TorchXComponentError(
                f"component_args {component_args!r} cannot be split into arguments like a shell "
                f"command line: {e}. Close the quote (or escape it with a backslash), or pass the "
                f"arguments as a list, e.g. {_ARGS_EXAMPLE}."
            ) from None
    if isinstance(component_args, bytes | bytearray) or not isinstance(component_args, Sequence):
        raise TorchXComponentError(
            f"component_args must be a list of strings, got {component_args!r} "
            f"({type(component_args).__name__}). Pass them as on the torchx command line, "
            f"e.g. {_ARGS_EXAMPLE}."
        )
    args: list[str] = []
    for arg in component_args:
        if isinstance(arg, bool) or not isinstance(arg, str | int | float):
            raise TorchXComponentError(
                f"component_args item {arg!r} is not a string. Pass every argument as a string, "
                f'e.g. ["--lr", "0.1"] rather than ["--lr", {{"value": 0.1}}].'
            )
        args.append(str(arg))
    return args


def build_app_from_component(component: str, component_args: Sequence[str]) -> AppDef:
    """Materialize a TorchX component (builtin, ``file.py:fn`` or entry point) into an ``AppDef``.

    Raises ``TorchXComponentError`` for an unknown component or arguments that do not parse,
    with the component's usage text, before anything is submitted.
    """
    from torchx.specs.builders import materialize_appdef
    from torchx.specs.finder import ComponentNotFoundException, ComponentValidationException, get_component

    if not isinstance(component, str) or not component.strip():
        raise TorchXComponentError(
            f"component must name a TorchX component, got {component!r}. Use a builtin such as "
            "'utils.python' or 'dist.ddp', or 'path/to/components.py:function'."
        )
    try:
        component_def = get_component(component)
    except (ComponentNotFoundException, ComponentValidationException) as e:
        raise TorchXComponentError(
            f"Unknown or invalid TorchX component {component!r}: {e}. Use a builtin such as "
            "'utils.python' or 'dist.ddp' (`torchx builtins` lists them), a file component "
            "'path/to/components.py:function', or one registered under the 'torchx.components' entry point."
        ) from e
    usage = io.StringIO()
    try:
        with contextlib.redirect_stderr(usage), contextlib.redirect_stdout(usage):
            return materialize_appdef(component_def.fn, list(component_args))
    except SystemExit as e:  # argparse exits on arguments it cannot parse
        raise TorchXComponentError(
            f"Arguments {list(component_args)!r} do not parse for component {component!r}. "
            f"Fix them to match its usage:\n{usage.getvalue().strip()}"
        ) from e
    except (TypeError, ValueError) as e:
        raise TorchXComponentError(
            f"Arguments {list(component_args)!r} are invalid for component {component!r}: {e}. "
            f"Fix component_args to match its parameters (`torchx run {component} --help` lists them)."
        ) from e


def role_replicas(app: AppDef) -> dict[str, int]:
    """Role name -> number of replicas, in the app's role order."""
    return {role.name: role.num_replicas for role in app.roles}


def json_safe(value: Any) -> Any:
    """``value`` with every mapping key a string and everything not JSON-native as its ``str``."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v) for v in value]
    return str(value)


def summarize_role(role: Any) -> dict[str, Any]:
    """A JSON-safe description of a TorchX ``Role``; env values are left out (they may be secrets)."""
    resource = role.resource
    return {
        "name": role.name,
        "image": role.image,
        "entrypoint": role.entrypoint,
        "args": [str(a) for a in role.args],
        "num_replicas": role.num_replicas,
        "resource": {
            "cpu": resource.cpu,
            "gpu": resource.gpu,
            "memMB": resource.memMB,
            "capabilities": json_safe(resource.capabilities),
            "devices": json_safe(resource.devices),
        },
        "env_names": sorted(role.env),
    }


def summarize_dryrun(
    dryrun_info: AppDryRunInfo, app: AppDef, scheduler: str, cfg: Mapping[str, Any]
) -> dict[str, Any]:
    """JSON-safe summary of what would be submitted; ``request`` is the scheduler's request as text."""
    from torchx_airflow.secrets import redact_text

    # What TorchX will submit: TorchX main dry-runs a copy of the app (with TORCHX_JOB_ID and the
    # tracker variables in each role's env) and returns it as the public `app`; 0.7 has no such
    # attribute and fills in the caller's app itself.
    submitted = getattr(dryrun_info, "app", None) or app
    return {
        "scheduler": scheduler,
        "app_name": submitted.name,
        "cfg": json_safe(dict(cfg)),
        "roles": [summarize_role(role) for role in submitted.roles],
        "request": redact_text(str(dryrun_info), submitted),
    }


def _text_or_empty(value: str | None) -> str:
    # TorchX writes "<NONE>" where a scheduler gave no message
    return "" if value in (None, "<NONE>") else str(value)


def summarize_status(app_handle: str, status: AppStatus, app: AppDef | None = None) -> dict[str, Any]:
    """JSON-safe view of an ``AppStatus``: the operator's return value and the trigger's event.

    ``roles`` maps each role to its replicas' states as the scheduler reports them. Schedulers that
    report no per-replica state (local_cwd) get, for a SUCCEEDED app whose roles are known, one
    SUCCEEDED per replica (every replica exited 0), and otherwise the role is absent.
    """
    roles: dict[str, list[str]] = {}
    for role_status in status.roles or []:
        roles[role_status.role] = [replica.state.name for replica in role_status.replicas]
    if not roles and app is not None and status.state.name == SUCCEEDED:
        roles = {name: [SUCCEEDED] * n for name, n in role_replicas(app).items()}
    return {
        "app_handle": app_handle,
        "state": status.state.name,
        "msg": _text_or_empty(status.msg),
        "structured_error_msg": _text_or_empty(status.structured_error_msg),
        "num_restarts": status.num_restarts,
        "ui_url": status.ui_url,
        "roles": roles,
    }
