"""Every check of a setting's value, wherever it is given: a task parameter, a connection extra, ``[torchx]``.

Each check takes the value and where it was given (``"Task 'train'"``, ``"Connection 'x'"``,
``"[torchx] outage_timeout"``), returns it normalised, and raises ``TorchXConfigError`` naming the
value and the fix. None (unset) stays None: the next level of the resolver decides
(``settings.resolve``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from torchx_airflow.exceptions import TorchXConfigError
from torchx_airflow.settings.extras import split_list

#: Defaults of the settings the checks below mention in their messages (``settings.options`` has all).
DEFAULT_OUTAGE_TIMEOUT = 600.0
DEFAULT_INFRASTRUCTURE_RETRIES = 3


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_env_names(names: Iterable[object], where: str) -> None:
    """Every name an environment variable name (``[A-Za-z_][A-Za-z0-9_]*``).

    A name holding ``,`` or ``=`` would split ``srun --export=ALL,K=V,...`` (Slurm) into other
    variables, and a shell could not read it anyway: refused before anything is submitted.
    """
    for name in names:
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise TorchXConfigError(
                f"{where}: {name!r} is not an environment variable name: names are letters, digits and "
                "'_', not starting with a digit (a ',' or '=' would split the job's --export list into "
                "other variables). Rename it, e.g. 'MY_SETTING'; put anything else in the value."
            )


def _finite(value: Any) -> float | None:
    """``value`` as a finite float: a number, or a string holding one (a connection extra typed in
    the UI, a ``[torchx]`` option); None for anything else, NaN and infinities included, which would
    make a wait end at once or never and a TTL keep a result forever."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def check_positive_seconds(value: Any, name: str, where: str) -> float | None:
    """``value`` as a positive, finite number of seconds (a numeric string becomes its number)."""
    if value is None or value == "":
        return None
    seconds = _finite(value)
    if seconds is None or not seconds > 0:
        raise TorchXConfigError(
            f"{where}: {name} must be a positive, finite number of seconds, got {value!r}. Write it as "
            f"e.g. {name}=60, or leave it out for [torchx] {name}."
        )
    return value if isinstance(value, int | float) else seconds


def check_non_negative_seconds(value: Any, where: str) -> float | None:
    """``value`` as seconds, 0 or more (a negative number counts as 0); finite."""
    if value is None or value == "":
        return None
    seconds = _finite(value)
    if seconds is None:
        raise TorchXConfigError(
            f"{where} must be a finite number of seconds (0 or more), got {value!r}. Write it as e.g. 5."
        )
    return max(0.0, seconds)


def check_count(value: Any, name: str, where: str) -> int | None:
    """``value`` as a whole number, 0 or more."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise TorchXConfigError(f"{where}: {name} must be 0 or more, got {value!r}.")
    return int(str(value).strip())


def check_outage_timeout(value: Any, where: str) -> float | None:
    """``value`` as seconds (None stays None: the next level decides); raises ``TorchXConfigError``."""

    if value is None or value == "":
        return None
    seconds = _finite(value)
    if seconds is None or not seconds > 0:
        raise TorchXConfigError(
            f"{where}: outage_timeout must be a positive, finite number of seconds, got {value!r}. "
            f"Give e.g. 1800 (wait out a scheduler outage of up to 30 minutes), or leave it unset "
            f"for [torchx] outage_timeout ({DEFAULT_OUTAGE_TIMEOUT:.0f} s by default)."
        )
    return seconds


def check_infrastructure_retries(value: Any, where: str) -> int | None:
    """``value`` as a count of resubmissions (None stays None: the next level decides)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise TorchXConfigError(
            f"{where}: infrastructure_retries must be a whole number of resubmissions (0 or more), got "
            f"{value!r}. Give e.g. 3 (resubmit a job its nodes failed or a preemption ended up to 3 "
            f"times), 0 to never resubmit, or leave it unset for [torchx] infrastructure_retries "
            f"({DEFAULT_INFRASTRUCTURE_RETRIES} by default)."
        )
    return int(str(value).strip())


def check_checkpoint_artifact(name: Any, where: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise TorchXConfigError(
            f"{where}: checkpoint_artifact must be the name of an artifact the app records with "
            f"AppRun.add_artifact(name, path), got {name!r}. Give e.g. 'checkpoint' (the default)."
        )
    return name


def check_output_roots(value: Any, where: str) -> tuple[str, ...] | None:
    """``output_roots``: absolute directories or URL prefixes (``s3://ml/models``), as a list, a JSON
    list or one comma-separated string; None or empty stays None (the next level decides).

    >>> check_output_roots("/shared/runs, s3://ml/models/", "[torchx] output_roots")
    ('/shared/runs', 's3://ml/models')
    """
    if value is None or (isinstance(value, str | list | tuple) and not value):
        return None
    example = '["/shared/runs", "s3://ml/models"], or as one comma-separated string'
    value = split_list(value, f"{where}: output_roots", example, TorchXConfigError)
    if not isinstance(value, list | tuple):
        raise TorchXConfigError(
            f"{where}: output_roots must be a list of directories or URL prefixes, got {value!r}. Write it "
            'as e.g. ["/shared/runs", "s3://ml/models"].'
        )
    return tuple(_root(entry, "output_roots", where) for entry in value) or None


def _root(value: Any, name: str, where: str) -> str:
    """One root: an absolute directory or a URL prefix, without ``..``; never ``/`` itself."""
    text = value.strip() if isinstance(value, str) else ""
    is_url = "://" in text and not text.startswith("file://")
    path = text.removeprefix("file://")
    if (
        not text
        or (not is_url and not path.startswith("/"))
        or ".." in path.split("/")
        or path.rstrip("/") == ""
    ):
        raise TorchXConfigError(
            f"{where}: {name} must name absolute directories or URL prefixes where the task's jobs write "
            f"their outputs, got {value!r}. Write it as e.g. '/shared/runs' or 's3://bucket/models'."
        )
    return text.rstrip("/")


def check_checkpoint_root(value: Any, where: str) -> str | None:
    """``checkpoint_root``: an absolute directory or a URL prefix (``s3://bucket/ckpt``), without
    ``..``; None or "" stays None (the next level decides; in the end the task's output root)."""
    if value is None or value == "":
        return None
    try:
        return _root(value, "checkpoint_root", where)
    except TorchXConfigError:
        raise TorchXConfigError(
            f"{where}: checkpoint_root must be an absolute directory or a URL prefix where the task's "
            f"jobs write their checkpoints, got {value!r}. Write it as e.g. '/shared/checkpoints' or "
            "'s3://bucket/checkpoints', or leave it unset for the task's output root. checkpoint_root is "
            "deprecated: set output_roots instead."
        ) from None


def check_ignore_args(value: Any, where: str) -> tuple[str, ...]:
    """``cache_ignore_args`` as a tuple of non-empty strings; anything else is refused.

    >>> check_ignore_args(["--out=*", "/tmp/run-*"], "Task 't'")
    ('--out=*', '/tmp/run-*')
    """
    if value is None:
        return ()
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or not all(isinstance(v, str) and v.strip() for v in value)
    ):
        raise TorchXConfigError(
            f"{where}: cache_ignore_args must be a list of option names or patterns, got {value!r}. "
            'Write it as e.g. ["--out=*", "-v", "/tmp/run-*"]: "--out=*" ignores the value of an option '
            'that takes one, a bare name such as "-v" a flag (never the argument after it), anything '
            "else is an fnmatch pattern matched against whole arguments."
        )
    return tuple(v.strip() for v in value)


def check_ttl(value: Any, where: str) -> float | None:
    """``cache_ttl`` in seconds (a number or a ``timedelta``); None keeps the default."""
    if value is None:
        return None
    seconds = _finite(value.total_seconds() if isinstance(value, timedelta) else value)
    if seconds is None or not seconds > 0:
        raise TorchXConfigError(
            f"{where}: cache_ttl must be a positive, finite number of seconds or a timedelta, got {value!r}. "
            "Write it as e.g. cache_ttl=timedelta(days=7) or cache_ttl=604800."
        )
    return float(seconds)


def check_cost_params(
    task_id: str, expected_duration: timedelta | float | None, max_cost: float | None
) -> tuple[float | None, float | None]:
    """A task's ``expected_duration`` in seconds and its ``max_cost``, checked: both positive numbers
    (``expected_duration`` may be a ``timedelta``) or None. Raises ``TorchXConfigError``."""
    seconds = (
        expected_duration.total_seconds() if isinstance(expected_duration, timedelta) else expected_duration
    )
    for name, value, example in (
        ("expected_duration", seconds, "timedelta(hours=2) or 7200"),
        ("max_cost", max_cost, "25.0"),
    ):
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            shown = expected_duration if name == "expected_duration" else value
            raise TorchXConfigError(
                f"Task {task_id!r}: {name} must be a positive number, got {shown!r}. Write it as e.g. "
                f"{name}={example}, or leave it out."
            )
    return (float(seconds) if seconds is not None else None), (
        float(max_cost) if max_cost is not None else None
    )


def check_cache(cache: Any, wait_for_completion: bool, where: str) -> bool | None:
    """A task's ``cache``: True, False or None (the connection decides); True needs waiting."""
    if cache is not None and not isinstance(cache, bool):
        # "false" is truthy: a string would turn caching on where its author meant it off
        raise TorchXConfigError(
            f"{where}: cache must be True or False (or None: the connection decides), got {cache!r}. "
            "Write cache=True or cache=False, without quotes."
        )
    if cache and not wait_for_completion:
        raise TorchXConfigError(
            f"{where}: cache=True needs wait_for_completion=True: a task that does not wait never sees "
            "its app succeed, so it could never record a result to reuse. Set wait_for_completion=True, "
            "or cache=False."
        )
    return cache


CACHE_SCOPES = ("dag", "deployment")


def check_cache_scope(value: Any, where: str) -> str | None:
    """``cache_scope``: ``"dag"`` (hits only within the DAG) or ``"deployment"``; None: the next level.

    >>> check_cache_scope("deployment", "Task 't'")
    'deployment'
    """
    if value is None or value == "":
        return None
    if not isinstance(value, str) or value.strip() not in CACHE_SCOPES:
        raise TorchXConfigError(
            f"{where}: cache_scope must be one of {list(CACHE_SCOPES)}, got {value!r}. Give 'dag' (the "
            "default: a task takes only results of its own DAG) or 'deployment' (results shared by every "
            "DAG of the deployment)."
        )
    return value.strip()


def check_secret_id(value: Any, where: str) -> str | None:
    """The id of an Airflow Variable or Connection (``[torchx] cache_key_secret``); None when unset."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str) or any(c.isspace() for c in value.strip()):
        raise TorchXConfigError(
            f"{where} must be the id of an Airflow Variable or Connection holding the cache key, got "
            f"{value!r}. Give e.g. torchx_cache_key (AIRFLOW_VAR_TORCHX_CACHE_KEY=<key>)."
        )
    return value.strip()
