"""What the supported Python and TorchX installs need: ``cached_property`` without the class-wide lock
of Python 3.10 and 3.11, and a clear error where neither TorchX distribution is installed.

``functools.cached_property`` before Python 3.12 computes every value under one lock per *class*
(python/cpython#87634): while one instance computes, every other instance of the class waits. An
MLflow store whose server hangs (an experiment lookup retried for minutes) then holds back every other
MLflow store of the process, a lineage view or a trigger of another DAG included. Python 3.12 removed
the lock; this is its ``cached_property`` for the versions before. Two threads asking the same instance
at once may both compute, as on 3.12.

TorchX comes from one of two distributions (the extras ``torchx`` and ``torchx-nightly``), so neither
is a plain dependency: ``TorchXMissingFinder``, last on ``sys.meta_path`` where neither is installed,
turns the first ``import torchx`` into an error that names both install commands (this package's
``__init__`` and the provider's add it).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ["TorchXMissingFinder", "cached_property"]

_T = TypeVar("_T")

if TYPE_CHECKING or sys.version_info >= (3, 12):
    from functools import cached_property  # type checkers see the stdlib's types
else:
    _MISSING = object()

    class cached_property(functools.cached_property[_T]):  # noqa: N801 - the stdlib's name
        """``functools.cached_property`` of Python 3.12: the value is cached in the instance's
        ``__dict__``, and no lock is held while it is computed."""

        def __get__(self, instance: Any, owner: type[Any] | None = None) -> Any:
            if instance is None:
                return self
            if self.attrname is None:
                raise TypeError("Cannot use cached_property instance without calling __set_name__ on it.")
            cache = instance.__dict__
            value = cache.get(self.attrname, _MISSING)
            if value is _MISSING:
                value = self.func(instance)
                cache[self.attrname] = value
            return value


class TorchXMissingFinder:
    """Last on ``sys.meta_path``: an import of ``torchx`` no other finder found fails with both fixes."""

    def __init__(self, distribution: str) -> None:
        self.distribution = distribution

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> None:
        if name != "torchx" and not name.startswith("torchx."):
            return None
        raise ModuleNotFoundError(
            f"{self.distribution} needs TorchX, and neither of its distributions is installed "
            f"(import of {name!r}). Install TorchX main, which installs under Airflow 3.3's constraints: "
            f"pip install '{self.distribution}[torchx-nightly]'; or the 0.7 release, which pins "
            f"urllib3<1.27: pip install '{self.distribution}[torchx]'",
            name=name,
        )
