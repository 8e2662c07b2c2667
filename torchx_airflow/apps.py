"""TorchX apps as the provider passes them around: the one app builder, the one handle parser.

Pure functions with no Airflow state: building a task's ``AppDef`` (from a component and its
command-line arguments or an ``AppDef``, named and with its env merged), parsing app handles and
tracker run ids, and turning TorchX objects into JSON-safe dicts for XCom. TorchX is imported
inside the functions so that DAG parsing stays cheap.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import io
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from torchx_airflow.exceptions import TorchXAppHandleError, TorchXComponentError, TorchXConfigError

if TYPE_CHECKING:
    from torchx.specs import AppDef, AppDryRunInfo, AppStatus

    from torchx_airflow.settings.connection import TorchXConnectionSettings

# scheduler://session/app_id, the one identity string of a TorchX app. The app id may contain "/".
_APP_HANDLE_RE = re.compile(r"^(?P<scheduler>[A-Za-z0-9_\-]+)://(?P<session>[^/]*)/(?P<app_id>.+)$")

SUCCEEDED = "SUCCEEDED"
#: The scheme of tracker run ids of tasks that are not TorchX apps (``airflow://dag/run/task``).
AIRFLOW_RUN_SCHEME = "airflow"


class AppHandle(NamedTuple):
    """The parts of an app handle ``scheduler://session/app_id`` (the app id may contain ``/``).

    >>> AppHandle.parse("slurm://torchx/1234").app_id
    '1234'
    >>> str(AppHandle("slurm", "torchx", "1234"))
    'slurm://torchx/1234'
    """

    scheduler: str
    session: str
    app_id: str

    @classmethod
    def match(cls, value: object) -> AppHandle | None:
        """The parts of ``value`` if it is an app handle (or an ``airflow://`` run id), else None."""
        found = _APP_HANDLE_RE.match(value.strip()) if isinstance(value, str) else None
        return cls(found["scheduler"], found["session"], found["app_id"]) if found else None

    @classmethod
    def parse(cls, app_handle: object) -> AppHandle:
        """Split ``app_handle``; raise ``TorchXAppHandleError`` if it is not of that form."""
        match = _APP_HANDLE_RE.match(app_handle.strip()) if isinstance(app_handle, str) else None
        if match is None:
            raise TorchXAppHandleError(app_handle)
        return cls(match["scheduler"], match["session"], match["app_id"])

    def __str__(self) -> str:
        return f"{self.scheduler}://{self.session}/{self.app_id}"


def check_app_handle(app_handle: object) -> str:
    """Return ``app_handle`` if it has the form ``scheduler://session/app_id``, else raise.

    >>> check_app_handle("slurm://torchx/1234")
    'slurm://torchx/1234'
    """
    return str(AppHandle.parse(app_handle))


def scheduler_of(app_handle: str) -> str:
    """The scheduler name of an app handle: ``slurm`` for ``slurm://torchx/12``."""
    return AppHandle.parse(app_handle).scheduler


def airflow_run_id(dag_id: str, run_id: str, task_id: str, map_index: int | None = -1) -> str:
    """Tracker run id of a task that is not a TorchX app: ``airflow://dag/run/task[/map_index]``."""
    base = f"{AIRFLOW_RUN_SCHEME}://{dag_id}/{run_id}/{task_id}"
    return base if map_index is None or map_index < 0 else f"{base}/{map_index}"


def is_app_handle(run_id: str) -> bool:
    """Whether a tracker run id is a TorchX app's handle (not an ``airflow://`` task run, not junk)."""
    match = _APP_HANDLE_RE.match(run_id)
    return match is not None and match["scheduler"] != AIRFLOW_RUN_SCHEME


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


_NOT_NAME = re.compile(r"[^a-z0-9-]+")


def app_name_for(task_id: str) -> str:
    """A TorchX app name from a task id that every scheduler accepts: ``Train.Step_1`` -> ``train-step-1``."""
    return _NOT_NAME.sub("-", task_id.lower()).strip("-")[:40].rstrip("-") or "app"


def mapping_param(task_id: str, name: str, value: Any) -> dict[str, Any]:
    """A mapping parameter after rendering: a dict, or the JSON / Python-literal text a template gave.

    ``cfg="{{ params.cfg }}"`` renders to the text of a dict unless the DAG renders native objects;
    both work. Anything else is refused, naming the parameter, the value and the fix.
    """
    if value is None or value == "":
        return {}
    given = value
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            try:
                value = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                pass
    if not isinstance(value, Mapping):
        raise TorchXConfigError(
            f"Task {task_id!r}: {name!r} must be a mapping (a dict, or a template rendering to the JSON "
            f'of one), got {given!r}. Write it as e.g. {name}={{"key": "value"}}, or template it from a '
            f'param holding an object: {name}="{{{{ params.{name} }}}}".'
        )
    return dict(value)


def build_task_app(
    task_id: str,
    *,
    component: str | None = None,
    component_args: str | Sequence[object] | None = None,
    app: AppDef | None = None,
    env: Any = None,
    app_name: str | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> AppDef:
    """The ``AppDef`` a task runs: the component's, or a copy of ``app``, named and with its env.

    Every role's env is its own, then ``extra_env`` (what the provider adds: tracker variables, the
    OpenLineage parent), then the task's ``env``, which wins. The name is ``app_name``, else the task
    id made scheduler-safe; ``app_name=""`` keeps the component's own. The one builder: the operator
    submits what it returns, and OpenLineage describes the same app before it is submitted.
    """
    from torchx_airflow.settings.checks import check_env_names

    given_env = mapping_param(task_id, "env", env)
    check_env_names(given_env, f"Task {task_id!r}: env")
    task_env = {str(k): str(v) for k, v in given_env.items()}
    if component is not None:
        built = build_app_from_component(component, normalize_component_args(component_args))
    elif app is not None:
        built = copy.deepcopy(app)
    else:
        raise TorchXComponentError(f"Task {task_id!r}: give a component or an AppDef to build an app from.")
    for role in built.roles:
        check_env_names(role.env, f"Task {task_id!r}: the env of role {role.name!r}")
        role.env = {**role.env, **(extra_env or {}), **task_env}
    name = app_name_for(task_id) if app_name is None else str(app_name).strip()
    if name:
        built.name = name
    return built


#: Files of an app's arguments a cache key fingerprints at most.
MAX_NAMED_FILES = 64


def local_path(path: str) -> str | None:
    """The local path ``path`` names (a plain path or a ``file://`` URL), or None for a remote URL.

    >>> local_path("/data/x.csv"), local_path("file:///data/x.csv"), local_path("s3://b/x.csv")
    ('/data/x.csv', '/data/x.csv', None)
    """
    from urllib.parse import urlsplit

    parts = urlsplit(path)
    if not parts.scheme or len(parts.scheme) == 1:  # a path (or a Windows drive letter)
        return path
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return parts.path or "/"
    return None


def argument_words(arg: str) -> list[str]:
    """The words of one argument that may name a file: itself, ``--opt=value``'s value, the words of
    a shell command (``bash -c "torchrun ... train.py"``), the items of an ``a,b,c`` list.

    >>> argument_words("--models=/r/a.pt,/r/b.pt")
    ['--models=/r/a.pt,/r/b.pt', '/r/a.pt,/r/b.pt', '--models=/r/a.pt', '/r/b.pt', '/r/a.pt', '/r/b.pt']
    """
    words = [arg]
    if any(c.isspace() for c in arg):
        try:
            words += shlex.split(arg)
        except ValueError:
            words += arg.split()
    for word in list(words):
        if "=" in word:
            words.append(word.split("=", 1)[1])
        if "," in word:
            words += word.split(",")
    for word in list(words[len([arg]) :]):  # a --opt=a,b value's items
        if "," in word:
            words += word.split(",")
    return words


def argument_paths(app: AppDef | None) -> list[str]:
    """The absolute local paths (plain, or ``file://`` URLs) the app's entrypoints and arguments name,
    normalised, in order; never ``/`` or anything under ``/proc``, ``/sys`` or ``/dev``."""
    import os
    import posixpath

    found: dict[str, None] = {}
    for role in app.roles if app is not None else ():
        for arg in [role.entrypoint, *role.args]:
            for word in argument_words(str(arg)):
                # a word holding spaces is a whole command or an option's text, not a path
                path = local_path(word) if word and not any(c.isspace() for c in word) else None
                if path and os.path.isabs(path) and len(path) < 4096:
                    path = posixpath.normpath(path)
                    if path != "/" and not any(path == t or path.startswith(t + "/") for t in _SYSTEM_TREES):
                        found.setdefault(path)
    return list(found)


def named_files(app: AppDef) -> list[str]:
    """The existing local files the app's entrypoints and arguments name (job scripts, configs, data
    read by path), relative ones as seen from this process's directory; the first ``MAX_NAMED_FILES``."""
    import os

    found: dict[str, None] = {}
    for role in app.roles:
        for arg in [role.entrypoint, *role.args]:
            for word in argument_words(str(arg)):
                if len(found) >= MAX_NAMED_FILES:
                    return list(found)
                if word and ("/" in word or "." in word) and len(word) < 4096 and _is_file(word):
                    found.setdefault(os.path.abspath(word))
    return list(found)


def _is_file(word: str) -> bool:
    import os

    try:
        return os.path.isfile(word)
    except ValueError:  # a NUL in the word
        return False


def output_roots(app: AppDef) -> tuple[str, ...]:
    """The directories the task's own rendered arguments name as outputs: an absolute path in an
    argument (or an ``--opt=/path`` value, a ``a,b`` list's item) that is a directory here, or that
    does not exist yet (the job makes it). Never a file's directory (a file named is an input),
    never a parent of anything, never ``/`` or anything under ``/proc``, ``/sys`` or ``/dev``."""
    import os

    return tuple(p for p in argument_paths(app) if not os.path.lexists(p) or os.path.isdir(p))


def task_output_roots(
    app: AppDef, connection: TorchXConnectionSettings | None, *more: str | None
) -> tuple[str, ...]:
    """Where the task's outputs may lie: the deployment's ``output_roots`` (the connection's, else
    ``[torchx]``'s, and ``more``: ``settings.resolve.output_roots``), the directories its own
    arguments name as outputs (``output_roots``), and each file they name as itself (an input the
    task was given, which a job may hand on, never a sibling of it)."""
    import os

    from torchx_airflow.settings.resolve import output_roots as configured

    files = [p for p in argument_paths(app) if os.path.isfile(p)]
    return tuple(dict.fromkeys([*configured(connection, *more), *output_roots(app), *files]))


_SYSTEM_TREES = ("/proc", "/sys", "/dev")


def is_under(path: str, root: str) -> bool:
    """Whether ``path`` (a local path, ``file://`` URL or URL) lies under ``root`` (a directory or a
    URL prefix), ``..`` resolved: ``/ckpt/run/x.pt`` is under ``/ckpt``, ``/ckpt/../etc`` is not."""
    import posixpath

    def normal(text: str) -> str:
        text = text.removeprefix("file://")
        scheme, sep, rest = text.partition("://")
        if not sep:
            return posixpath.normpath(text) if text.startswith("/") else ""
        return f"{scheme}://{posixpath.normpath('/' + rest).lstrip('/')}"

    path_n, root_n = normal(path), normal(root).rstrip("/")
    return bool(path_n and root_n) and (path_n == root_n or path_n.startswith(root_n + "/"))


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


def app_words(app: AppDef) -> str:
    """Every role's entrypoint, arguments and env values, one per line: where an app names a path."""
    lines = [str(v) for role in app.roles for v in (role.entrypoint, *role.args, *role.env.values())]
    return "\n".join(lines)


def names_path(words: str, path: str) -> bool:
    """Whether ``words`` (``app_words``) name ``path``: whole, or as the directory of a path named.

    The path must not be part of a longer name: ``/out/train-1`` is not named by ``/out/train-10``.

    >>> names_path("--data /out/d.csv,/out/e.csv", "/out/d.csv"), names_path("/out/d.csv.bak", "/out/d.csv")
    (True, False)
    """
    if not path:
        return False
    pattern = rf"(?<![\w.\-/]){re.escape(path.rstrip('/') or path)}(?![\w.\-])"
    return re.search(pattern, words) is not None


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
