"""The examples in the provider's and the tracker package's docstrings run, and say what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest
import torchx_airflow_tracker

import torchx_airflow


def _modules_with_examples() -> list[str]:
    names = []
    for package in (torchx_airflow, torchx_airflow_tracker):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.endswith("__main__") or ".plugins" in info.name:  # a CLI run; the UI's apps
                continue
            spec = importlib.util.find_spec(info.name)
            if spec and spec.origin and ">>>" in Path(spec.origin).read_text():
                names.append(info.name)
    return names


@pytest.mark.parametrize("name", _modules_with_examples())
def test_the_docstring_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0  # (an example marked +SKIP, needing a job to run in, is not attempted)
