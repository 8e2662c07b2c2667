"""The ``[torchx]`` section of the Airflow config: one table, from which everything else is rendered.

Each ``SiteOption`` is one site-wide default that a connection extra or a task parameter may
override (``settings.resolve``). ``get_provider_info()`` describes the section from this table
(``provider_config``), the docs' options page is rendered from it (``options_markdown``; a test
compares the page with it), and ``site_value`` reads an option, checked, from the Airflow config.

    python -m torchx_airflow.settings.options    # the docs' table, as markdown
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

SECTION = "torchx"
VERSION_ADDED = "0.1.0"


@dataclass(frozen=True)
class SiteOption:
    """One ``[torchx]`` option: its type (``float``, ``integer`` or ``string``), default, example and
    text, and the check its value passes wherever it is given."""

    name: str
    type: str
    default: float | int | str
    example: str
    description: str
    overridden_by: str
    #: the function of ``settings.checks`` that checks a value: ``f(value, where)``, or
    #: ``f(value, name, where)`` for the generic ``check_positive_seconds`` and ``check_count``
    checker: str

    def check(self, value: Any, where: str) -> Any:
        """``value`` checked (None when unset); raises ``TorchXConfigError`` naming the fix."""
        # imported here: Airflow loads this module (through get_provider_info) while it starts up
        from torchx_airflow.settings import checks

        check = getattr(checks, self.checker)
        if self.checker in ("check_positive_seconds", "check_count"):
            return check(value, self.name, where)
        return check(value, where)

    def read(self) -> float | int | str:
        """The option's value in the Airflow config, checked; its default when unset."""
        from airflow.sdk.configuration import conf

        where = f"[{SECTION}] {self.name}"
        text = conf.get(SECTION, self.name, fallback=None)
        value = self.check(_number(text) if self.type == "float" else text, where)
        return self.default if value is None else value


OPTIONS: tuple[SiteOption, ...] = (
    SiteOption(
        "outage_timeout",
        "float",
        600.0,
        "1800",
        "Seconds a wait on a TorchX app goes on while its scheduler gives no answer (a controller "
        "restart, an API server failing over), counted from the last good answer.",
        "a torchx connection's extra outage_timeout, a task's outage_timeout",
        "check_outage_timeout",
    ),
    SiteOption(
        "infrastructure_retries",
        "integer",
        3,
        "5",
        "Times a TorchX job that the infrastructure ended (Slurm NODE_FAIL, PREEMPTED, BOOT_FAIL) is "
        "resubmitted within the same task try, resuming from its last checkpoint, without using the "
        "task's retries; 0 never resubmits.",
        "a torchx connection's extra infrastructure_retries, a task's infrastructure_retries",
        "check_infrastructure_retries",
    ),
    SiteOption(
        "poll_interval",
        "float",
        5.0,
        "30",
        "Seconds between status checks of a TorchXOperator's wait.",
        "a task's poll_interval",
        "check_positive_seconds",
    ),
    SiteOption(
        "tracker_timeout",
        "float",
        60.0,
        "120",
        "Seconds a TorchXOperator gives its trackers at each step.",
        "a task's tracker_timeout",
        "check_positive_seconds",
    ),
    SiteOption(
        "max_log_lines",
        "integer",
        1000,
        "5000",
        "Number of last log lines per replica and stream a TorchXOperator prints after a deferred wait.",
        "a task's max_log_lines",
        "check_count",
    ),
    SiteOption(
        "min_poll_interval",
        "float",
        1.0,
        "5",
        "Shortest interval, in seconds, of the triggerer's shared status query: a deferred wait with "
        "a shorter poll_interval (a sensor with poke_interval=0) is polled this often.",
        "nothing: it is the triggerer's",
        "check_non_negative_seconds",
    ),
    SiteOption(
        "cache_ttl",
        "float",
        timedelta(days=30).total_seconds(),
        "604800",
        "Seconds a cached result is reused (caching is opt-in per task or connection).",
        "a torchx connection's extra cache_ttl, a task's cache_ttl",
        "check_ttl",
    ),
    SiteOption(
        "cache_key_secret",
        "string",
        "",
        "torchx_cache_key",
        "Id of the Airflow Variable (else Connection, its password) holding the deployment's cache key: "
        "one key of 32 characters or more, or a JSON list of keys (the first signs, all verify). Cache "
        "records are signed with it and secret values enter cache keys as an HMAC under it; no job "
        "receives it. Unset: a cached task refuses to run, naming this option.",
        "nothing: it is the deployment's",
        "check_secret_id",
    ),
    SiteOption(
        "cache_scope",
        "string",
        "dag",
        "deployment",
        "Which tasks share cached results: dag (only tasks of the same DAG) or deployment (every DAG "
        "of this Airflow with the same cache key; a hit then hands one DAG another DAG's result, "
        "handle and artifact paths).",
        "a torchx connection's extra cache_scope, a task's cache_scope",
        "check_cache_scope",
    ),
    SiteOption(
        "output_roots",
        "string",
        "",
        "/shared/runs, s3://ml/models",
        "Where the tasks' jobs write their outputs: directories or URL prefixes, comma-separated or a "
        "JSON list. A path read back from a tracker store (a cache input or output, a checkpoint to "
        "resume from, an artifact promoted or published as an asset event) counts only under these, "
        "or under a directory the task's own arguments name as an output (a directory, or a path not "
        "made yet; never a file's directory). Empty: only those.",
        "a torchx connection's extra output_roots",
        "check_output_roots",
    ),
    SiteOption(
        "checkpoint_root",
        "string",
        "",
        "/shared/checkpoints",
        "Deprecated: set output_roots. A directory (or URL prefix) added to the output roots a resumed "
        "job's checkpoint may lie under.",
        "a torchx connection's extra checkpoint_root, a task's checkpoint_root",
        "check_checkpoint_root",
    ),
)

BY_NAME = {option.name: option for option in OPTIONS}


def site_value(name: str) -> Any:
    """``[torchx] name`` from the Airflow config, checked; the option's default when unset."""
    return BY_NAME[name].read()


def provider_config() -> dict[str, Any]:
    """The ``config`` entry of ``get_provider_info()``: the ``[torchx]`` section from ``OPTIONS``."""
    return {
        SECTION: {
            "description": "Defaults of the TorchX provider.",
            "options": {
                option.name: {
                    "description": f"{option.description} Overridden by {option.overridden_by}."
                    if not option.overridden_by.startswith("nothing")
                    else option.description,
                    "version_added": VERSION_ADDED,
                    "type": option.type,
                    "example": option.example,
                    "default": _text(option.default),
                }
                for option in OPTIONS
            },
        }
    }


def _number(text: Any) -> Any:
    """The config's text as a float where it is one (else as it is, for the check to refuse)."""
    try:
        return float(text) if isinstance(text, str) and text.strip() else text
    except ValueError:
        return text


def _text(value: float | int | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else str(value)


def _shown_default(value: float | int | str) -> str:
    return f"`{_text(value)}`" if _text(value) else "unset"


def options_markdown() -> str:
    """The docs' table of ``[torchx]`` options (``docs/reference.md`` holds it, a test compares)."""
    rows = [
        "| option | type | default | overridden by | what it sets |",
        "| --- | --- | --- | --- | --- |",
    ]
    for option in OPTIONS:
        rows.append(
            f"| `{option.name}` | {option.type} | {_shown_default(option.default)} | "
            f"{option.overridden_by} | {option.description} |"
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(options_markdown(), end="")
