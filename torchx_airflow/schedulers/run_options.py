"""A scheduler's run options (``cfg``), typed the way the scheduler declares them.

A ``cfg`` comes from JSON (a connection extra, a templated operator argument), so a value may be a
string where the scheduler wants a bool, a number or a list. Each value is converted only where the
meaning is certain (``"true"`` for a bool, ``"4"`` for an int, ``"a,b"`` for a list), and anything
else is refused with the option, the value and what to write instead. TorchX's own string parser
is not used for this: it reads any bool other than ``"true"`` as ``False``.
"""

from __future__ import annotations

import typing
from typing import Any

_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


class RunOptionValueError(ValueError):
    """A run option value that does not fit the option's type; ``fix`` says what to write."""

    def __init__(self, option: str, value: Any, takes: str, fix: str) -> None:
        super().__init__(
            f"run option {option!r} takes {takes}, got {value!r} ({type(value).__name__}). {fix}"
        )
        self.option = option
        self.value = value


def type_name(opt_type: Any) -> str:
    """How an option type reads in a message: ``bool``, ``list of strings``..."""
    if _is_list(opt_type):
        return "a list of strings"
    if _is_dict(opt_type):
        return "an object of strings"
    return {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}.get(
        opt_type, getattr(opt_type, "__name__", str(opt_type))
    )


def _is_list(opt_type: Any) -> bool:
    return opt_type is list or typing.get_origin(opt_type) is list


def _is_dict(opt_type: Any) -> bool:
    return opt_type is dict or typing.get_origin(opt_type) is dict


def typed_value(option: str, value: Any, opt_type: Any) -> Any:
    """``value`` as ``opt_type``, converting strings as on the command line; None stays None.

    >>> typed_value("prepend_cwd", "True", bool)
    True
    >>> typed_value("copy_env", "A,B", list[str])
    ['A', 'B']
    """
    if value is None:
        return None
    takes = type_name(opt_type)
    if opt_type is bool:
        return _to_bool(option, value, takes)
    if opt_type is int or opt_type is float:
        return _to_number(option, value, opt_type, takes)
    if opt_type is str:
        if isinstance(value, str):
            return value
        quoted = f', e.g. "{value}"' if isinstance(value, int | float) else ""
        raise RunOptionValueError(option, value, takes, f"Write it as a JSON string{quoted}.")
    if _is_list(opt_type):
        return _to_list(option, value, takes)
    if _is_dict(opt_type):
        return _to_dict(option, value, takes)
    return value  # a type this module does not know: TorchX's own check decides


def _to_bool(option: str, value: Any, takes: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise RunOptionValueError(option, value, takes, "Write true or false.")


def _to_number(option: str, value: Any, opt_type: type, takes: str) -> int | float:
    example = "4" if opt_type is int else "0.5"
    fix = f"Write it as a JSON number, e.g. {example}."
    if isinstance(value, bool):
        raise RunOptionValueError(option, value, takes, fix)
    if isinstance(value, int) or (opt_type is float and isinstance(value, float)):
        return opt_type(value)
    if isinstance(value, str):
        try:
            return opt_type(value.strip())
        except ValueError:
            pass
    raise RunOptionValueError(option, value, takes, fix)


def _to_list(option: str, value: Any, takes: str) -> list[str]:
    if isinstance(value, str):  # as on the torchx command line: "a,b" or "a;b"
        return [item.strip() for item in value.replace(";", ",").split(",") if item.strip()]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise RunOptionValueError(option, value, takes, 'Write it as e.g. ["A", "B"] or "A,B".')


def _to_dict(option: str, value: Any, takes: str) -> dict[str, str]:
    fix = 'Write it as e.g. {"KEY": "value"} or "KEY:value,OTHER:value".'
    if isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return value
    if not isinstance(value, str):
        raise RunOptionValueError(option, value, takes, fix)
    pairs = [item for item in value.replace(";", ",").split(",") if item.strip()]
    if not all(":" in pair for pair in pairs):
        raise RunOptionValueError(option, value, takes, fix)
    return {key.strip(): val for key, val in (pair.split(":", 1) for pair in pairs)}
