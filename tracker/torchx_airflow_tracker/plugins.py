"""The stores' registration in TorchX's plugin registry, beside the ``torchx.tracker`` entry points.

TorchX 0.7 finds trackers only through ``torchx.tracker`` entry points (``pyproject.toml``). TorchX
main deprecates them for its plugin registry: factories decorated with ``@register.tracker(name=...)``
in modules of the ``torchx_plugins.tracker`` namespace package, and ``TORCHX_PLUGINS_SOURCE=1`` turns
entry points off. This distribution does both: ``torchx_plugins/tracker/torchx_airflow.py`` registers
``STORES`` here, under the entry points' names.

TorchX main warns about every name registered both ways (the entry point wins), so a name is
registered here only where TorchX will not also find it as one of our entry points: entry points
read (``TORCHX_PLUGINS_SOURCE`` unset, ``2`` or ``3``) and this distribution's metadata installed.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

__all__ = ["STORES", "namespace_plugins"]

_FSSPEC = "torchx_airflow_tracker.fsspec_store:create"
_MLFLOW = "torchx_airflow_tracker.mlflow_store:create"
#: Every tracker name of this distribution and its factory (``module:function``): the same table as
#: ``[project.entry-points."torchx.tracker"]`` (a test holds the two equal).
STORES: dict[str, str] = {
    "airflow_fsspec": _FSSPEC,
    "airflow_fsspec_2": _FSSPEC,
    "airflow_fsspec_3": _FSSPEC,
    "airflow_fsspec_4": _FSSPEC,
    "airflow_mlflow": _MLFLOW,
    "airflow_mlflow_2": _MLFLOW,
    "airflow_mlflow_3": _MLFLOW,
    "airflow_mlflow_4": _MLFLOW,
    "airflow_stores": "torchx_airflow_tracker.multi_store:create",
}

ENTRY_POINT_GROUP = "torchx.tracker"
_ENTRY_POINTS_BIT = 2  # TorchX main's PluginSource.ENTRYPOINT in TORCHX_PLUGINS_SOURCE (a bit mask)


def _names_torchx_reads_as_entry_points() -> set[str]:
    """Our names TorchX also loads through entry points in this process (none when it reads none)."""
    raw = os.environ.get("TORCHX_PLUGINS_SOURCE", "3")  # TorchX's default: both channels
    try:
        reads_entry_points = bool(int(raw) & _ENTRY_POINTS_BIT)
    except ValueError:  # TorchX refuses the value itself, naming it
        reads_entry_points = False
    if not reads_entry_points:
        return set()
    ours = entry_points(group=ENTRY_POINT_GROUP)
    return {ep.name for ep in ours if ep.name in STORES and ep.value == STORES[ep.name]}


def _factory(name: str, target: str, module_name: str) -> Callable[[str | None], Any]:
    """A factory defined, as TorchX's scanner requires, in ``module_name``; imports the store lazily."""

    def factory(config: str | None) -> Any:
        module, function = target.split(":")
        return getattr(importlib.import_module(module), function)(config)

    factory.__name__ = factory.__qualname__ = name
    factory.__module__ = module_name
    factory.__doc__ = f"TorchX tracker {name!r}: {target}(config)."
    return factory


def namespace_plugins(module_name: str) -> dict[str, Callable[[str | None], Any]]:
    """The ``@register.tracker`` factories for the namespace module ``module_name`` (it puts them in its
    globals, where TorchX's scanner looks): every name of ``STORES`` not found as an entry point."""
    # TorchX main only (its scanner is what imports the caller); imported by name, as TorchX 0.7 has none
    register = importlib.import_module("torchx.plugins").register
    skip = _names_torchx_reads_as_entry_points()
    return {
        name: register.tracker(name=name)(_factory(name, target, module_name))
        for name, target in STORES.items()
        if name not in skip
    }
